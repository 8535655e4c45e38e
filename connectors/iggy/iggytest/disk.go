package iggytest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// On-disk layout of a durable broker (WithDataDir):
//
//	DIR/meta.log                         metadata ops (streams, topics, partitions, groups)
//	DIR/data/<topic uid>/<partition>/<base offset>.seg   message records
//	DIR/data/<topic uid>/<partition>/offsets.log          consumer offset records
//
// Every file is a sequence of records [u32 body length][u64 XXH3 of body]
// [body]. Files are only appended to (offsets.log is compacted on open by
// writing a new file and renaming it over the old). On open, the first
// record that is incomplete or fails its checksum ends the file: it and
// everything after it is cut off, so a write torn by a crash is never
// served. A message record's body is one stored batch: the messages of one
// SendMessages request exactly as they are served to polls.

const recordHeader = 12

var errCorrupt = errors.New("corrupt record")

func appendRecordHeader(dst []byte, body []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(body)))
	return binary.LittleEndian.AppendUint64(dst, xxh3.Hash(body))
}

// scanRecords calls fn for every intact record of data and returns the
// length of the intact prefix.
func scanRecords(data []byte, fn func(body []byte) error) int {
	pos := 0
	for pos+recordHeader <= len(data) {
		n := int(binary.LittleEndian.Uint32(data[pos:]))
		sum := binary.LittleEndian.Uint64(data[pos+4:])
		if n > len(data)-pos-recordHeader {
			break
		}
		body := data[pos+recordHeader : pos+recordHeader+n]
		if xxh3.Hash(body) != sum {
			break
		}
		if fn(body) != nil {
			break
		}
		pos += recordHeader + n
	}
	return pos
}

type disk struct {
	dir       string
	meta      *os.File
	replaying bool
	sync      bool
	segBytes  int64
}

func (s *Server) openDisk() error {
	d := &disk{dir: s.cfg.dataDir, sync: s.cfg.syncWrites, segBytes: s.cfg.segmentBytes}
	if err := os.MkdirAll(filepath.Join(d.dir, "data"), 0o755); err != nil {
		return err
	}
	metaPath := filepath.Join(d.dir, "meta.log")
	data, err := os.ReadFile(metaPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	s.disk = d
	d.replaying = true
	valid := scanRecords(data, func(body []byte) error {
		op, err := decodeOp(body)
		if err != nil {
			return err
		}
		return s.applyOp(&op)
	})
	d.replaying = false
	if valid < len(data) {
		s.log.Warn("iggytest: metadata log has a torn or corrupt tail, truncating", "file", metaPath, "at", valid, "size", len(data))
	}
	f, err := os.OpenFile(metaPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := f.Truncate(int64(valid)); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Seek(int64(valid), 0); err != nil {
		f.Close()
		return err
	}
	d.meta = f
	// Load every live partition, then remove directories of deleted ones.
	live := map[string]bool{}
	var lerr error
	s.streams.each(func(_ uint32, st *stream) {
		st.topics.each(func(_ uint32, t *topic) {
			live[strconv.FormatUint(t.uid, 10)] = true
			for _, p := range t.partitions {
				if lerr != nil {
					return
				}
				pd, err := d.openPartition(t.uid, p.id, false)
				if err != nil {
					lerr = err
					return
				}
				p.disk = pd
				if err := pd.load(p, s.cfg.maxPerPart, s); err != nil {
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
		s.closeDiskLocked()
		return lerr
	}
	entries, _ := os.ReadDir(filepath.Join(d.dir, "data"))
	for _, e := range entries {
		if !live[e.Name()] {
			_ = os.RemoveAll(filepath.Join(d.dir, "data", e.Name()))
		}
	}
	return nil
}

func (d *disk) appendMeta(op *metaOp) error {
	body := op.encode(nil)
	rec := appendRecordHeader(make([]byte, 0, recordHeader+len(body)), body)
	rec = append(rec, body...)
	if _, err := d.meta.Write(rec); err != nil {
		return fmt.Errorf("write metadata log: %w", err)
	}
	if d.sync {
		return d.meta.Sync()
	}
	return nil
}

func (d *disk) topicDir(uid uint64) string {
	return filepath.Join(d.dir, "data", strconv.FormatUint(uid, 10))
}

func (d *disk) removeTopicDir(uid uint64) { _ = os.RemoveAll(d.topicDir(uid)) }

func (d *disk) createPartition(uid uint64, pid uint32) (*partDisk, error) {
	return d.openPartition(uid, pid, true)
}

// openPartition opens (fresh: recreates) a partition directory. Segment
// files are opened by load or by the first append.
func (d *disk) openPartition(uid uint64, pid uint32, fresh bool) (*partDisk, error) {
	dir := filepath.Join(d.topicDir(uid), strconv.FormatUint(uint64(pid), 10))
	if fresh {
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pd := &partDisk{dir: dir, sync: d.sync, segBytes: d.segBytes}
	if fresh {
		if err := pd.openOffsets(0); err != nil {
			return nil, err
		}
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
		if err := s.disk.meta.Close(); err != nil && first == nil {
			first = err
		}
		s.disk.meta = nil
	}
	return first
}

func (d *disk) close() {
	if d.meta != nil {
		d.meta.Close()
		d.meta = nil
	}
}

// partDisk is the files of one partition: the segment being written and
// the offsets log. The partition owns the list of segments (segMeta).
// Callers hold the partition's mutex.
type partDisk struct {
	dir      string
	sync     bool
	segBytes int64
	path     string // segment being written
	f        *os.File
	w        *bufio.Writer
	size     int64
	offs     *os.File
	offsN    int
	hdr      [recordHeader]byte
}

func segName(base uint64) string { return fmt.Sprintf("%020d.seg", base) }

// roll starts a new segment file whose first message will have offset base.
func (pd *partDisk) roll(base uint64) error {
	if pd.f != nil {
		if err := pd.w.Flush(); err != nil {
			return err
		}
		if err := pd.f.Close(); err != nil {
			return err
		}
		pd.f = nil
	}
	path := filepath.Join(pd.dir, segName(base))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	pd.f, pd.size, pd.path = f, 0, path
	if pd.w == nil {
		pd.w = bufio.NewWriterSize(f, 256<<10)
	} else {
		pd.w.Reset(f)
	}
	return nil
}

// appendBatch writes one batch record and hands it to the OS (and to the
// disk with sync). It starts a new segment file first when there is none
// or the current one is full, and reports that; b.pos is set to where the
// batch's bytes are in the file.
func (pd *partDisk) appendBatch(b *batch) (rolled bool, err error) {
	if pd.f == nil || pd.size >= pd.segBytes {
		if err := pd.roll(b.base); err != nil {
			return false, err
		}
		rolled = true
	}
	data := b.res.Load().data
	binary.LittleEndian.PutUint32(pd.hdr[0:], uint32(len(data)))
	binary.LittleEndian.PutUint64(pd.hdr[4:], xxh3.Hash(data))
	if _, err := pd.w.Write(pd.hdr[:]); err != nil {
		return rolled, err
	}
	if _, err := pd.w.Write(data); err != nil {
		return rolled, err
	}
	if err := pd.w.Flush(); err != nil {
		return rolled, err
	}
	if pd.sync {
		if err := pd.f.Sync(); err != nil {
			return rolled, err
		}
	}
	b.pos = pd.size + recordHeader
	pd.size += int64(recordHeader + len(data))
	return rolled, nil
}

const (
	offSetConsumer uint8 = 1
	offSetGroup    uint8 = 2
	offDelConsumer uint8 = 3
	offDelGroup    uint8 = 4
)

func (pd *partDisk) openOffsets(valid int64) error {
	f, err := os.OpenFile(filepath.Join(pd.dir, "offsets.log"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := f.Truncate(valid); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Seek(valid, 0); err != nil {
		f.Close()
		return err
	}
	pd.offs = f
	return nil
}

func (pd *partDisk) logOffset(kind uint8, id, off uint64) error {
	var rec [recordHeader + 17]byte
	body := rec[recordHeader:]
	body[0] = kind
	binary.LittleEndian.PutUint64(body[1:], id)
	binary.LittleEndian.PutUint64(body[9:], off)
	binary.LittleEndian.PutUint32(rec[0:], 17)
	binary.LittleEndian.PutUint64(rec[4:], xxh3.Hash(body))
	if _, err := pd.offs.Write(rec[:]); err != nil {
		return fmt.Errorf("write offsets log: %w", err)
	}
	pd.offsN++
	if pd.sync {
		return pd.offs.Sync()
	}
	return nil
}

// purge deletes the files of segs and every offset of the partition; the
// next append starts a new segment file.
func (pd *partDisk) purge(segs []*segMeta) error {
	if pd.f != nil {
		_ = pd.w.Flush()
		_ = pd.f.Close()
		pd.f = nil
	}
	for _, sg := range segs {
		sg.closeFile()
		if sg.path != "" {
			_ = os.Remove(sg.path)
		}
	}
	if err := pd.offs.Truncate(0); err != nil {
		return err
	}
	_, err := pd.offs.Seek(0, 0)
	pd.offsN = 0
	return err
}

func (pd *partDisk) close() error {
	var first error
	if pd.f != nil {
		if err := pd.w.Flush(); err != nil {
			first = err
		}
		if err := pd.f.Close(); err != nil && first == nil {
			first = err
		}
		pd.f = nil
	}
	if pd.offs != nil {
		if err := pd.offs.Close(); err != nil && first == nil {
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
			return nil, errCorrupt
		}
		pos += size
		ends = append(ends, uint32(pos))
	}
	if len(ends) == 0 {
		return nil, errCorrupt
	}
	return newBatch(want, binary.LittleEndian.Uint64(body[32:]), body, ends), nil
}

// load restores the partition's segments and offsets, cutting off torn
// tails. Segment files are read through once to check them; their
// messages stay on disk and are read back by polls through the cache.
func (pd *partDisk) load(p *partition, max int, s *Server) error {
	entries, err := os.ReadDir(pd.dir)
	if err != nil {
		return err
	}
	type segFile struct {
		base uint64
		path string
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
	if len(files) > 0 {
		p.first, p.next = files[0].base, files[0].base
	}
	var lastValid int64
	for i, sf := range files {
		f, err := os.Open(sf.path)
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		if sf.base != p.next && st.Size() > 0 {
			f.Close()
			// A gap between segments: everything from here is untrusted.
			s.log.Warn("iggytest: segment does not continue the partition, dropping it and later ones", "file", sf.path)
			for _, later := range files[i:] {
				_ = os.Remove(later.path)
			}
			break
		}
		p.addSegLocked(sf.base, sf.path)
		valid, err := scanFile(f, func(body []byte, pos int64) error {
			b, err := parseStoredBatch(body, p.next)
			if err != nil {
				return err
			}
			nb := &batch{base: b.base, ts: b.ts, n: b.n, size: b.size, pos: pos}
			p.appendLocked(nb, 0)
			return nil
		})
		f.Close()
		if err != nil {
			return err
		}
		lastValid = valid
		if valid < st.Size() {
			s.log.Warn("iggytest: partition log has a torn or corrupt tail, truncating", "file", sf.path, "at", valid, "size", st.Size())
			if err := os.Truncate(sf.path, valid); err != nil {
				return err
			}
			for _, later := range files[i+1:] {
				_ = os.Remove(later.path)
			}
			break
		}
	}
	if p.first < p.next && max > 0 && p.count() > uint64(max) {
		p.trimLocked(p.next - uint64(max))
	}
	if len(p.segs) > 0 {
		last := p.segs[len(p.segs)-1]
		f, err := os.OpenFile(last.path, os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		pd.f, pd.size, pd.path = f, lastValid, last.path
		pd.w = bufio.NewWriterSize(f, 256<<10)
	}
	// Offsets.
	path := filepath.Join(pd.dir, "offsets.log")
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	n := 0
	valid := scanRecords(data, func(body []byte) error {
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
		default:
			return errCorrupt
		}
		n++
		return nil
	})
	if valid < len(data) {
		s.log.Warn("iggytest: offsets log has a torn or corrupt tail, truncating", "file", path, "at", valid)
	}
	// Offsets beyond the restored log (its tail was lost) are clamped, as
	// the server does on partition init.
	for k, v := range p.offsets {
		if v > p.currentOffset() {
			p.offsets[k] = p.currentOffset()
		}
	}
	for k, v := range p.groupOffsets {
		if v > p.currentOffset() {
			p.groupOffsets[k] = p.currentOffset()
		}
	}
	live := len(p.offsets) + len(p.groupOffsets)
	if n > 2*live+64 {
		return pd.compactOffsets(p)
	}
	return pd.openOffsets(int64(valid))
}

// compactOffsets rewrites offsets.log with one record per stored offset.
func (pd *partDisk) compactOffsets(p *partition) error {
	tmp := filepath.Join(pd.dir, "offsets.log.tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	pd.offs = f
	for k, v := range p.offsets {
		if err := pd.logOffset(offSetConsumer, k, v); err != nil {
			f.Close()
			return err
		}
	}
	for k, v := range p.groupOffsets {
		if err := pd.logOffset(offSetGroup, uint64(k), v); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := os.Rename(tmp, filepath.Join(pd.dir, "offsets.log")); err != nil {
		f.Close()
		return err
	}
	return nil
}

// scanFile calls fn for every intact record of f, with the record's body
// (valid only during the call) and its offset in the file, and returns the
// length of the intact prefix. It reads f sequentially, one record in
// memory at a time.
func scanFile(f *os.File, fn func(body []byte, pos int64) error) (int64, error) {
	r := bufio.NewReaderSize(f, 1<<20)
	var hdr [recordHeader]byte
	var body []byte
	var pos int64
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return pos, nil // EOF or a torn header
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:]))
		sum := binary.LittleEndian.Uint64(hdr[4:])
		if n > maxRecordBytes {
			return pos, nil
		}
		if int64(cap(body)) < n {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			return pos, nil
		}
		if xxh3.Hash(body) != sum {
			return pos, nil
		}
		if fn(body, pos+recordHeader) != nil {
			return pos, nil
		}
		pos += recordHeader + n
	}
}

// maxRecordBytes bounds a record a segment file may claim (a request is at
// most the send limit), so a corrupt length cannot make load allocate.
const maxRecordBytes = 1 << 30
