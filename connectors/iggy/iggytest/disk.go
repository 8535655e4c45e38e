package iggytest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// On-disk layout of a durable broker (WithDataDir):
//
//	DIR/meta.log                         metadata ops (streams, topics, partitions, groups, users)
//	DIR/data/<topic uid>/<partition>/<base offset>.seg   message records
//	DIR/data/<topic uid>/<partition>/offsets.log          consumer offset records
//	DIR/damaged/<time>/...               files moved aside by WithRepair
//
// The file and record format is described in recovery.go: every byte is
// covered by a checksum. Files are only appended to (offsets.log is
// compacted on open by writing a new file and renaming it over the old). A
// message record's body is one stored batch: the messages of one
// SendMessages request exactly as they are served to polls.
//
// Opening a directory never deletes acknowledged data. The only bytes it
// cuts off are a torn tail of the newest file of a log (the write a crash
// interrupted, which was never acknowledged); any other defect refuses the
// directory with a *DamageError naming the file and the byte offset,
// unless WithRepair moves the damaged files aside.

var errCorrupt = errors.New("corrupt record")

type disk struct {
	dir       string
	meta      *wfile
	replaying bool
	sync      bool
	segBytes  int64
	log       *slog.Logger
	wrap      func(path string, f *os.File) fileWriter
	repair    *repairer       // with WithRepair
	deleted   map[uint64]bool // topic uids whose deletion meta.log records
	lastOp    *metaOp         // the newest record of meta.log
	// pending are the changes opening makes (cutting torn tails, opening
	// files for appending): made only once the whole directory checked
	// out, so that a refused open changes nothing.
	pending []func() error
}

func (d *disk) later(fn func() error) { d.pending = append(d.pending, fn) }

func (s *Server) openDisk() (err error) {
	d := &disk{dir: s.cfg.dataDir, sync: s.cfg.syncWrites, segBytes: s.cfg.segmentBytes, log: s.log,
		wrap: s.cfg.wrapFile, deleted: map[uint64]bool{}}
	if s.cfg.repair {
		d.repair = newRepairer(d.dir)
	}
	if err := os.MkdirAll(filepath.Join(d.dir, "data"), 0o755); err != nil {
		return err
	}
	s.disk = d
	defer func() {
		if err != nil {
			s.closeDiskLocked()
		}
	}()
	if err := s.loadMeta(); err != nil {
		return err
	}
	// Load every live partition, then deal with directories of no topic.
	live := map[string]bool{}
	var lerr error
	s.streams.each(func(_ uint32, st *stream) {
		st.topics.each(func(_ uint32, t *topic) {
			live[strconv.FormatUint(t.uid, 10)] = true
			for _, p := range t.partitions {
				if lerr != nil {
					return
				}
				young := d.createdByLastOp(st, t, p)
				pd, err := d.openPartition(t.uid, p.id, young)
				if err != nil {
					lerr = fmt.Errorf("partition %d of topic %q: %w", p.id, t.name, err)
					return
				}
				p.disk = pd
				if err := pd.load(p, s.cfg.maxPerPart, young); err != nil {
					lerr = fmt.Errorf("partition %d of topic %q: %w", p.id, t.name, err)
					return
				}
				// Offsets of groups deleted just before a crash.
				for gid := range p.groupOffsets {
					if t.groups.get(gid) == nil {
						delete(p.groupOffsets, gid)
					}
				}
			}
		})
	})
	if lerr != nil {
		return lerr
	}
	entries, err := os.ReadDir(filepath.Join(d.dir, "data"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if live[e.Name()] {
			continue
		}
		path := filepath.Join(d.dir, "data", e.Name())
		uid, perr := strconv.ParseUint(e.Name(), 10, 64)
		switch {
		case perr != nil || !e.IsDir():
			// Not the broker's: left alone.
		case d.deleted[uid]:
			// Finish a deletion meta.log records.
			d.later(func() error { return os.RemoveAll(path) })
		case d.repair != nil:
			dst, err := d.repair.moveAside(path)
			if err != nil {
				return err
			}
			d.log.Warn("iggytest: repair: moved aside a topic directory no metadata refers to", "dir", path, "to", dst)
		default:
			return &DamageError{Path: path, Reason: "no topic in meta.log owns this directory (meta.log lost records)"}
		}
	}
	for _, fn := range d.pending {
		if err := fn(); err != nil {
			return err
		}
	}
	d.pending = nil
	return nil
}

// loadMeta replays meta.log (creating it when the directory is new).
func (s *Server) loadMeta() error {
	d := s.disk
	path := filepath.Join(d.dir, "meta.log")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		entries, err := os.ReadDir(filepath.Join(d.dir, "data"))
		if err != nil {
			return err
		}
		if len(entries) > 0 && d.repair == nil {
			return &DamageError{Path: path, Reason: fmt.Sprintf("missing, but data/ holds %d topic directories", len(entries))}
		}
		d.later(func() error { return d.rewriteMeta(path, nil) })
		return nil
	} else if err != nil {
		return err
	}
	var bodies [][]byte
	d.replaying = true
	o, err := scanFile(path, nil, func(body []byte, _ int64) error {
		op, err := decodeOp(body)
		if err != nil {
			return err
		}
		if err := s.applyOp(&op); err != nil {
			return err
		}
		d.lastOp = &op
		bodies = append(bodies, bytes.Clone(body))
		return nil
	})
	d.replaying = false
	if err != nil {
		return err
	}
	switch {
	case o.damage != nil && d.repair == nil:
		return o.damage
	case o.damage != nil:
		return s.repairMeta(path, o.damage)
	case o.torn:
		d.log.Warn("iggytest: metadata log has a torn tail (a write interrupted by a crash), cutting it off",
			"file", path, "at", o.end, "size", o.size)
	}
	if o.legacy || o.end < fileHeaderSize {
		d.later(func() error { return d.rewriteMeta(path, bodies) })
		return nil
	}
	d.later(func() error {
		if o.torn {
			if err := os.Truncate(path, o.end); err != nil {
				return err
			}
		}
		w, err := d.openWFile(path, o.end, false)
		if err != nil {
			return err
		}
		d.meta = w
		return nil
	})
	return nil
}

// rewriteMeta writes meta.log anew (format 2) with the record bodies and
// opens it for appending.
func (d *disk) rewriteMeta(path string, bodies [][]byte) error {
	buf := fileHeader(0)
	for _, b := range bodies {
		buf = appendRecord(buf, b)
	}
	if err := writeFileSynced(path, buf); err != nil {
		return err
	}
	w, err := d.openWFile(path, int64(len(buf)), false)
	if err != nil {
		return err
	}
	d.meta = w
	return nil
}

// repairMeta rebuilds the metadata from every intact record of a damaged
// meta.log, moves the file aside and writes the records kept.
func (s *Server) repairMeta(path string, dmg *DamageError) error {
	d := s.disk
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	recs, trailing := salvage(data, false)
	s.resetMetadata()
	d.deleted, d.lastOp = map[uint64]bool{}, nil
	var kept [][]byte
	d.replaying = true
	for _, r := range recs {
		op, err := decodeOp(r.body)
		if err == nil {
			err = s.applyOp(&op)
		}
		if err != nil {
			d.log.Warn("iggytest: repair: dropped a metadata record that does not apply", "file", path, "at", r.pos, "err", err)
			continue
		}
		d.lastOp = &op
		kept = append(kept, r.body)
	}
	d.replaying = false
	dst, err := d.repair.moveAside(path)
	if err != nil {
		return err
	}
	d.log.Warn("iggytest: repair: rebuilt the metadata log from its intact records", "file", path, "damage", dmg.Reason,
		"at", dmg.Offset, "kept", len(kept), "found", len(recs), "unreadable_tail_bytes", trailing, "original", dst)
	return d.rewriteMeta(path, kept)
}

// createdByLastOp reports whether p was created by the newest record of
// meta.log: a crash may have come before its directory was made.
func (d *disk) createdByLastOp(st *stream, t *topic, p *partition) bool {
	op := d.lastOp
	if op == nil || op.stream != st.id || op.topic != t.id {
		return false
	}
	switch op.kind {
	case opCreateTopic:
		return true
	case opCreatePartitions:
		return int(p.id) >= len(t.partitions)-int(op.count)
	}
	return false
}

func (d *disk) appendMeta(op *metaOp) error {
	body := op.encode(nil)
	var h [recHeader2]byte
	putRecordHeader(h[:], body)
	return d.meta.write(h[:], body)
}

func (d *disk) topicDir(uid uint64) string {
	return filepath.Join(d.dir, "data", strconv.FormatUint(uid, 10))
}

func (d *disk) removeTopicDir(uid uint64) { _ = os.RemoveAll(d.topicDir(uid)) }

func (d *disk) createPartition(uid uint64, pid uint32) (*partDisk, error) {
	dir := filepath.Join(d.topicDir(uid), strconv.FormatUint(uint64(pid), 10))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pd := &partDisk{d: d, dir: dir, segBytes: d.segBytes}
	if err := pd.writeOffsets(nil); err != nil {
		return nil, err
	}
	if d.sync {
		// The new directories' entries outlast a power loss too.
		for _, dir := range []string{d.topicDir(uid), filepath.Join(d.dir, "data")} {
			if err := syncDir(dir); err != nil {
				return nil, err
			}
		}
	}
	return pd, nil
}

// openPartition opens a partition directory; a missing one is made when
// mayCreate (a new partition, or one whose creation a crash interrupted)
// or when repairing, and is damage otherwise.
func (d *disk) openPartition(uid uint64, pid uint32, mayCreate bool) (*partDisk, error) {
	dir := filepath.Join(d.topicDir(uid), strconv.FormatUint(uint64(pid), 10))
	pd := &partDisk{d: d, dir: dir, segBytes: d.segBytes}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if !mayCreate && d.repair == nil {
			return nil, &DamageError{Path: dir, Reason: "partition directory missing"}
		}
		if !mayCreate {
			d.log.Warn("iggytest: repair: partition directory missing, starting it empty", "dir", dir)
		}
		d.later(func() error { return os.MkdirAll(dir, 0o755) })
	} else if err != nil {
		return nil, err
	}
	return pd, nil
}

func (s *Server) closeDiskLocked() error {
	var first error
	s.streams.each(func(_ uint32, st *stream) {
		st.topics.each(func(_ uint32, t *topic) {
			for _, p := range t.partitions {
				p.mu.Lock()
				p.closeFilesLocked()
				if p.disk != nil {
					if err := p.disk.close(); err != nil && first == nil {
						first = err
					}
					p.disk = nil
				}
				p.mu.Unlock()
			}
		})
	})
	if s.disk != nil && s.disk.meta != nil {
		if err := s.disk.meta.close(); err != nil && first == nil {
			first = err
		}
		s.disk.meta = nil
	}
	return first
}

// partDisk is the files of one partition: the segment being written and
// the offsets log. The partition owns the list of segments (segMeta).
// Callers hold the partition's mutex.
type partDisk struct {
	d        *disk
	dir      string
	segBytes int64
	path     string // segment being written
	seg      *wfile
	offs     *wfile
	offsN    int
	hdr      [recHeader2]byte
	// rollBase is the base of the newest segment offsets.log records as
	// started (hasRoll): a newest segment file that went missing is
	// detected by it.
	rollBase uint64
	hasRoll  bool
}

func segName(base uint64) string { return fmt.Sprintf("%020d.seg", base) }

// roll starts a new segment file whose first message will have offset
// base, continuing the partition from offset from.
func (pd *partDisk) roll(base, from uint64) error {
	if pd.seg != nil {
		if err := pd.seg.close(); err != nil {
			return err
		}
		pd.seg = nil
	}
	path := filepath.Join(pd.dir, segName(base))
	w, err := pd.d.openWFile(path, 0, true)
	if err != nil {
		return &writeError{err}
	}
	err = w.write(fileHeader(from))
	if err == nil && pd.d.sync {
		// The file's entry must outlast a power loss before offsets.log
		// records that the segment was started.
		if serr := syncDir(pd.dir); serr != nil {
			err = &writeError{serr}
		}
	}
	if err != nil {
		w.close()
		_ = os.Remove(path) // made just now: it holds nothing
		return err
	}
	pd.seg, pd.path = w, path
	return nil
}

// appendBatch writes one batch record and hands it to the OS (and to the
// disk with sync). It starts a new segment file first when there is none
// or the current one is full; b.pos is set to where the batch's bytes are
// in the file.
func (pd *partDisk) appendBatch(b *batch) error {
	// A segment without records is never rolled over: its header may
	// record a hole a repair left before it.
	if pd.seg == nil || (pd.seg.size >= pd.segBytes && pd.seg.size > fileHeaderSize) {
		if err := pd.roll(b.base, b.base); err != nil {
			return err
		}
		// Recorded after the file exists, so the record never names a
		// file a crash kept from being made.
		if err := pd.logOffset(offSegStart, 0, b.base); err != nil {
			_ = pd.seg.close()
			_ = os.Remove(pd.path)
			pd.seg = nil
			return err
		}
		pd.rollBase, pd.hasRoll = b.base, true
	}
	data := b.res.Load().data
	putRecordHeader(pd.hdr[:], data)
	if err := pd.seg.write(pd.hdr[:], data); err != nil {
		return err
	}
	b.pos = pd.seg.size - int64(len(data))
	return nil
}

const (
	offSetConsumer uint8 = 1
	offSetGroup    uint8 = 2
	offDelConsumer uint8 = 3
	offDelGroup    uint8 = 4
	offSegStart    uint8 = 5 // a segment was started at the offset
)

func offsetRecord(kind uint8, id, off uint64) []byte {
	var body [17]byte
	body[0] = kind
	binary.LittleEndian.PutUint64(body[1:], id)
	binary.LittleEndian.PutUint64(body[9:], off)
	return body[:]
}

func (pd *partDisk) logOffset(kind uint8, id, off uint64) error {
	var rec [recHeader2 + 17]byte
	copy(rec[recHeader2:], offsetRecord(kind, id, off))
	putRecordHeader(rec[:recHeader2], rec[recHeader2:])
	if err := pd.offs.write(rec[:]); err != nil {
		return err
	}
	pd.offsN++
	return nil
}

// purge deletes the files of segs and every offset of the partition; the
// next append starts a new segment file.
func (pd *partDisk) purge(segs []*segMeta) error {
	if pd.seg != nil {
		_ = pd.seg.close()
		pd.seg = nil
	}
	// Offsets (and the newest segment's record) go first: a crash between
	// leaves segments without a record, never a record without its file.
	pd.offsN, pd.hasRoll, pd.rollBase = 0, false, 0
	if err := pd.offs.reset(fileHeaderSize); err != nil {
		return err
	}
	for _, sg := range segs {
		sg.closeFile()
		if sg.path != "" {
			_ = os.Remove(sg.path)
		}
	}
	return nil
}

func (pd *partDisk) close() error {
	var first error
	if pd.seg != nil {
		first = pd.seg.close()
		pd.seg = nil
	}
	if pd.offs != nil {
		if err := pd.offs.close(); err != nil && first == nil {
			first = err
		}
		pd.offs = nil
	}
	return first
}

func (pd *partDisk) remove() {
	pd.close()
	_ = os.RemoveAll(pd.dir)
}

// parseStoredBatch checks a message record body: whole messages with
// consecutive offsets starting at want. It returns the batch.
func parseStoredBatch(body []byte, want uint64) (*batch, error) {
	var ends []uint32
	pos := 0
	for pos < len(body) {
		if len(body)-pos < messageHeaderSize {
			return nil, errCorrupt
		}
		m := body[pos:]
		size := messageHeaderSize + int(binary.LittleEndian.Uint32(m[48:])) + int(binary.LittleEndian.Uint32(m[52:]))
		if size > len(m) || size < messageHeaderSize {
			return nil, errCorrupt
		}
		if binary.LittleEndian.Uint64(m[24:]) != want+uint64(len(ends)) {
			return nil, fmt.Errorf("%w: message offset %d where %d was due", errCorrupt, binary.LittleEndian.Uint64(m[24:]), want+uint64(len(ends)))
		}
		pos += size
		ends = append(ends, uint32(pos))
	}
	if len(ends) == 0 {
		return nil, errCorrupt
	}
	return newBatch(want, binary.LittleEndian.Uint64(body[32:]), body, ends), nil
}

type segFile struct {
	base uint64
	path string
}

func (pd *partDisk) segmentFiles() ([]segFile, error) {
	entries, err := os.ReadDir(pd.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // made when the open completes
	}
	if err != nil {
		return nil, err
	}
	var files []segFile
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".seg") {
			continue
		}
		base, err := strconv.ParseUint(strings.TrimSuffix(name, ".seg"), 10, 64)
		if err != nil {
			continue
		}
		files = append(files, segFile{base: base, path: filepath.Join(pd.dir, name)})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].base < files[j].base })
	return files, nil
}

// resetPartitionLocked forgets p's messages (before a reload).
func resetPartitionLocked(p *partition) {
	p.batches, p.segs = nil, nil
	p.first, p.next, p.size, p.lastTS, p.holes = 0, 0, 0, 0, 0
}

// load restores the partition's segments and offsets. Segment files are
// read through once to check them; their messages stay on disk and are
// read back by polls through the cache.
func (pd *partDisk) load(p *partition, max int, young bool) error {
	files, err := pd.segmentFiles()
	if err != nil {
		return err
	}
	active, k, dmg, err := pd.loadSegments(p, files)
	if err != nil {
		return err
	}
	repaired := false
	for tries := 0; dmg != nil; tries++ {
		if pd.d.repair == nil {
			return dmg
		}
		if tries > len(files)+1 {
			return fmt.Errorf("repair of %s makes no progress: %w", pd.dir, dmg)
		}
		if err := pd.repairSegment(p, files, k, dmg); err != nil {
			return err
		}
		repaired = true
		if files, err = pd.segmentFiles(); err != nil {
			return err
		}
		resetPartitionLocked(p)
		if active, k, dmg, err = pd.loadSegments(p, files); err != nil {
			return err
		}
	}
	if p.first < p.next && max > 0 && p.count() > uint64(max) {
		p.trimLocked(p.next - uint64(max))
	}
	pd.d.later(func() error {
		if active == nil {
			return nil
		}
		if active.fix != nil {
			if err := active.fix(); err != nil {
				return err
			}
		}
		w, err := pd.d.openWFile(active.path, active.end, false)
		if err != nil {
			return err
		}
		pd.seg, pd.path = w, active.path
		return nil
	})
	return pd.loadOffsets(p, young, repaired, func() error {
		return pd.checkNewest(p, files, &active)
	})
}

// checkNewest compares the segment files with the newest segment
// offsets.log records as started: if that file is missing, the newest
// messages are gone. Repair then starts an empty segment far enough ahead
// that no offset the lost segment could have held is used again.
func (pd *partDisk) checkNewest(p *partition, files []segFile, active **activeSeg) error {
	if !pd.hasRoll {
		return nil
	}
	path := filepath.Join(pd.dir, segName(pd.rollBase))
	// The record is written after the segment's header: a newest segment
	// without its header was emptied, not torn by a crash.
	emptied := *active != nil && (*active).headless && (*active).path == path
	if !emptied && len(files) > 0 && files[len(files)-1].base >= pd.rollBase {
		return nil
	}
	if pd.d.repair == nil {
		if emptied {
			return &DamageError{Path: path, Reason: "emptied: offsets.log records that this newest segment was started and written to"}
		}
		return &DamageError{Path: path, Reason: "missing: offsets.log records that this newest segment was started, so the newest messages of the partition are gone"}
	}
	if emptied {
		dst, err := pd.d.repair.moveAside(path)
		if err != nil {
			return err
		}
		pd.d.log.Warn("iggytest: repair: moved aside an emptied newest segment", "file", path, "to", dst)
		p.segs = p.segs[:len(p.segs)-1]
	} else if *active != nil && (*active).fix != nil {
		pd.d.later((*active).fix) // the torn tail of what is no longer the newest segment
	}
	// A segment holds at most its size limit plus one record.
	skip := max(pd.rollBase, p.next) + uint64(pd.segBytes+maxRecordBytes)/messageHeaderSize
	from := p.next
	newPath := filepath.Join(pd.dir, segName(skip))
	if err := writeFileSynced(newPath, fileHeader(from)); err != nil {
		return err
	}
	if len(p.segs) == 0 {
		p.first = skip
	}
	p.next = skip
	p.addSegLocked(skip, newPath)
	p.addHoleLocked(from)
	*active = &activeSeg{path: newPath, end: fileHeaderSize}
	pd.d.log.Warn("iggytest: repair: the newest segment is missing; the partition continues after every offset it could have held",
		"missing", path, "next_offset", skip)
	return nil
}

// activeSeg is the newest segment, which appends continue.
type activeSeg struct {
	path string
	end  int64
	fix  func() error // makes the file end at end, before it is opened
	// headless: the file was empty or its header torn (it gets a new one)
	headless bool
}

// loadSegments loads files in order. It returns the segment appends go
// to (nil: the next append starts one), or the first damage: the index of
// the file and what is wrong. A torn tail of the newest file is cut off.
func (pd *partDisk) loadSegments(p *partition, files []segFile) (*activeSeg, int, *DamageError, error) {
	log := pd.d.log
	for i, sf := range files {
		last := i == len(files)-1
		headed := false
		onHeader := func(legacy bool, arg uint64) error {
			if legacy {
				arg = sf.base
			}
			if arg > sf.base {
				return fmt.Errorf("continues from offset %d, past its first offset %d", arg, sf.base)
			}
			if i > 0 && arg != p.next {
				return fmt.Errorf("does not continue the partition: the previous segment ends before offset %d, this one continues from offset %d (a segment is missing or was cut short)", p.next, arg)
			}
			if i == 0 {
				p.first = sf.base
			}
			p.next = sf.base
			p.addSegLocked(sf.base, sf.path)
			p.addHoleLocked(arg)
			headed = true
			return nil
		}
		o, err := scanFile(sf.path, onHeader, func(body []byte, pos int64) error {
			b, err := parseStoredBatch(body, p.next)
			if err != nil {
				return err
			}
			p.appendLocked(&batch{base: b.base, ts: b.ts, n: b.n, size: b.size, pos: pos}, 0)
			return nil
		})
		if err != nil {
			return nil, i, nil, err
		}
		if o.damage != nil {
			return nil, i, o.damage, nil
		}
		if !last && (!o.clean() || o.headerOnly()) {
			return nil, i, &DamageError{Path: sf.path, Offset: o.end, Reason: "a segment that is not the newest is empty or cut short"}, nil
		}
		if !last {
			continue
		}
		if !headed {
			// Empty, or its header torn: a crash right after it was made.
			if i > 0 && sf.base != p.next {
				return nil, i, &DamageError{Path: sf.path, Reason: fmt.Sprintf("empty newest segment starts at offset %d, the partition continues at %d", sf.base, p.next)}, nil
			}
			if i == 0 {
				p.first = sf.base
			}
			p.next = sf.base
			p.addSegLocked(sf.base, sf.path)
			if o.size > 0 {
				log.Warn("iggytest: newest segment has a torn header (a crash as it was made), writing it again", "file", sf.path)
			}
			return &activeSeg{path: sf.path, end: fileHeaderSize, headless: true, fix: func() error {
				return writeFileSynced(sf.path, fileHeader(sf.base))
			}}, 0, nil, nil
		}
		var fix func() error
		if o.torn {
			log.Warn("iggytest: partition log has a torn tail (a write interrupted by a crash), cutting it off",
				"file", sf.path, "at", o.end, "size", o.size)
			fix = func() error { return os.Truncate(sf.path, o.end) }
		}
		if o.legacy {
			if fix != nil {
				pd.d.later(fix)
			}
			return nil, 0, nil, nil // format 1 is not appended to
		}
		return &activeSeg{path: sf.path, end: o.end, fix: fix}, 0, nil, nil
	}
	return nil, 0, nil, nil
}

// repairSegment rewrites files[k], the first damaged or out-of-line
// segment, from its intact records and the intact messages of damaged ones,
// and moves the original aside. Runs of consecutive offsets become segment
// files whose headers record the holes between them. When the next segment
// no longer continues from where the rewritten one ends, a copy of it with
// a header recording the hole replaces it (its records are untouched). For
// the newest segment, lost bytes after the last intact message make the
// partition skip ahead by as many offsets as they could hold.
func (pd *partDisk) repairSegment(p *partition, files []segFile, k int, dmg *DamageError) error {
	resetPartitionLocked(p)
	if _, _, d2, err := pd.loadSegments(p, files[:k]); err != nil || d2 != nil {
		return errors.Join(fmt.Errorf("reload the intact segments"), err, d2)
	}
	end := files[k].base
	if k > 0 {
		end = p.next
	}
	resetPartitionLocked(p)
	last := k == len(files)-1
	limit := uint64(math.MaxUint64) // offsets the next segment already holds
	var next []byte
	if !last {
		var err error
		if next, err = os.ReadFile(files[k+1].path); err != nil {
			return err
		}
		limit = files[k+1].base
	}
	data, err := os.ReadFile(files[k].path)
	if err != nil {
		return err
	}
	type run struct {
		base, from, next uint64
		recs             [][]byte
	}
	var runs []*run
	found, lost := 0, 0
	recs, trailing := salvage(data, true)
	for _, r := range recs {
		if len(r.body) < messageHeaderSize {
			lost++
			continue
		}
		base := binary.LittleEndian.Uint64(r.body[24:])
		b, err := parseStoredBatch(r.body, base)
		if err != nil || base < end || base+uint64(b.n) > limit {
			lost++
			continue
		}
		found += int(b.n)
		if n := len(runs); n > 0 && runs[n-1].next == base {
			runs[n-1].recs = append(runs[n-1].recs, r.body)
			runs[n-1].next = base + uint64(b.n)
		} else {
			runs = append(runs, &run{base: base, from: end, next: base + uint64(b.n), recs: [][]byte{r.body}})
		}
		end = base + uint64(b.n)
	}
	type out struct{ tmp, path string }
	var outs []out
	write := func(path string, data ...[]byte) error {
		tmp := path + ".repair"
		if err := writeFileSynced(tmp, data...); err != nil {
			return err
		}
		outs = append(outs, out{tmp, path})
		return nil
	}
	for _, r := range runs {
		buf := fileHeader(r.from)
		for _, rec := range r.recs {
			buf = appendRecord(buf, rec)
		}
		if err := write(filepath.Join(pd.dir, segName(r.base)), buf); err != nil {
			return err
		}
	}
	moveAlso := ""
	skipTo := end
	switch {
	case last && trailing > 0:
		// Each lost message took at least a message header.
		skipTo = end + uint64(trailing)/messageHeaderSize + 1
		if err := write(filepath.Join(pd.dir, segName(skipTo)), fileHeader(end)); err != nil {
			return err
		}
	case !last && len(next) >= fileHeaderSize && nearMagic(next[:8]) && binary.LittleEndian.Uint64(next[8:]) != end:
		// The next segment must continue from where this one ends now.
		moveAlso = files[k+1].path
		if err := write(moveAlso, fileHeader(end), next[fileHeaderSize:]); err != nil {
			return err
		}
	case !last && len(next) >= fileHeaderSize && !nearMagic(next[:8]) && files[k+1].base != end:
		// A format-1 next segment is converted, with a header recording the
		// hole. (One that is empty or damaged is the next repair's.)
		moveAlso = files[k+1].path
		buf := fileHeader(end)
		nrecs, _ := salvage(next, false)
		for _, r := range nrecs {
			buf = appendRecord(buf, r.body)
		}
		if err := write(moveAlso, buf); err != nil {
			return err
		}
	}
	var moved []string
	for _, path := range []string{files[k].path, moveAlso} {
		if path == "" {
			continue
		}
		dst, err := pd.d.repair.moveAside(path)
		if err != nil {
			return err
		}
		moved = append(moved, dst)
	}
	for _, o := range outs {
		if err := os.Rename(o.tmp, o.path); err != nil {
			return err
		}
	}
	pd.d.log.Warn("iggytest: repair: rewrote a segment from its intact records and messages", "file", files[k].path,
		"damage", dmg.Error(), "intact_messages", found, "unusable_records", lost, "unreadable_tail_bytes", trailing,
		"next_offset", skipTo, "originals", moved)
	return nil
}

// loadOffsets restores the partition's consumer offsets.
//
// newest is called once the records are read, before consumer offsets
// are checked against the log.
func (pd *partDisk) loadOffsets(p *partition, young, repaired bool, newest func() error) error {
	path := filepath.Join(pd.dir, "offsets.log")
	apply := func(body []byte) error {
		if len(body) != 17 {
			return errCorrupt
		}
		id, off := binary.LittleEndian.Uint64(body[1:]), binary.LittleEndian.Uint64(body[9:])
		switch body[0] {
		case offSetConsumer:
			p.offsets[id] = off
		case offSetGroup:
			p.groupOffsets[uint32(id)] = off
		case offDelConsumer:
			delete(p.offsets, id)
		case offDelGroup:
			delete(p.groupOffsets, uint32(id))
		case offSegStart:
			pd.rollBase, pd.hasRoll = max(pd.rollBase, off), true
		default:
			return fmt.Errorf("%w: unknown offset record kind %d", errCorrupt, body[0])
		}
		return nil
	}
	rewrite := false
	n := 0
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if !young && pd.d.repair == nil {
			return &DamageError{Path: path, Reason: "missing"}
		}
		if !young {
			pd.d.log.Warn("iggytest: repair: consumer offsets file missing, starting it empty", "file", path)
		}
		rewrite = true
	} else {
		o, err := scanFile(path, nil, func(body []byte, _ int64) error {
			n++
			return apply(body)
		})
		if err != nil {
			return err
		}
		switch {
		case o.damage != nil && pd.d.repair == nil:
			return o.damage
		case o.damage != nil:
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			clear(p.offsets)
			clear(p.groupOffsets)
			recs, trailing := salvage(data, false)
			for _, r := range recs {
				_ = apply(r.body) // a record that is not an offset record is skipped
			}
			dst, err := pd.d.repair.moveAside(path)
			if err != nil {
				return err
			}
			pd.d.log.Warn("iggytest: repair: rebuilt consumer offsets from their intact records", "file", path,
				"damage", o.damage.Reason, "at", o.damage.Offset, "records", len(recs), "unreadable_tail_bytes", trailing, "original", dst)
			rewrite = true
		case o.torn:
			pd.d.log.Warn("iggytest: offsets log has a torn tail (a write interrupted by a crash), cutting it off",
				"file", path, "at", o.end, "size", o.size)
		}
		if o.legacy || o.end < fileHeaderSize {
			rewrite = true
		}
		end, torn := o.end, o.torn
		defer func() {
			if rewrite || pd.offsN > 2*(len(p.offsets)+len(p.groupOffsets))+64 {
				return
			}
			pd.d.later(func() error {
				if torn {
					if err := os.Truncate(path, end); err != nil {
						return err
					}
				}
				w, err := pd.d.openWFile(path, end, false)
				if err != nil {
					return err
				}
				pd.offs = w
				return nil
			})
		}()
		pd.offsN = n
	}
	if err := newest(); err != nil {
		return err
	}
	// A stored offset is of a message that was acknowledged before it: one
	// past the end of the log means acknowledged messages are missing.
	clamp := func(v uint64) (uint64, error) {
		if v < p.next {
			return v, nil
		}
		if pd.d.repair == nil && !repaired {
			return v, &DamageError{Path: path, Reason: fmt.Sprintf("a consumer offset (%d) is past the end of the partition's log "+
				"(next offset %d): acknowledged messages are missing from %s", v, p.next, pd.dir)}
		}
		pd.d.log.Warn("iggytest: repair: consumer offset past the end of the log lowered to it", "file", path, "offset", v, "to", p.currentOffset())
		rewrite = true
		return p.currentOffset(), nil
	}
	for k, v := range p.offsets {
		nv, err := clamp(v)
		if err != nil {
			return err
		}
		p.offsets[k] = nv
	}
	for k, v := range p.groupOffsets {
		nv, err := clamp(v)
		if err != nil {
			return err
		}
		p.groupOffsets[k] = nv
	}
	live := len(p.offsets) + len(p.groupOffsets)
	if rewrite || pd.offsN > 2*live+64 {
		pd.d.later(func() error { return pd.writeOffsets(p) })
	}
	return nil
}

// writeOffsets writes offsets.log anew with one record per offset stored
// in p (none for nil) and opens it for appending.
func (pd *partDisk) writeOffsets(p *partition) error {
	if pd.offs != nil {
		_ = pd.offs.close()
		pd.offs = nil
	}
	buf := fileHeader(0)
	n := 0
	if p != nil {
		for k, v := range p.offsets {
			buf = appendRecord(buf, offsetRecord(offSetConsumer, k, v))
			n++
		}
		for k, v := range p.groupOffsets {
			buf = appendRecord(buf, offsetRecord(offSetGroup, uint64(k), v))
			n++
		}
		if pd.hasRoll {
			buf = appendRecord(buf, offsetRecord(offSegStart, 0, pd.rollBase))
			n++
		}
	}
	path := filepath.Join(pd.dir, "offsets.log")
	if err := writeFileSynced(path, buf); err != nil {
		return err
	}
	w, err := pd.d.openWFile(path, int64(len(buf)), false)
	if err != nil {
		return err
	}
	pd.offs, pd.offsN = w, n
	return nil
}

// maxRecordBytes bounds a record a file may claim (a request is at most
// the frame limit), so a damaged length cannot make load allocate.
const maxRecordBytes = 1 << 30
