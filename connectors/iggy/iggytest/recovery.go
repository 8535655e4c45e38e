package iggytest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/zeebo/xxh3"
)

// Storage format 2 (every file a durable broker writes since the format
// got its header):
//
//	file   = [8 magic "iggytst2"][u64 arg][u64 XXH3 of the 16 bytes before] record*
//	record = [u32 body length][u64 XXH3 of body][u32 low half of XXH3 of the 12 bytes before] body
//
// A segment file's arg is the offset the partition reached before it (the
// end of the previous segment): it equals the segment's base offset except
// after a repair left a hole, so a missing or emptied segment is a gap the
// loader detects. The arg of meta.log and offsets.log is 0. Every byte of a
// file is covered by a checksum, so a changed byte is always found.
//
// Format 1 (files without the magic, written before) had 12-byte record
// headers and no file header; such files are read, never appended to:
// meta.log and offsets.log are rewritten in format 2 on open, and a new
// segment is started for the next message.
const (
	fileHeaderSize = 24
	recHeader2     = 16
	recHeader1     = 12
)

var fileMagic = [8]byte{'i', 'g', 'g', 'y', 't', 's', 't', '2'}

// fileHeader returns the header of a format-2 file with arg.
func fileHeader(arg uint64) []byte {
	b := make([]byte, fileHeaderSize)
	copy(b, fileMagic[:])
	binary.LittleEndian.PutUint64(b[8:], arg)
	binary.LittleEndian.PutUint64(b[16:], xxh3.Hash(b[:16]))
	return b
}

// putRecordHeader fills h (recHeader2 bytes) for body.
func putRecordHeader(h []byte, body []byte) {
	binary.LittleEndian.PutUint32(h[0:], uint32(len(body)))
	binary.LittleEndian.PutUint64(h[4:], xxh3.Hash(body))
	binary.LittleEndian.PutUint32(h[12:], uint32(xxh3.Hash(h[:12])))
}

// appendRecord appends body as a format-2 record.
func appendRecord(dst, body []byte) []byte {
	var h [recHeader2]byte
	putRecordHeader(h[:], body)
	return append(append(dst, h[:]...), body...)
}

func recordHeaderOK(h []byte) bool {
	return binary.LittleEndian.Uint32(h[12:]) == uint32(xxh3.Hash(h[:12]))
}

// DamageError reports a data directory the broker refuses to open because
// acknowledged data in it is damaged or missing: a record whose checksum
// fails, a torn record anywhere but at the end of the newest file, a
// missing or emptied segment, a missing meta.log or partition directory,
// or consumer offsets past the end of the log. Nothing on disk was changed.
// WithRepair (iggy-embedded -repair) moves the damaged files aside and
// keeps every intact message with its offset.
type DamageError struct {
	Path   string // the damaged (or missing) file or directory
	Offset int64  // byte offset of the damage in Path (0 for a missing file)
	Reason string
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("%s is damaged at byte %d: %s; nothing was changed: restore the file, or start with "+
		"WithRepair (iggy-embedded -repair) to move damaged files aside into %s/<time>/ of the data directory "+
		"and keep every intact message with its offset", e.Path, e.Offset, e.Reason, damagedDirName)
}

// WithRepair lets a durable broker (WithDataDir) open a damaged data
// directory instead of refusing it with a *DamageError: damaged files are
// moved aside, never deleted, into DIR/damaged/<time>/ (keeping their
// paths relative to DIR), and replaced by files holding every intact
// record and, from damaged records, every message whose own checksum still
// matches. Intact messages keep their offsets; the offsets of lost messages
// stay unused (polls skip them), and a lost newest record makes the
// partition skip far enough ahead that no offset is ever served twice with
// different messages. Metadata records that no longer apply (a topic of a
// lost stream) are dropped with a warning, topic directories that no
// metadata refers to are moved aside, and consumer offsets past the end of
// the log are lowered to it. Every repair step is logged at warn level.
func WithRepair() Option { return optionFunc(func(c *config) { c.repair = true }) }

const damagedDirName = "damaged"

// scanOutcome is what scanning one file found.
type scanOutcome struct {
	legacy bool   // format 1
	arg    uint64 // format 2: the file header's arg
	end    int64  // end of the intact prefix (the header included)
	size   int64
	torn   bool         // the bytes after end are a torn tail: an interrupted last write
	damage *DamageError // non-nil: damage after end
}

// clean reports whether the whole file is intact.
func (o scanOutcome) clean() bool { return !o.torn && o.damage == nil }

// headerOnly reports whether the file holds no record and at most a torn
// header.
func (o scanOutcome) headerOnly() bool {
	return o.damage == nil && (o.end == 0 || (!o.legacy && o.end == fileHeaderSize))
}

// nearMagic reports whether b (8 bytes) differs from the magic in at most
// one byte: a format-2 header with a changed byte, not a format-1 file.
func nearMagic(b []byte) bool {
	diff := 0
	for i := range fileMagic {
		if b[i] != fileMagic[i] {
			diff++
		}
	}
	return diff <= 1
}

// scanFile checks every record of the file at path and calls fn with each
// intact record's body (valid only during the call) and its offset in the
// file, in order, until the first defect. It reads the file sequentially,
// one record in memory at a time. A defect is a torn tail when it can be
// an interrupted last write: an incomplete record or header at the end of
// the file, or a zero-filled end (a crash after the file grew but before
// its bytes reached the disk); anything else is damage. Only an I/O error
// is returned as an error.
//
// onHeader, when not nil, is called once the file's format is known
// (legacy: format 1, whose arg is 0); an error from it is damage at byte 0.
func scanFile(path string, onHeader func(legacy bool, arg uint64) error, fn func(body []byte, pos int64) error) (scanOutcome, error) {
	f, err := os.Open(path)
	if err != nil {
		return scanOutcome{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return scanOutcome{}, err
	}
	o := scanOutcome{size: st.Size()}
	r := bufio.NewReaderSize(f, 1<<20)
	damage := func(at int64, format string, args ...any) (scanOutcome, error) {
		o.damage = &DamageError{Path: path, Offset: at, Reason: fmt.Sprintf(format, args...)}
		return o, nil
	}
	if o.size == 0 {
		return o, nil
	}
	var fh [fileHeaderSize]byte
	n, err := io.ReadFull(r, fh[:min(int64(fileHeaderSize), o.size)])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return o, err
	}
	rh := recHeader2
	pos := int64(0)
	switch {
	case n < fileHeaderSize && bytes.HasPrefix(fileMagic[:], fh[:min(n, 8)]):
		o.torn = true // a header torn while the file was created
		return o, nil
	case n == fileHeaderSize && nearMagic(fh[:8]):
		if fh != [fileHeaderSize]byte(fileHeader(binary.LittleEndian.Uint64(fh[8:]))) {
			return damage(0, "file header checksum mismatch")
		}
		o.arg = binary.LittleEndian.Uint64(fh[8:])
		pos = fileHeaderSize
	default:
		o.legacy, rh = true, recHeader1
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return o, err
		}
		r.Reset(f)
	}
	o.end = pos
	if onHeader != nil {
		if err := onHeader(o.legacy, o.arg); err != nil {
			return damage(0, "%v", err)
		}
	}
	var hdr [recHeader2]byte
	var body []byte
	for pos < o.size {
		rem := o.size - pos
		if rem < int64(rh) {
			if o.legacy && pos == 0 {
				return damage(pos, "no intact record")
			}
			o.torn = true
			return o, nil
		}
		if _, err := io.ReadFull(r, hdr[:rh]); err != nil {
			return o, err
		}
		ln := int64(binary.LittleEndian.Uint32(hdr[:]))
		if !o.legacy && !recordHeaderOK(hdr[:]) {
			zero, err := zeroTail(r, hdr[:rh])
			if err != nil {
				return o, err
			}
			if zero {
				o.torn = true
				return o, nil
			}
			return damage(pos, "record header checksum mismatch")
		}
		if ln > rem-int64(rh) {
			if o.legacy && pos == 0 {
				return damage(pos, "no intact record")
			}
			if o.legacy {
				// Format 1 does not check its lengths: a changed length
				// looks like a record cut short. A torn write is the last
				// record, so an intact record after it means damage.
				rest, err := io.ReadAll(io.LimitReader(r, legacyTornMax))
				if err != nil {
					return o, err
				}
				if rem-int64(rh) > legacyTornMax || hasRecord1(append(hdr[:rh:rh], rest...)[1:]) {
					return damage(pos, "record length does not fit, and intact records follow")
				}
			}
			o.torn = true // the last write was cut short
			return o, nil
		}
		if ln > maxRecordBytes {
			return damage(pos, "record of %d bytes is larger than any the broker writes", ln)
		}
		if int64(cap(body)) < ln {
			body = make([]byte, ln)
		}
		body = body[:ln]
		if _, err := io.ReadFull(r, body); err != nil {
			return o, err
		}
		if xxh3.Hash(body) != binary.LittleEndian.Uint64(hdr[4:]) {
			return damage(pos, "record checksum mismatch")
		}
		if err := fn(body, pos+int64(rh)); err != nil {
			return damage(pos, "record does not fit: %v", err)
		}
		pos += int64(rh) + ln
		o.end = pos
	}
	return o, nil
}

// legacyTornMax bounds a torn format-1 tail: the largest request the
// broker accepted when it wrote format 1.
const legacyTornMax = 256<<20 + recHeader1

// hasRecord1 reports whether a format-1 record whose checksum matches
// starts anywhere in data. Format-1 headers have no checksum of their own,
// so every place whose length fits is hashed; past a budget of hashed
// bytes it answers true (damage: refuse rather than cut).
func hasRecord1(data []byte) bool {
	budget := hashBudget(len(data))
	for p := 0; p+recHeader1 <= len(data); p++ {
		n := int(binary.LittleEndian.Uint32(data[p:]))
		if n > len(data)-p-recHeader1 {
			continue
		}
		if budget -= n; budget < 0 {
			return true
		}
		if xxh3.Hash(data[p+recHeader1:p+recHeader1+n]) == binary.LittleEndian.Uint64(data[p+4:]) {
			return true
		}
	}
	return false
}

// hashBudget bounds the bytes a search for format-1 records hashes in n
// bytes of data.
func hashBudget(n int) int { return 16*n + 16<<20 }

// zeroTail reports whether head and everything left in r are zero bytes.
func zeroTail(r io.Reader, head []byte) (bool, error) {
	for _, b := range head {
		if b != 0 {
			return false, nil
		}
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return false, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// salvaged is one intact record found by salvage.
type salvaged struct {
	pos  int64 // of the body in the file
	body []byte
}

// salvage returns every intact record of a (possibly damaged) file's
// contents: it walks the records and, past a damaged one, searches byte by
// byte for the next record whose header and body checksums match. With
// messages (a segment file), the bytes between intact records are searched
// for intact messages too (each carries its own checksum), which come back
// as record bodies of consecutive messages. It also returns the number of
// bytes after the last intact record or message.
func salvage(data []byte, messages bool) (recs []salvaged, trailing int64) {
	legacy := !(len(data) >= fileHeaderSize && nearMagic(data[:8]))
	rh := recHeader2
	pos := 0
	if legacy {
		rh = recHeader1
	} else {
		pos = fileHeaderSize
	}
	end := pos
	budget := hashBudget(len(data))
	for pos+rh <= len(data) && budget >= 0 {
		h := data[pos:]
		if !legacy && !recordHeaderOK(h) {
			pos++
			continue
		}
		n := int(binary.LittleEndian.Uint32(h))
		if n > len(data)-pos-rh {
			pos++
			continue
		}
		if legacy && pos != end {
			budget -= n // searching: see hasRecord1
		}
		if xxh3.Hash(data[pos+rh:pos+rh+n]) != binary.LittleEndian.Uint64(h[4:]) {
			pos++
			continue
		}
		if messages && pos > end {
			recs = append(recs, salvageMessages(data[end:pos], int64(end))...)
		}
		recs = append(recs, salvaged{pos: int64(pos + rh), body: data[pos+rh : pos+rh+n]})
		pos += rh + n
		end = pos
	}
	if messages && end < len(data) {
		if ms := salvageMessages(data[end:], int64(end)); len(ms) > 0 {
			recs = append(recs, ms...)
			last := ms[len(ms)-1]
			end = int(last.pos) + len(last.body)
		}
	}
	return recs, int64(len(data) - end)
}

// salvageMessages finds the stored messages in data (bytes of a segment
// at file offset at) whose checksums match, and returns runs of them that
// are adjacent on disk with consecutive offsets as record bodies. The
// bytes it hashes while searching are bounded (hashBudget); past that, the
// rest of data is left unsearched (its file is kept, moved aside).
func salvageMessages(data []byte, at int64) []salvaged {
	var out []salvaged
	start, end := -1, -1 // the current run: data[start:end]
	var next uint64
	budget := hashBudget(len(data)) // a search hashes at each place: bounded
	for p := 0; p+messageHeaderSize <= len(data) && budget >= 0; {
		m := data[p:]
		size := uint64(messageHeaderSize) + uint64(binary.LittleEndian.Uint32(m[48:])) + uint64(binary.LittleEndian.Uint32(m[52:]))
		if size > uint64(len(m)) {
			p++
			continue
		}
		if p != end {
			budget -= int(size)
		}
		if xxh3.Hash(m[8:size]) != binary.LittleEndian.Uint64(m) {
			p++
			continue
		}
		off := binary.LittleEndian.Uint64(m[24:])
		if start < 0 || end != p || off != next {
			if start >= 0 {
				out = append(out, salvaged{pos: at + int64(start), body: data[start:end]})
			}
			start = p
		}
		p += int(size)
		end, next = p, off+1
	}
	if start >= 0 {
		out = append(out, salvaged{pos: at + int64(start), body: data[start:end]})
	}
	return out
}

// repairer moves damaged files aside during one open of a data directory.
type repairer struct {
	root  string // the data directory
	stamp string // DIR/damaged/<stamp>
}

func newRepairer(root string) *repairer {
	return &repairer{root: root, stamp: time.Now().UTC().Format("20060102T150405.000000000Z")}
}

// moveAside renames path (a file or directory under the data directory)
// to the same relative path under DIR/damaged/<stamp>/.
func (r *repairer) moveAside(path string) (string, error) {
	rel, err := filepath.Rel(r.root, path)
	if err != nil {
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	dst := filepath.Join(r.root, damagedDirName, r.stamp, rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	if err := os.Rename(path, dst); err != nil {
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	return dst, nil
}

// writeFileSynced writes data to path through a temporary file that is
// synced and renamed over path.
func writeFileSynced(path string, data ...[]byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for _, d := range data {
		if _, err := f.Write(d); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", tmp, err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes the entries of dir (files made or renamed in it) durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// resetMetadata forgets every stream, topic and user (before metadata is
// rebuilt from a damaged log); the root user is made again.
func (s *Server) resetMetadata() {
	s.streams, s.streamNames, s.nextUID = slab[stream]{}, map[string]*stream{}, 0
	s.users, s.userNames, s.streamPerms = slab[user]{}, map[string]*user{}, map[uint64]*streamPerms{}
	s.addRootUser()
}
