package iggytest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/zeebo/xxh3"
)

// recoveryFixture is a data directory written through the SDK: stream "s",
// topic "t" with three partitions of several segments each, consumer
// offsets, a consumer group and a user; and every acknowledged message.
type recoveryFixture struct {
	dir  string
	msgs []ackedMsg
}

// ackedMsg is one acknowledged message and where its record is on disk.
type ackedMsg struct {
	part     uint32
	offset   uint64
	payload  string
	file     string // relative to the data directory
	from, to int64  // byte range of its record in file
	mFrom    int64  // byte range of the message itself in file
	mTo      int64
}

func writeRecoveryFixture(t *testing.T, segBytes int64) recoveryFixture {
	t.Helper()
	dir := t.TempDir()
	tg := durable(t, dir, withSegmentBytes(segBytes))
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 3, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 45; i++ {
		must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(uint32(i%3)), msgs(t, fmt.Sprint("b", i), 1+rng.IntN(4))))
	}
	_, err = cli.CreateConsumerGroup(sid, tid, "g")
	must(t, err)
	must(t, cli.StoreConsumerOffset(iggcon.NewSingleConsumer(mustID("c")), sid, tid, 3, u32p(0)))
	// Partition 1's consumer has read everything.
	_, err = cli.PollMessages(sid, tid, iggcon.NewSingleConsumer(mustID("c")), iggcon.NextPollingStrategy(), 1000, true, u32p(1))
	must(t, err)
	_, err = cli.CreateUser("someone", "secret", iggcon.Active, nil)
	must(t, err)
	must(t, tg.srv.Close())
	return recoveryFixture{dir: dir, msgs: scanAcked(t, dir)}
}

// scanAcked lists every message in the segment files of dir with the byte
// range of its record.
func scanAcked(t *testing.T, dir string) []ackedMsg {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "data", "*", "*", "*.seg"))
	must(t, err)
	var out []ackedMsg
	for _, path := range segs {
		rel, _ := filepath.Rel(dir, path)
		var part uint32
		fmt.Sscan(filepath.Base(filepath.Dir(path)), &part)
		rh := int64(recHeader2)
		o, err := scanFile(path, func(legacy bool, _ uint64) error {
			if legacy {
				rh = recHeader1
			}
			return nil
		}, func(body []byte, pos int64) error {
			b, err := parseStoredBatch(body, binary.LittleEndian.Uint64(body[24:]))
			if err != nil {
				return err
			}
			r := b.res.Load()
			start := uint32(0)
			for i, end := range r.ends {
				m := body[start:end]
				hl := binary.LittleEndian.Uint32(m[48:])
				out = append(out, ackedMsg{part: part, offset: b.base + uint64(i), payload: string(m[messageHeaderSize+int(hl):]),
					file: rel, from: pos - rh, to: pos + int64(len(body)), mFrom: pos + int64(start), mTo: pos + int64(end)})
				start = end
			}
			return nil
		})
		must(t, err)
		if !o.clean() {
			t.Fatalf("fixture segment %s is not clean: %+v", path, o)
		}
	}
	return out
}

// copyDir copies the regular files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	must(t, filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
	return dst
}

// treeHashes maps the XXH3 of every file's contents under dir to its path.
func treeHashes(t *testing.T, dir string) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	must(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[xxh3.Hash(b)] = path
		return nil
	}))
	return out
}

// served reads every retained message of topic t of stream s, by partition
// and offset, through the broker's read path (the segment files).
func served(t *testing.T, srv *Server) (map[uint32]map[uint64]string, bool) {
	t.Helper()
	srv.mu.RLock()
	defer srv.mu.RUnlock()
	st := srv.streamNames["s"]
	if st == nil || st.byName["t"] == nil {
		return nil, false
	}
	out := map[uint32]map[uint64]string{}
	for _, p := range st.byName["t"].partitions {
		p.mu.Lock()
		vec, _, _, _, err := p.readLocked(nil, 0, ^uint32(0), math.MaxInt)
		p.mu.Unlock()
		if err != nil {
			t.Fatalf("partition %d: read: %v", p.id, err)
		}
		m := map[uint64]string{}
		for _, b := range vec {
			for len(b) > 0 {
				hl := int(binary.LittleEndian.Uint32(b[48:]))
				pl := int(binary.LittleEndian.Uint32(b[52:]))
				m[binary.LittleEndian.Uint64(b[24:])] = string(b[messageHeaderSize+hl : messageHeaderSize+hl+pl])
				b = b[messageHeaderSize+hl+pl:]
			}
		}
		out[p.id] = m
	}
	return out, true
}

// mutation is damage done to one file of a data directory.
type mutation struct {
	file     string // relative
	kind     string // "flip", "truncate", "delete", "zero"
	at, size int64
}

func (m mutation) apply(t *testing.T, dir string, rng *rand.Rand) {
	t.Helper()
	path := filepath.Join(dir, m.file)
	switch m.kind {
	case "delete":
		must(t, os.Remove(path))
	case "truncate":
		must(t, os.Truncate(path, m.at))
	case "flip", "zero":
		b, err := os.ReadFile(path)
		must(t, err)
		if m.kind == "flip" {
			b[m.at] ^= byte(1 + rng.IntN(255))
		} else {
			clear(b[m.at : m.at+m.size])
		}
		must(t, os.WriteFile(path, b, 0o644))
	}
}

func randomMutation(t *testing.T, dir string, rng *rand.Rand) mutation {
	t.Helper()
	var files []string
	must(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files = append(files, rel)
		return nil
	}))
	slices.Sort(files)
	// Every kind of file as often: meta.log, offsets logs, segments.
	var kinds [3][]string
	for _, f := range files {
		switch {
		case f == "meta.log":
			kinds[0] = append(kinds[0], f)
		case strings.HasSuffix(f, "offsets.log"):
			kinds[1] = append(kinds[1], f)
		default:
			kinds[2] = append(kinds[2], f)
		}
	}
	pick := kinds[rng.IntN(3)]
	for len(pick) == 0 { // a first damage deleted the only file of a kind
		pick = kinds[rng.IntN(3)]
	}
	m := mutation{file: pick[rng.IntN(len(pick))]}
	fi, err := os.Stat(filepath.Join(dir, m.file))
	must(t, err)
	size := fi.Size()
	switch r := rng.IntN(10); {
	case r < 6 && size > 0:
		m.kind, m.at = "flip", rng.Int64N(size)
	case r < 7 && size > 0:
		m.kind, m.at = "zero", rng.Int64N(size)
		m.size = min(1+rng.Int64N(64), size-m.at)
	case r < 9:
		m.kind, m.at = "truncate", rng.Int64N(size+1)
	default:
		m.kind = "delete"
	}
	return m
}

// TestRecoveryPropertyRandomDamage damages one file of a data directory
// at a random place (every file kind: meta.log, offsets.log, segments; a
// changed byte, a zeroed run, a cut, a deleted file) and checks that every
// acknowledged message that is intact is either served with its offset or
// the broker refuses to start (with a DamageError and nothing changed on
// disk), that no offset is served with another message, and that with
// WithRepair the broker starts, serves every intact message of a topic it
// kept, and deletes no file: each is in place or moved aside. Seeded;
// STRAND_SOAK=1 runs many more cases.
func TestRecoveryPropertyRandomDamage(t *testing.T) {
	fx2 := writeRecoveryFixture(t, 700)
	// The same directory as written before files had headers (format 1).
	fx1 := recoveryFixture{dir: copyDir(t, fx2.dir)}
	toFormat1(t, fx1.dir)
	fx1.msgs = scanAcked(t, fx1.dir)
	cases := 20
	if os.Getenv("STRAND_SOAK") != "" {
		cases = 1500
	}
	rng := rand.New(rand.NewPCG(29, 1))
	refused, started := 0, 0
	for i := 0; i < cases; i++ {
		fx, format := fx2, 2
		if i%4 == 3 {
			fx, format = fx1, 1
		}
		dir := copyDir(t, fx.dir)
		m := randomMutation(t, dir, rng)
		m.apply(t, dir, rng)
		name := fmt.Sprintf("case %d (format %d: %s %s at %d", i, format, m.kind, m.file, m.at)
		metaHit := m.file == "meta.log"
		if rng.IntN(3) == 0 { // a second damage, anywhere
			m2 := randomMutation(t, dir, rng)
			m2.apply(t, dir, rng)
			name += fmt.Sprintf("; %s %s at %d", m2.kind, m2.file, m2.at)
			metaHit = metaHit || m2.file == "meta.log"
		}
		name += ")"
		before := treeHashes(t, dir)
		intact := intactIn(t, fx, dir)

		srv, err := NewServer(WithDataDir(dir), WithAddr("127.0.0.1:0"))
		if err != nil {
			var de *DamageError
			if !errors.As(err, &de) {
				t.Fatalf("%s: refused without a DamageError: %v", name, err)
			}
			if !strings.HasPrefix(de.Path, dir) {
				t.Fatalf("%s: damage names %q, outside the data directory", name, de.Path)
			}
			if after := treeHashes(t, dir); !mapsEqualKeys(before, after) {
				t.Fatalf("%s: a refused open changed the directory", name)
			}
			refused++
		} else {
			got, ok := served(t, srv)
			must(t, srv.Close())
			if !ok {
				t.Fatalf("%s: started without topic t", name)
			}
			checkServed(t, name, fx, intact, got)
			started++
		}

		// With repair: starts, keeps every intact message, deletes nothing.
		srv, err = NewServer(WithDataDir(dir), WithAddr("127.0.0.1:0"), WithRepair())
		if err != nil {
			t.Fatalf("%s: repair: %v", name, err)
		}
		got, ok := served(t, srv)
		must(t, srv.Close())
		if ok {
			checkServed(t, name+" repaired", fx, intact, got)
		} else if !metaHit {
			t.Fatalf("%s: repair lost topic t", name)
		}
		after := treeHashes(t, dir)
		for h, p := range before {
			if _, ok := after[h]; !ok && !isRewritable(p) {
				t.Fatalf("%s: repair deleted the contents of %s", name, p)
			}
		}
		// And the repaired directory opens as it is, without repair.
		srv, err = NewServer(WithDataDir(dir), WithAddr("127.0.0.1:0"))
		if err != nil {
			t.Fatalf("%s: the repaired directory does not open: %v", name, err)
		}
		must(t, srv.Close())
	}
	t.Logf("%d cases: %d refused, %d started", cases, refused, started)
}

// isRewritable: files whose contents an open may legitimately replace
// with the same records (a torn tail cut; offsets compacted).
func isRewritable(path string) bool {
	return strings.HasSuffix(path, "offsets.log") || strings.HasSuffix(path, ".seg") || strings.HasSuffix(path, "meta.log")
}

func mapsEqualKeys(a, b map[uint64]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// intactIn returns the acknowledged messages of fx that are intact in
// dir: their bytes are unchanged and the file still holds the whole record
// they were written in (a record cut short is a torn tail, which may be
// cut off).
func intactIn(t *testing.T, fx recoveryFixture, dir string) map[ackedMsg]bool {
	t.Helper()
	files := map[string][]byte{}
	out := map[ackedMsg]bool{}
	for _, a := range fx.msgs {
		cur, ok := files[a.file]
		if !ok {
			cur, _ = os.ReadFile(filepath.Join(dir, a.file))
			files[a.file] = cur
		}
		orig, err := os.ReadFile(filepath.Join(fx.dir, a.file))
		must(t, err)
		if int64(len(cur)) >= a.to && bytes.Equal(cur[a.mFrom:a.mTo], orig[a.mFrom:a.mTo]) {
			out[a] = true
		}
	}
	return out
}

// checkServed checks the served messages against the acknowledged ones:
// no offset with another message, and every intact one served.
func checkServed(t *testing.T, name string, fx recoveryFixture, intact map[ackedMsg]bool, got map[uint32]map[uint64]string) {
	t.Helper()
	want := map[uint32]map[uint64]string{}
	for _, a := range fx.msgs {
		if want[a.part] == nil {
			want[a.part] = map[uint64]string{}
		}
		want[a.part][a.offset] = a.payload
		if intact[a] {
			if p, ok := got[a.part][a.offset]; !ok || p != a.payload {
				t.Fatalf("%s: intact message %d/%d (%q) served as %q (%v)", name, a.part, a.offset, a.payload, p, ok)
			}
		}
	}
	for part, msgs := range got {
		for off, p := range msgs {
			if w, ok := want[part][off]; !ok || w != p {
				t.Fatalf("%s: offset %d/%d served %q, acknowledged %q", name, part, off, p, w)
			}
		}
	}
}

// TestRecoveryRefusesDamageAndRepairKeepsIntactMessages walks the cases of
// the issue one by one.
func TestRecoveryRefusesDamageAndRepairKeepsIntactMessages(t *testing.T) {
	fx := writeRecoveryFixture(t, 700)
	segsOf := func(dir string, part int) []string {
		s, _ := filepath.Glob(filepath.Join(dir, "data", "*", fmt.Sprint(part), "*.seg"))
		slices.Sort(s)
		if len(s) < 3 {
			t.Fatalf("partition %d has %d segments, the test wants 3 or more", part, len(s))
		}
		return s
	}
	flip := func(path string, at int64) {
		b, err := os.ReadFile(path)
		must(t, err)
		if at < 0 {
			at += int64(len(b))
		}
		b[at] ^= 0x40
		must(t, os.WriteFile(path, b, 0o644))
	}
	for _, tc := range []struct {
		name   string
		damage func(dir string) string // returns the path the error must name
	}{
		{"a byte in the middle of segment 0", func(dir string) string {
			s := segsOf(dir, 0)[0]
			flip(s, 100)
			return s
		}},
		{"a byte in the newest record of the newest segment", func(dir string) string {
			s := segsOf(dir, 1)
			flip(s[len(s)-1], -3)
			return s[len(s)-1]
		}},
		{"a byte at the start of meta.log", func(dir string) string {
			p := filepath.Join(dir, "meta.log")
			flip(p, 0)
			return p
		}},
		{"a byte in a meta.log record", func(dir string) string {
			p := filepath.Join(dir, "meta.log")
			flip(p, fileHeaderSize+recHeader2+3)
			return p
		}},
		{"a byte in offsets.log", func(dir string) string {
			p := filepath.Join(filepath.Dir(segsOf(dir, 0)[0]), "offsets.log")
			flip(p, fileHeaderSize+recHeader2+2)
			return p
		}},
		{"a missing middle segment", func(dir string) string {
			s := segsOf(dir, 2)
			must(t, os.Remove(s[1]))
			return s[2]
		}},
		{"an emptied middle segment", func(dir string) string {
			s := segsOf(dir, 2)
			must(t, os.Truncate(s[1], 0))
			return s[1]
		}},
		{"a middle segment cut short", func(dir string) string {
			s := segsOf(dir, 0)
			fi, err := os.Stat(s[1])
			must(t, err)
			must(t, os.Truncate(s[1], fi.Size()-5))
			return s[1]
		}},
		{"a missing meta.log", func(dir string) string {
			p := filepath.Join(dir, "meta.log")
			must(t, os.Remove(p))
			return p
		}},
		{"a missing partition directory", func(dir string) string {
			p := filepath.Dir(segsOf(dir, 1)[0])
			must(t, os.RemoveAll(p))
			return p
		}},
		{"a topic directory no metadata refers to", func(dir string) string {
			p := filepath.Join(dir, "data", "99", "0")
			must(t, os.MkdirAll(p, 0o755))
			must(t, os.WriteFile(filepath.Join(p, segName(0)), fileHeader(0), 0o644))
			return filepath.Dir(p)
		}},
		{"a missing offsets.log", func(dir string) string {
			p := filepath.Join(filepath.Dir(segsOf(dir, 0)[0]), "offsets.log")
			must(t, os.Remove(p))
			return p
		}},
		{"the newest segment is gone", func(dir string) string {
			s := segsOf(dir, 1)
			must(t, os.Remove(s[len(s)-1]))
			return s[len(s)-1]
		}},
		{"the newest segment is emptied", func(dir string) string {
			s := segsOf(dir, 1)
			must(t, os.Truncate(s[len(s)-1], 0))
			return s[len(s)-1]
		}},
		{"the newest records are cut off after a consumer read them", func(dir string) string {
			s := segsOf(dir, 1)
			rel, _ := filepath.Rel(dir, s[len(s)-1])
			for _, a := range fx.msgs {
				if a.file == rel {
					must(t, os.Truncate(s[len(s)-1], a.to)) // at a record's end: looks whole
					break
				}
			}
			return filepath.Join(filepath.Dir(s[0]), "offsets.log")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, fx.dir)
			path := tc.damage(dir)
			before := treeHashes(t, dir)
			intact := intactIn(t, fx, dir)
			_, err := NewServer(WithDataDir(dir))
			var de *DamageError
			if !errors.As(err, &de) || de.Path != path {
				t.Fatalf("open: %v, want a DamageError naming %s", err, path)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "WithRepair") {
				t.Fatalf("error does not name the file and the way out: %v", err)
			}
			if !mapsEqualKeys(before, treeHashes(t, dir)) {
				t.Fatalf("a refused open changed the directory")
			}
			srv, err := NewServer(WithDataDir(dir), WithRepair())
			must(t, err)
			got, ok := served(t, srv)
			must(t, srv.Close())
			if filepath.Base(path) == "meta.log" {
				return // the topic's creation may be what was lost
			}
			if !ok {
				t.Fatalf("repair lost the topic")
			}
			after := treeHashes(t, dir)
			for h, p := range before {
				if _, ok := after[h]; !ok && !isRewritable(p) {
					t.Fatalf("repair deleted %s", p)
				}
			}
			checkServed(t, "repaired", fx, intact, got)
		})
	}
}

// toFormat1 rewrites every data file under dir in the format written
// before files had headers: 12-byte record headers, no file header.
func toFormat1(t *testing.T, dir string) {
	t.Helper()
	must(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var out []byte
		o, err := scanFile(path, nil, func(body []byte, _ int64) error {
			out = binary.LittleEndian.AppendUint32(out, uint32(len(body)))
			out = binary.LittleEndian.AppendUint64(out, xxh3.Hash(body))
			out = append(out, body...)
			return nil
		})
		if err != nil || !o.clean() {
			return fmt.Errorf("%s: %v %+v", path, err, o)
		}
		return os.WriteFile(path, out, 0o644)
	}))
}

func TestRecoveryReadsFormat1Directories(t *testing.T) {
	fx := writeRecoveryFixture(t, 700)
	dir := copyDir(t, fx.dir)
	toFormat1(t, dir)
	check := func(srv *Server, extra int) {
		got, ok := served(t, srv)
		if !ok {
			t.Fatalf("topic lost")
		}
		n := 0
		for _, m := range got {
			n += len(m)
			for off, p := range m {
				if strings.HasPrefix(p, "new-") {
					delete(m, off) // sent after the conversion
				}
			}
		}
		checkServed(t, "format 1", fx, intactIn(t, fx, fx.dir), got)
		if n != len(fx.msgs)+extra {
			t.Fatalf("%d messages served, want %d", n, len(fx.msgs)+extra)
		}
	}
	// A torn tail of a format-1 file is cut as before.
	segs := segmentsOfPartition(t, dir, 2)
	last := segs[len(segs)-1]
	fi, err := os.Stat(last)
	must(t, err)
	f, err := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.Write([]byte{200, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	must(t, err)
	must(t, f.Close())

	tg := durable(t, dir, withSegmentBytes(700))
	check(tg.srv, 0)
	if fi2, _ := os.Stat(last); fi2.Size() != fi.Size() {
		t.Fatalf("torn tail of a format-1 segment not cut: %d bytes, was %d", fi2.Size(), fi.Size())
	}
	cli := tg.login(t)
	sid, tid := mustID("s"), mustID("t")
	must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(2), msgs(t, "new", 2)))
	_, err = cli.CreateStream("s2")
	must(t, err)
	must(t, cli.StoreConsumerOffset(iggcon.NewSingleConsumer(mustID("c2")), sid, tid, 1, u32p(2)))
	must(t, tg.srv.Close())
	// Format-1 segments are kept as they are; meta.log and offsets.log
	// are format 2 now.
	if b, _ := os.ReadFile(segs[0]); len(b) < 8 || nearMagic(b[:8]) {
		t.Fatalf("a format-1 segment was rewritten")
	}
	for _, p := range []string{filepath.Join(dir, "meta.log"), filepath.Join(filepath.Dir(last), "offsets.log")} {
		if b, _ := os.ReadFile(p); len(b) < 8 || !nearMagic(b[:8]) {
			t.Fatalf("%s is not format 2 after an open", p)
		}
	}
	srv, err := NewServer(WithDataDir(dir), withSegmentBytes(700))
	must(t, err)
	check(srv, 2)
	must(t, srv.Close())
}

func segmentsOfPartition(t *testing.T, dir string, part int) []string {
	t.Helper()
	s, err := filepath.Glob(filepath.Join(dir, "data", "*", fmt.Sprint(part), "*.seg"))
	must(t, err)
	slices.Sort(s)
	return s
}

// TestRepairRewritesOnlyTheDamagedSegment: a repair moves aside the
// damaged segment and, when the damage took its last messages, the next
// segment (rewritten with a header recording the hole); every other file
// stays as it was.
func TestRepairRewritesOnlyTheDamagedSegment(t *testing.T) {
	fx := writeRecoveryFixture(t, 700)
	for _, tc := range []struct {
		name  string
		at    func(size int64) int64
		moved int
	}{
		{"a message in the middle", func(int64) int64 { return fileHeaderSize + recHeader2 + 70 }, 1},
		{"the last message", func(size int64) int64 { return size - 1 }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, fx.dir)
			segs := segmentsOfPartition(t, dir, 0)
			if len(segs) < 4 {
				t.Fatalf("%d segments, the test wants 4 or more", len(segs))
			}
			b, err := os.ReadFile(segs[1])
			must(t, err)
			b[tc.at(int64(len(b)))] ^= 0x01
			must(t, os.WriteFile(segs[1], b, 0o644))
			intact := intactIn(t, fx, dir)
			before := treeHashes(t, dir)
			srv, err := NewServer(WithDataDir(dir), WithRepair())
			must(t, err)
			got, _ := served(t, srv)
			must(t, srv.Close())
			checkServed(t, tc.name, fx, intact, got)
			moved, _ := filepath.Glob(filepath.Join(dir, damagedDirName, "*", "data", "*", "0", "*.seg"))
			if len(moved) != tc.moved {
				t.Fatalf("%d segments moved aside, want %d: %v", len(moved), tc.moved, moved)
			}
			after := treeHashes(t, dir)
			kept := 0
			for h, p := range before {
				if _, ok := after[h]; ok && strings.HasSuffix(p, ".seg") {
					kept++
				}
			}
			if all := len(segmentsOfPartition(t, fx.dir, 0)) + len(segmentsOfPartition(t, fx.dir, 1)) + len(segmentsOfPartition(t, fx.dir, 2)); kept != all {
				t.Fatalf("%d of %d segment files kept byte for byte (in place or moved aside)", kept, all)
			}
			if n := len(got[0]); n < len(segs) {
				t.Fatalf("partition 0 serves %d messages", n)
			}
		})
	}
}
