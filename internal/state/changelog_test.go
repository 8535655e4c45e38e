package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/strand-io/strand/internal/xxh32"
	"pgregory.net/rapid"
)

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// testLogger is a CommitLogger that numbers each partition's logged
// commits from 1 and checks that Stamp and Done alternate per partition.
// The head it returns is seq (u64 BE) followed by the checkpoints
// ("source=next;" each), so tests can check what Stamp was given.
type testLogger struct {
	mu      sync.Mutex
	next    map[uint32]uint64                            // the next seq of each partition
	open    map[uint32]uint64                            // stamped, not yet done
	stamps  []stampRec                                   // successful Stamps, in call order
	dones   []stampRec                                   // Dones, in call order
	fail    error                                        // the next Stamp fails with it (once)
	calls   int                                          // Stamp calls, failed ones included
	errs    []string                                     // protocol violations seen
	onStamp func(p uint32, seq uint64, cps []Checkpoint) // called by Stamp, outside mu
	onDone  func(p uint32, seq uint64, ok bool)          // called by Done, outside mu
}

type stampRec struct {
	p           uint32
	seq         uint64
	checkpoints []Checkpoint
	ok          bool
}

func newTestLogger() *testLogger {
	return &testLogger{next: map[uint32]uint64{}, open: map[uint32]uint64{}}
}

func (l *testLogger) Stamp(p uint32, cps []Checkpoint) (uint64, []byte, error) {
	l.mu.Lock()
	l.calls++
	if _, busy := l.open[p]; busy {
		l.errs = append(l.errs, fmt.Sprintf("Stamp of partition %d while seq %d is not done", p, l.open[p]))
	}
	if err := l.fail; err != nil {
		l.fail = nil
		l.mu.Unlock()
		return 0, nil, err
	}
	seq := l.next[p] + 1
	l.open[p] = seq
	l.stamps = append(l.stamps, stampRec{p: p, seq: seq, checkpoints: slices.Clone(cps)})
	hook := l.onStamp
	l.mu.Unlock()
	if hook != nil {
		hook(p, seq, cps)
	}
	return seq, testHead(seq, cps), nil
}

func (l *testLogger) Done(p uint32, seq uint64, ok bool) {
	if l.onDone != nil {
		l.onDone(p, seq, ok)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, busy := l.open[p]; !busy || cur != seq {
		l.errs = append(l.errs, fmt.Sprintf("Done(%d, %d) without its Stamp", p, seq))
	}
	delete(l.open, p)
	l.dones = append(l.dones, stampRec{p: p, seq: seq, ok: ok})
	if ok {
		l.next[p] = seq // a failed commit's seq is used again
	}
}

func (l *testLogger) violation(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

func (l *testLogger) check(t fataler) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		t.Fatalf("commit logger protocol violated: %s", strings.Join(l.errs, "; "))
	}
	if len(l.open) > 0 {
		t.Fatalf("Stamps without Done: %v", l.open)
	}
}

func testHead(seq uint64, cps []Checkpoint) []byte {
	h := binary.BigEndian.AppendUint64(nil, seq)
	for _, c := range cps {
		h = fmt.Appendf(h, "%s=%d;", c.Source, c.Next)
	}
	return h
}

func headSeq(t fataler, head []byte) uint64 {
	t.Helper()
	if len(head) < 8 {
		t.Fatalf("head %x has no seq", head)
	}
	return binary.BigEndian.Uint64(head)
}

// loggedRow is one changelog row as the engine would publish it.
type loggedRow struct {
	seq         uint64
	head, value []byte
}

// changelogRows returns the changelog rows of partition p in seq order.
func changelogRows(t fataler, db *DB, p uint32) []loggedRow {
	t.Helper()
	var out []loggedRow
	err := db.Rows(context.Background(), FamilyChangelog, p, func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("changelog key %x is not a seq", k)
		}
		head, _, err := DecodeLogged(v)
		if err != nil {
			return err
		}
		out = append(out, loggedRow{seq: binary.BigEndian.Uint64(k), head: bytes.Clone(head), value: bytes.Clone(v)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// applyRows applies changelog rows to db.
func applyRows(t fataler, db *DB, p uint32, rows []loggedRow) {
	t.Helper()
	for _, r := range rows {
		_, writes, err := DecodeLogged(r.value)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.ApplyLogged(context.Background(), p, writes); err != nil {
			t.Fatalf("ApplyLogged of seq %d of partition %d: %v", r.seq, p, err)
		}
	}
}

// partitionDump returns every row of partition p by family, except
// FamilyMeta and FamilyChangelog, read with one full scan of the store (an
// implementation independent of SnapshotPartition's).
func partitionDump(t fataler, db *DB, p uint32) map[Family]map[string]string {
	t.Helper()
	out := map[Family]map[string]string{}
	it, err := db.pdb.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) < prefixLen || binary.BigEndian.Uint32(k[1:prefixLen]) != p {
			continue
		}
		f := Family(k[0])
		if f == FamilyMeta || f == FamilyChangelog {
			continue
		}
		if out[f] == nil {
			out[f] = map[string]string{}
		}
		out[f][string(k[prefixLen:])] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameDump(a, b map[Family]map[string]string) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]string) bool { return maps.Equal(x, y) })
}

// compareDumps fails naming the first family where b differs from a.
func compareDumps(t fataler, what string, a, b map[Family]map[string]string) {
	t.Helper()
	for f := range 256 {
		fa, fb := a[Family(f)], b[Family(f)]
		if !maps.Equal(fa, fb) {
			t.Fatalf("%s: family %s differs:\n want %q\n got  %q", what, Family(f), fa, fb)
		}
	}
}

// --- the property test ---

const clParts = 4 // partitions of the property test; 0 and 1 are logged

var clKeys = func() []string {
	var ks []string
	for i := range 16 {
		ks = append(ks, fmt.Sprintf("key%02d", i))
	}
	return ks
}()

func clHome(key string) uint32 { return xxh32.Partition([]byte(key), clParts) }

func clKeysOf(p uint32) []string {
	var out []string
	for _, k := range clKeys {
		if clHome(k) == p {
			out = append(out, k)
		}
	}
	return out
}

var clFamilies = []Family{FamilyOutbox, FamilyDeadLetters, FamilyHolds, FamilySequences, FamilyParked, FamilyOrigins}

func clTables() [2]propTable {
	return [2]propTable{
		sliceTable{withParts(NewTable("alpha", String(), JSON[[]int64]()), clParts)},
		vecTable{withParts(NewTable("beta", String(), JSON[vec]()), clParts)},
	}
}

type clStore struct {
	db     *DB
	tables [2]propTable
}

func openCL(t fataler, opts ...Option) *clStore {
	t.Helper()
	db, err := Open("db", append([]Option{withFS(vfs.NewMem()), WithLogger(quiet), WithDurability(NoSync)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s := &clStore{db: db, tables: clTables()}
	if err := db.Attach(s.tables[0], s.tables[1]); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *clStore) close(t fataler) {
	t.Helper()
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// typedView reads every key of the given partitions through Get and
// through Read in a fresh Txn (the value cache), and checks that both agree.
func (s *clStore) typedView(t fataler, parts ...uint32) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for ti, tab := range s.tables {
		tx := s.db.NewTxn()
		for _, p := range parts {
			for _, key := range clKeysOf(p) {
				got, ok, err := tab.get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				read, rok, err := tab.read(tx, p, key)
				if err != nil {
					t.Fatal(err)
				}
				if ok != rok || !slices.Equal(got, read) {
					t.Fatalf("table %s key %s: Get = %v %v, Read in a fresh Txn = %v %v", tab.Name(), key, got, ok, read, rok)
				}
				if ok {
					out[fmt.Sprintf("%d/%s", ti, key)] = fmt.Sprint(got)
				}
			}
		}
		tx.Discard()
	}
	return out
}

// scanView returns the table rows Scan gives, by table and key.
func (s *clStore) scanView(t fataler) map[string]string {
	t.Helper()
	out := map[string]string{}
	for ti, tab := range s.tables {
		m, err := tab.scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			out[fmt.Sprintf("%d/%s", ti, k)] = fmt.Sprint(v)
		}
	}
	return out
}

type clSnapshot struct {
	chunks [][]byte
	taken  bool
}

// clRun is one run of the property test on store A.
type clRun struct {
	a         *clStore
	log       *testLogger
	logged    []uint32
	published map[uint32][]loggedRow // changelog rows collected and deleted
	snaps     map[uint32]*clSnapshot
	appendSeq int
	// wantCheckpoints is what each logged commit set, by partition and seq.
	wantCheckpoints map[uint32]map[uint64][]Checkpoint
}

func isLogged(p uint32) bool { return p < 2 }

func (r *clRun) txn(t *rapid.T) {
	ctx := context.Background()
	kind := rapid.SampledFrom([]string{"logged", "logged", "logged", "unlogged", "mixed", "stampFails", "publish"}).Draw(t, "kind")
	if kind == "publish" {
		r.publish(t)
		return
	}
	var parts []uint32
	switch kind {
	case "logged", "stampFails":
		parts = []uint32{uint32(rapid.IntRange(0, 1).Draw(t, "loggedPartition"))}
	case "unlogged":
		parts = []uint32{2, 3}
	case "mixed":
		parts = []uint32{uint32(rapid.IntRange(0, 1).Draw(t, "loggedPartition")), uint32(rapid.IntRange(2, 3).Draw(t, "otherPartition"))}
	}
	var before map[uint32]map[Family]map[string]string
	if kind == "mixed" || kind == "stampFails" {
		before = map[uint32]map[Family]map[string]string{}
		for p := range uint32(clParts) {
			before[p] = partitionDump(t, r.a.db, p)
		}
	}
	stamps := len(r.log.stamps)

	tx := r.a.db.NewTxn()
	cps := map[string]uint64{}
	wrote := map[uint32]bool{}
	ops := rapid.IntRange(1, 10).Draw(t, "ops")
	for i := range ops {
		p := parts[i%len(parts)]
		keys := clKeysOf(p)
		ti := rapid.IntRange(0, 1).Draw(t, "table")
		tab := r.a.tables[ti]
		switch op := rapid.SampledFrom([]string{"fold", "fold", "write", "delete", "readOnly", "checkpoint", "row", "append"}).Draw(t, "op"); op {
		case "fold", "readOnly":
			if len(keys) == 0 {
				continue
			}
			key := rapid.SampledFrom(keys).Draw(t, "key")
			v, ok, err := tab.read(tx, p, key)
			if err != nil {
				t.Fatal(err)
			}
			// The handler changes the value it read in place.
			if ok && len(v) > 0 {
				v[0] += 1000
			} else {
				v = append(v, int64(i))
			}
			if op == "fold" {
				if err := tab.write(tx, p, key, v); err != nil {
					t.Fatal(err)
				}
				wrote[p] = true
			} else if st, ok := tab.(sliceTable); ok {
				// Not written back: the handler must revert its change
				// (Table.Revert), as the engine does when a fold fails.
				if err := st.Revert(tx, p, []byte(key)); err != nil {
					t.Fatal(err)
				}
			}
		case "write":
			if len(keys) == 0 {
				continue
			}
			key := rapid.SampledFrom(keys).Draw(t, "key")
			v := rapid.SliceOfN(rapid.Int64Range(-9, 9), 0, 3).Draw(t, "value")
			if err := tab.write(tx, p, key, v); err != nil {
				t.Fatal(err)
			}
			wrote[p] = true
		case "delete":
			if len(keys) == 0 {
				continue
			}
			key := rapid.SampledFrom(keys).Draw(t, "key")
			if err := tab.del(tx, p, key); err != nil {
				t.Fatal(err)
			}
			wrote[p] = true
		case "checkpoint":
			src := rapid.SampledFrom(propSources).Draw(t, "source")
			next := rapid.Uint64Range(0, 1e6).Draw(t, "next")
			tx.SetCheckpoint(src, p, next)
			if len(parts) == 1 {
				cps[src] = next
			}
			wrote[p] = true
		case "row":
			f := rapid.SampledFrom(clFamilies).Draw(t, "family")
			key := rapid.SampledFrom([]string{"r0", "r1", "r2", "r3"}).Draw(t, "rowKey")
			if rapid.Bool().Draw(t, "deleteRow") {
				tx.DeleteRow(f, p, []byte(key))
			} else {
				tx.PutRow(f, p, []byte(key), []byte(rapid.StringN(0, 6, -1).Draw(t, "rowValue")))
			}
			wrote[p] = true
		case "append":
			r.appendSeq++
			tx.AppendRow(FamilyOutbox, p, fmt.Appendf(nil, "o%06d/%d", r.appendSeq, i), []byte("message"))
			wrote[p] = true
		}
	}
	for _, p := range parts {
		if !wrote[p] { // every partition of the Txn is written
			tx.PutRow(FamilyOutbox, p, []byte("last"), []byte(fmt.Sprint(ops)))
		}
	}
	if kind == "logged" && rapid.IntRange(0, 5).Draw(t, "rarely") == 0 {
		// The engine deletes published rows in the same Txn: they do not
		// count as a partition's writes.
		r.publishInto(t, tx)
	}
	if kind != "mixed" && kind != "stampFails" && rapid.IntRange(0, 6).Draw(t, "discard") == 0 {
		tx.Discard()
		return
	}
	injected := errors.New("injected stamp failure")
	if kind == "stampFails" {
		r.log.fail = injected
	}
	err := tx.Commit(ctx)
	switch kind {
	case "mixed":
		if !errors.Is(err, ErrMixedPartitions) {
			t.Fatalf("Commit of a Txn writing logged partition %d and partition %d = %v; want ErrMixedPartitions", parts[0], parts[1], err)
		}
	case "stampFails":
		if !errors.Is(err, injected) {
			t.Fatalf("Commit whose Stamp failed = %v; want the Stamp's error", err)
		}
	default:
		if err != nil {
			t.Fatal(err)
		}
	}
	if before != nil {
		for p := range uint32(clParts) {
			compareDumps(t, fmt.Sprintf("partition %d after a failed %s commit", p, kind), before[p], partitionDump(t, r.a.db, p))
		}
		if len(r.log.stamps) != stamps {
			t.Fatalf("a failed %s commit left a stamp", kind)
		}
		return
	}
	switch kind {
	case "logged":
		if len(r.log.stamps) != stamps+1 {
			t.Fatalf("a logged commit made %d Stamps, want 1", len(r.log.stamps)-stamps)
		}
		s := r.log.stamps[len(r.log.stamps)-1]
		want := slices.SortedFunc(func(yield func(Checkpoint) bool) {
			for src, next := range cps {
				if !yield(Checkpoint{src, next}) {
					return
				}
			}
		}, func(a, b Checkpoint) int { return strings.Compare(a.Source, b.Source) })
		if s.p != parts[0] || !slices.Equal(s.checkpoints, want) {
			t.Fatalf("Stamp(%d, %v); want Stamp(%d, %v)", s.p, s.checkpoints, parts[0], want)
		}
	case "unlogged":
		if len(r.log.stamps) != stamps {
			t.Fatal("a commit of partitions not logged was stamped")
		}
	}
	r.maybeSnapshot(t)
}

// publishInto adds to tx the deletion of the changelog rows of a logged
// partition, collecting them as published.
func (r *clRun) publishInto(t *rapid.T, tx *Txn) {
	p := uint32(rapid.IntRange(0, 1).Draw(t, "publishPartition"))
	rows := changelogRows(t, r.a.db, p)
	if len(rows) == 0 {
		return
	}
	n := rapid.IntRange(1, len(rows)).Draw(t, "publishRows")
	for _, row := range rows[:n] {
		tx.DeleteRow(FamilyChangelog, p, binary.BigEndian.AppendUint64(nil, row.seq))
	}
	// Collected now: the Txn may be discarded, but then the rows are
	// read again by the next publish, and collecting skips seqs it has.
	r.collect(p, rows[:n])
}

func (r *clRun) collect(p uint32, rows []loggedRow) {
	for _, row := range rows {
		have := r.published[p]
		if len(have) > 0 && have[len(have)-1].seq >= row.seq {
			continue
		}
		r.published[p] = append(have, row)
	}
}

// publish is the engine publishing changelog rows and deleting them, in a
// Txn of only changelog deletions: it is never stamped.
func (r *clRun) publish(t *rapid.T) {
	tx := r.a.db.NewTxn()
	stamps, calls := len(r.log.stamps), r.log.calls
	r.publishInto(t, tx)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.log.stamps) != stamps || r.log.calls != calls {
		t.Fatal("a commit of only changelog rows called Stamp")
	}
}

func (r *clRun) maybeSnapshot(t *rapid.T) {
	if rapid.IntRange(0, 3).Draw(t, "snapshotNow") != 0 {
		return
	}
	chunk := rapid.IntRange(1, 400).Draw(t, "chunkBytes")
	for _, p := range r.logged {
		s := r.snaps[p]
		if s.taken && rapid.Bool().Draw(t, "keepSnapshot") {
			continue
		}
		s.chunks, s.taken = nil, true
		err := r.a.db.SnapshotPartition(context.Background(), p, chunk, func(w []byte) error {
			s.chunks = append(s.chunks, bytes.Clone(w))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestChangelogRebuildsLoggedPartitions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		storeOpts := func(name string) []Option {
			return []Option{
				WithValueCacheSize(rapid.SampledFrom([]int64{0, 300, DefaultValueCacheSize}).Draw(t, name+"ValueCache")),
				WithKeyFilterSize(rapid.SampledFrom([]int64{0, 32, DefaultKeyFilterSize}).Draw(t, name+"KeyFilter")),
			}
		}
		a := openCL(t, storeOpts("a")...)
		defer a.close(t)
		r := &clRun{a: a, log: newTestLogger(), logged: []uint32{0, 1}, published: map[uint32][]loggedRow{},
			snaps: map[uint32]*clSnapshot{0: {}, 1: {}}}
		a.db.SetCommitLogger(r.log)
		for _, p := range r.logged {
			a.db.LogPartition(p, true)
		}
		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		for range steps {
			r.txn(t)
		}
		r.log.check(t)
		for _, p := range r.logged {
			r.collect(p, changelogRows(t, a.db, p))
			// Every successful logged commit left exactly one row.
			for i, row := range r.published[p] {
				if row.seq != uint64(i+1) {
					t.Fatalf("partition %d: changelog row %d has seq %d", p, i, row.seq)
				}
			}
			var want uint64
			for _, s := range r.log.dones {
				if s.p == p && s.ok {
					want = s.seq
				}
			}
			if n := uint64(len(r.published[p])); n != want {
				t.Fatalf("partition %d: %d changelog rows after %d logged commits", p, n, want)
			}
			if want > 0 {
				head, ok, err := a.db.LogHead(p)
				if err != nil || !ok || headSeq(t, head) != want {
					t.Fatalf("LogHead(%d) = %x %v %v; want the head of seq %d", p, head, ok, err, want)
				}
			}
		}
		wantDump := map[uint32]map[Family]map[string]string{}
		for _, p := range r.logged {
			wantDump[p] = partitionDump(t, a.db, p)
		}
		wantTyped := a.typedView(t, r.logged...)

		// (a) B1 follows the changelog from the start: keys it looked up
		// as missing, and values it cached, before an apply must read as
		// the apply left them.
		b1 := openCL(t, storeOpts("b1")...)
		defer b1.close(t)
		waitKeyFilter(t, b1.db)
		sentinel := b1.db.NewTxn()
		sentinel.PutRow(FamilyOutbox, 2, []byte("mine"), []byte("untouched"))
		if err := sentinel.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		b1Other := partitionDump(t, b1.db, 2)
		if got := b1.typedView(t, r.logged...); len(got) != 0 {
			t.Fatalf("fresh store reads %v", got)
		}
		for _, p := range r.logged {
			rows := r.published[p]
			k := rapid.IntRange(0, len(rows)).Draw(t, "applyFirst")
			applyRows(t, b1.db, p, rows[:k])
			b1.typedView(t, p) // caches values and misses
			b1.rewriteSame(t, p)
			applyRows(t, b1.db, p, rows[k:])
			compareDumps(t, fmt.Sprintf("B1 partition %d", p), wantDump[p], partitionDump(t, b1.db, p))
		}
		if got := b1.typedView(t, r.logged...); !maps.Equal(got, wantTyped) {
			t.Fatalf("B1 typed reads = %v; want %v", got, wantTyped)
		}
		if got := b1.scanView(t); !maps.Equal(got, wantTyped) {
			t.Fatalf("B1 Scan = %v; want %v", got, wantTyped)
		}
		for _, p := range r.logged {
			ah, aok, _ := a.db.LogHead(p)
			bh, bok, err := b1.db.LogHead(p)
			if err != nil || aok != bok || !bytes.Equal(ah, bh) {
				t.Fatalf("LogHead(%d): B1 %x %v %v, A %x %v", p, bh, bok, err, ah, aok)
			}
		}

		// DropPartition empties one partition (reads included), leaves the
		// others, and the changelog rebuilds it again.
		if err := b1.db.DropPartition(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if d := partitionDump(t, b1.db, 0); len(d) != 0 {
			t.Fatalf("partition 0 after DropPartition: %v", d)
		}
		if got := b1.typedView(t, 0); len(got) != 0 {
			t.Fatalf("partition 0 reads after DropPartition: %v", got)
		}
		compareDumps(t, "B1 partition 1 after dropping 0", wantDump[1], partitionDump(t, b1.db, 1))
		compareDumps(t, "B1 partition 2 after dropping 0", b1Other, partitionDump(t, b1.db, 2))
		applyRows(t, b1.db, 0, r.published[0])
		compareDumps(t, "B1 partition 0 re-applied", wantDump[0], partitionDump(t, b1.db, 0))
		if got := b1.typedView(t, r.logged...); !maps.Equal(got, wantTyped) {
			t.Fatalf("B1 typed reads after drop and re-apply = %v; want %v", got, wantTyped)
		}
		compareDumps(t, "B1 partition 2 at the end", b1Other, partitionDump(t, b1.db, 2))

		// (b) B2 had stale state of its own: it drops it, applies a
		// snapshot taken mid-way and the changelog rows after its head.
		b2 := openCL(t, storeOpts("b2")...)
		defer b2.close(t)
		waitKeyFilter(t, b2.db)
		b2.stale(t, r.logged)
		b2.typedView(t, r.logged...)
		for _, p := range r.logged {
			if err := b2.db.DropPartition(ctx, p); err != nil {
				t.Fatal(err)
			}
			if d, n := partitionDump(t, b2.db, p), countRows(t, b2.db, FamilyChangelog, p); len(d) != 0 || n != 0 {
				t.Fatalf("B2 partition %d after DropPartition: %v and %d changelog rows", p, d, n)
			}
			for _, w := range r.snaps[p].chunks {
				if err := b2.db.ApplyLogged(ctx, p, w); err != nil {
					t.Fatalf("ApplyLogged of a snapshot chunk of partition %d: %v", p, err)
				}
			}
			var from uint64
			if head, ok, err := b2.db.LogHead(p); err != nil {
				t.Fatal(err)
			} else if ok {
				from = headSeq(t, head)
			}
			rows := r.published[p]
			i, _ := slices.BinarySearchFunc(rows, from+1, func(r loggedRow, seq uint64) int { return cmpU64(r.seq, seq) })
			applyRows(t, b2.db, p, rows[i:])
			compareDumps(t, fmt.Sprintf("B2 partition %d (snapshot at seq %d)", p, from), wantDump[p], partitionDump(t, b2.db, p))
		}
		if got := b2.typedView(t, r.logged...); !maps.Equal(got, wantTyped) {
			t.Fatalf("B2 typed reads = %v; want %v", got, wantTyped)
		}
	})
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rewriteSame commits, for every table row of p, the value it has: Pebble
// is unchanged, but the value cache now holds the rows (a commit writes
// through), so a later apply must replace them there.
func (s *clStore) rewriteSame(t fataler, p uint32) {
	t.Helper()
	tx := s.db.NewTxn()
	for _, tab := range s.tables {
		for _, key := range clKeysOf(p) {
			v, ok, err := tab.read(tx, p, key)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if err := tab.write(tx, p, key, v); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// stale commits state of its own to the partitions: every key, checkpoints,
// rows of every family, and reads them (cached).
func (s *clStore) stale(t fataler, parts []uint32) {
	t.Helper()
	tx := s.db.NewTxn()
	for _, p := range parts {
		for _, tab := range s.tables {
			for _, key := range clKeysOf(p) {
				if err := tab.write(tx, p, key, []int64{-1, -2}); err != nil {
					t.Fatal(err)
				}
			}
		}
		tx.SetCheckpoint("orders", p, 999)
		for _, f := range clFamilies {
			tx.PutRow(f, p, []byte("stale"), []byte("stale"))
		}
		tx.PutRow(FamilyLogHead, p, nil, []byte("stale head"))
		tx.PutRow(FamilyChangelog, p, []byte("stale changelog"), nil)
		tx.PutRow(Family(0x42), p, []byte("unknown family"), nil)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func countRows(t fataler, db *DB, f Family, p uint32) int {
	t.Helper()
	n := 0
	if err := db.Rows(context.Background(), f, p, func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// --- concurrency ---

// TestStampOrderIsCommitOrder commits to one logged partition from several
// goroutines (one source each) at once. Each commit overwrites one row with
// its own id; every Stamp checks, under the partition's lock, that the
// committed row is the one of the commit stamped (and done) before it: the
// lock is held until the batch is applied, so Stamps follow the commit
// order exactly. Meanwhile another partition, never logged, commits too,
// and a third is logged on and off.
func TestStampOrderIsCommitOrder(t *testing.T) {
	ctx := context.Background()
	a := openCL(t)
	defer a.close(t)
	log := newTestLogger()
	var lastID, pendingID string // only touched in Stamp and Done, under partition 0's lock
	log.onStamp = func(p uint32, seq uint64, cps []Checkpoint) {
		if p != 0 || len(cps) != 1 {
			log.violation("Stamp(%d, %v)", p, cps)
			return
		}
		v, ok, err := a.db.Row(FamilyOutbox, 0, []byte("last"))
		if err != nil || string(v) != lastID || ok != (lastID != "") {
			log.violation("Stamp of seq %d sees last=%q (%v, %v); the commit done before it was %q", seq, v, ok, err, lastID)
		}
		pendingID = fmt.Sprintf("%s/%d", cps[0].Source, cps[0].Next)
	}
	log.onDone = func(p uint32, seq uint64, ok bool) {
		if ok {
			lastID = pendingID
		}
	}
	a.db.SetCommitLogger(log)
	a.db.LogPartition(0, true)

	const goroutines, commits = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, goroutines+2)
	stop := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			src := fmt.Sprintf("source-%d", g)
			for i := range commits {
				tx := a.db.NewTxn()
				tx.PutRow(FamilyOutbox, 0, []byte("last"), fmt.Appendf(nil, "%s/%d", src, i))
				tx.SetCheckpoint(src, 0, uint64(i))
				if err := a.tables[0].write(tx, 0, fmt.Sprintf("g%d", g), []int64{int64(i)}); err != nil {
					errs <- err
					return
				}
				if err := tx.Commit(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var side sync.WaitGroup
	side.Go(func() { // a partition never logged
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tx := a.db.NewTxn()
			tx.PutRow(FamilyOutbox, 1, []byte("n"), []byte(fmt.Sprint(i)))
			if err := tx.Commit(ctx); err != nil {
				errs <- err
				return
			}
		}
	})
	side.Go(func() { // a partition logged on and off, without commits
		for on := true; ; on = !on {
			select {
			case <-stop:
				return
			default:
			}
			a.db.LogPartition(2, on)
		}
	})
	wg.Wait()
	close(stop)
	side.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	log.check(t)

	rows := changelogRows(t, a.db, 0)
	if len(rows) != goroutines*commits {
		t.Fatalf("%d changelog rows, want %d", len(rows), goroutines*commits)
	}
	next := map[string]uint64{}
	for i, r := range rows {
		if r.seq != uint64(i+1) {
			t.Fatalf("changelog row %d has seq %d", i, r.seq)
		}
		src, num, _ := strings.Cut(strings.TrimSuffix(string(r.head[8:]), ";"), "=")
		var n uint64
		if _, err := fmt.Sscan(num, &n); err != nil || n != next[src] {
			t.Fatalf("seq %d is commit %q of %q, want commit %d", r.seq, num, src, next[src])
		}
		next[src]++
	}
	if n := countRows(t, a.db, FamilyChangelog, 1); n != 0 {
		t.Fatalf("partition 1, never logged, has %d changelog rows", n)
	}
	b := openCL(t)
	defer b.close(t)
	applyRows(t, b.db, 0, rows)
	compareDumps(t, "rebuilt partition 0", partitionDump(t, a.db, 0), partitionDump(t, b.db, 0))
}

// --- the layout of a logged commit ---

// reprEntries decodes a batch representation (with the package's own
// decoder) and fails on anything malformed.
func reprEntries(t fataler, repr []byte) []reprEntry {
	t.Helper()
	if len(repr) < reprHeaderLen {
		t.Fatalf("repr of %d bytes", len(repr))
	}
	var out []reprEntry
	for r := repr[reprHeaderLen:]; len(r) > 0; {
		e, rest, err := nextEntry(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		r = rest
	}
	if n := binary.LittleEndian.Uint32(repr[8:reprHeaderLen]); int(n) != len(out) {
		t.Fatalf("repr counts %d entries, has %d", n, len(out))
	}
	return out
}

func entryKeys(es []reprEntry) []string {
	var out []string
	for _, e := range es {
		k := fmt.Sprintf("%s/%d/%q", Family(e.key[0]), binary.BigEndian.Uint32(e.key[1:prefixLen]), e.key[prefixLen:])
		if !e.set {
			k += " (delete)"
		}
		out = append(out, k)
	}
	return out
}

func TestLoggedCommitWritesItsChangelogRow(t *testing.T) {
	ctx := context.Background()
	s := openCL(t)
	defer s.close(t)
	log := newTestLogger()
	s.db.SetCommitLogger(log)
	s.db.LogPartition(5, true)

	commit := func(build func(tx *Txn)) {
		t.Helper()
		tx := s.db.NewTxn()
		build(tx)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commit(func(tx *Txn) {
		if err := s.tables[0].write(tx, 5, "k", []int64{1}); err != nil {
			t.Fatal(err)
		}
		tx.SetCheckpoint("payments", 5, 7)
		tx.SetCheckpoint("orders", 5, 3)
		tx.PutRow(FamilyParked, 5, []byte("p"), []byte("v"))
	})
	wantCps := []Checkpoint{{"orders", 3}, {"payments", 7}}
	if len(log.stamps) != 1 || log.stamps[0].p != 5 || !slices.Equal(log.stamps[0].checkpoints, wantCps) {
		t.Fatalf("stamps = %+v; want one of partition 5 with %v", log.stamps, wantCps)
	}
	rows := changelogRows(t, s.db, 5)
	if len(rows) != 1 || rows[0].seq != 1 || !bytes.Equal(rows[0].head, testHead(1, wantCps)) {
		t.Fatalf("changelog rows = %+v; want seq 1 with the stamped head", rows)
	}
	if head, ok, err := s.db.LogHead(5); err != nil || !ok || !bytes.Equal(head, rows[0].head) {
		t.Fatalf("LogHead = %q %v %v; want %q", head, ok, err, rows[0].head)
	}
	_, writes, _ := DecodeLogged(rows[0].value)
	got := entryKeys(reprEntries(t, writes))
	slices.Sort(got)
	want := []string{
		`checkpoint/5/"orders"`, `checkpoint/5/"payments"`, `log-head/5/""`, `parked/5/"p"`, `table/5/"\x00\x00\x00\x01k"`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("logged writes = %q; want %q", got, want)
	}

	// The engine deletes the published row with the next commit of the
	// partition: the deletion is applied but is not part of the logged
	// writes (an applier would refuse a changelog key).
	commit(func(tx *Txn) {
		tx.DeleteRow(FamilyChangelog, 5, binary.BigEndian.AppendUint64(nil, 1))
		tx.PutRow(FamilyOutbox, 5, []byte("o"), []byte("m"))
	})
	rows = changelogRows(t, s.db, 5)
	if len(rows) != 1 || rows[0].seq != 2 {
		t.Fatalf("changelog rows after deleting seq 1 = %+v; want seq 2 only", rows)
	}
	_, writes, _ = DecodeLogged(rows[0].value)
	if got, want := entryKeys(reprEntries(t, writes)), []string{`outbox/5/"o"`, `log-head/5/""`}; !slices.Equal(got, want) {
		t.Fatalf("logged writes = %q; want %q", got, want)
	}

	// A commit of only changelog rows is never logged; nor is a partition
	// whose logging is off, nor anything without a logger.
	calls := log.calls
	commit(func(tx *Txn) { tx.DeleteRow(FamilyChangelog, 5, binary.BigEndian.AppendUint64(nil, 2)) })
	commit(func(tx *Txn) { tx.AppendRow(FamilyChangelog, 6, []byte("x"), []byte("y")) })
	commit(func(tx *Txn) { tx.PutRow(FamilyOutbox, 6, []byte("o"), []byte("m")) })
	s.db.SetCommitLogger(nil)
	commit(func(tx *Txn) { tx.PutRow(FamilyOutbox, 5, []byte("o2"), []byte("m")) })
	s.db.SetCommitLogger(log)
	s.db.LogPartition(5, false)
	commit(func(tx *Txn) { tx.PutRow(FamilyOutbox, 5, []byte("o3"), []byte("m")) })
	if log.calls != calls {
		t.Fatalf("%d Stamps for commits that are not logged", log.calls-calls)
	}
	if n := countRows(t, s.db, FamilyChangelog, 5); n != 0 {
		t.Fatalf("%d changelog rows of partition 5; want 0", n)
	}
	s.db.LogPartition(5, true)
	commit(func(tx *Txn) { tx.PutRow(FamilyOutbox, 5, []byte("o4"), []byte("m")) })
	if rows := changelogRows(t, s.db, 5); len(rows) != 1 || rows[0].seq != 3 {
		t.Fatalf("changelog rows after logging is on again = %+v; want seq 3", rows)
	}
	log.check(t)
}

func TestLoggedCommitOfMixedPartitionsFails(t *testing.T) {
	ctx := context.Background()
	s := openCL(t)
	defer s.close(t)
	log := newTestLogger()
	s.db.SetCommitLogger(log)
	s.db.LogPartition(1, true)
	s.db.LogPartition(3, true)

	cases := []struct {
		name  string
		build func(tx *Txn)
		mixed bool
	}{
		{"table rows of a logged and another partition", func(tx *Txn) {
			_ = s.tables[0].write(tx, 1, "a", []int64{1})
			_ = s.tables[0].write(tx, 2, "b", []int64{1})
		}, true},
		{"a checkpoint of another partition", func(tx *Txn) {
			_ = s.tables[1].write(tx, 1, "a", []int64{1})
			tx.SetCheckpoint("orders", 0, 1)
		}, true},
		{"a row of another partition", func(tx *Txn) {
			tx.SetCheckpoint("orders", 1, 1)
			tx.PutRow(FamilyHolds, 4, []byte("h"), nil)
		}, true},
		{"an appended row of another partition", func(tx *Txn) {
			tx.PutRow(FamilyHolds, 1, []byte("h"), nil)
			tx.AppendRow(FamilyOutbox, 0, []byte("o"), nil)
		}, true},
		{"two logged partitions", func(tx *Txn) {
			tx.PutRow(FamilyHolds, 1, []byte("h"), nil)
			tx.PutRow(FamilyHolds, 3, []byte("h"), nil)
		}, true},
		{"a logged partition among several others", func(tx *Txn) {
			tx.PutRow(FamilyHolds, 0, []byte("h"), nil)
			tx.PutRow(FamilyHolds, 2, []byte("h"), nil)
			tx.PutRow(FamilyHolds, 3, []byte("h"), nil)
			tx.PutRow(FamilyHolds, 4, []byte("h"), nil)
		}, true},
		{"partitions none of which is logged", func(tx *Txn) {
			_ = s.tables[0].write(tx, 0, "a", []int64{1})
			tx.PutRow(FamilyHolds, 2, []byte("h"), nil)
		}, false},
		{"a logged partition and another's changelog rows", func(tx *Txn) {
			tx.PutRow(FamilyHolds, 1, []byte("h"), nil)
			tx.DeleteRow(FamilyChangelog, 0, []byte("12345678"))
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := map[uint32]map[Family]map[string]string{}
			for p := range uint32(5) {
				before[p] = partitionDump(t, s.db, p)
			}
			calls := log.calls
			tx := s.db.NewTxn()
			c.build(tx)
			err := tx.Commit(ctx)
			if !c.mixed {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrMixedPartitions) {
				t.Fatalf("Commit = %v; want ErrMixedPartitions", err)
			}
			if log.calls != calls {
				t.Fatal("a commit of mixed partitions was stamped")
			}
			for p := range uint32(5) {
				compareDumps(t, fmt.Sprintf("partition %d", p), before[p], partitionDump(t, s.db, p))
			}
			// Nothing of it is read either (the value cache).
			tx = s.db.NewTxn()
			defer tx.Discard()
			for _, p := range []uint32{1, 2} {
				for _, tab := range s.tables {
					if v, ok, err := tab.read(tx, p, "a"); err != nil || ok {
						t.Fatalf("Read(%s, %d, a) after the failed commit = %v %v %v", tab.Name(), p, v, ok, err)
					}
				}
			}
		})
	}
	log.check(t)
}

func TestStampErrorFailsTheCommit(t *testing.T) {
	ctx := context.Background()
	s := openCL(t)
	defer s.close(t)
	log := newTestLogger()
	s.db.SetCommitLogger(log)
	s.db.LogPartition(0, true)
	injected := errors.New("the log is full")
	log.fail = injected

	tx := s.db.NewTxn()
	_ = s.tables[0].write(tx, 0, "k", []int64{1})
	tx.SetCheckpoint("orders", 0, 10)
	tx.PutRow(FamilyOutbox, 0, []byte("o"), []byte("m"))
	if err := tx.Commit(ctx); !errors.Is(err, injected) {
		t.Fatalf("Commit = %v; want the Stamp's error", err)
	}
	if d := partitionDump(t, s.db, 0); len(d) != 0 {
		t.Fatalf("a commit whose Stamp failed wrote %v", d)
	}
	if n := countRows(t, s.db, FamilyChangelog, 0); n != 0 {
		t.Fatalf("a commit whose Stamp failed wrote %d changelog rows", n)
	}
	if _, ok, err := s.db.LogHead(0); ok || err != nil {
		t.Fatalf("LogHead after a failed Stamp: %v %v", ok, err)
	}
	tx = s.db.NewTxn()
	if v, ok, err := s.tables[0].read(tx, 0, "k"); ok || err != nil {
		t.Fatalf("Read after a failed Stamp = %v %v %v", v, ok, err)
	}
	tx.Discard()
	if len(log.dones) != 0 {
		t.Fatalf("Done after a failed Stamp: %+v", log.dones)
	}

	// The next commit is logged as the first.
	tx = s.db.NewTxn()
	_ = s.tables[0].write(tx, 0, "k", []int64{2})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if rows := changelogRows(t, s.db, 0); len(rows) != 1 || rows[0].seq != 1 {
		t.Fatalf("changelog rows = %+v; want seq 1", rows)
	}
	log.check(t)
}

// --- ApplyLogged ---

// reprOf returns the representation of a batch built by build.
func reprOf(t fataler, db *DB, build func(b *pebble.Batch)) []byte {
	t.Helper()
	b := db.pdb.NewBatch()
	defer b.Close()
	build(b)
	return bytes.Clone(b.Repr())
}

func TestApplyLoggedRefusesForeignOrMalformedWrites(t *testing.T) {
	ctx := context.Background()
	s := openCL(t)
	defer s.close(t)
	good := rowKey(FamilyOutbox, 1, []byte("good"))
	withGood := func(build func(b *pebble.Batch)) []byte {
		return reprOf(t, s.db, func(b *pebble.Batch) {
			_ = b.Set(good, []byte("v"), nil)
			build(b)
		})
	}
	set := func(k []byte, v string) func(b *pebble.Batch) {
		return func(b *pebble.Batch) { _ = b.Set(k, []byte(v), nil) }
	}
	valid := withGood(set(rowKey(FamilyOutbox, 1, []byte("also good")), "v"))
	countOff := slices.Clone(valid)
	countOff[8]++
	cases := map[string][]byte{
		"a key of another partition":     withGood(set(rowKey(FamilyOutbox, 2, []byte("k")), "v")),
		"a delete of another partition":  withGood(func(b *pebble.Batch) { _ = b.Delete(rowKey(FamilyHolds, 0, []byte("k")), nil) }),
		"a metadata key":                 withGood(set(rowKey(FamilyMeta, 1, []byte("layout")), "v")),
		"a metadata key of partition 0":  withGood(set(metaKey(metaLayout), "\x09")),
		"a changelog key":                withGood(set(changelogKey(1, 9), "v")),
		"a key shorter than a prefix":    withGood(set([]byte{byte(FamilyOutbox), 0, 0}, "v")),
		"a table key without a table id": withGood(set(rowKey(FamilyTable, 1, []byte{0, 0}), "v")),
		"a checkpoint of 7 bytes":        withGood(set(checkpointKey("orders", 1), "1234567")),
		"a checkpoint without a source":  withGood(set(checkpointKey("", 1), "12345678")),
		"a log head with a key":          withGood(set(rowKey(FamilyLogHead, 1, []byte("x")), "h")),
		"a range deletion": withGood(func(b *pebble.Batch) {
			_ = b.DeleteRange(rowKey(FamilyOutbox, 1, nil), rowKey(FamilyOutbox, 2, nil), nil)
		}),
		"a merge":                         withGood(func(b *pebble.Batch) { _ = b.Merge(rowKey(FamilyOutbox, 1, []byte("m")), []byte("v"), nil) }),
		"a truncated representation":      valid[:len(valid)-1],
		"a count that does not match":     countOff,
		"a header cut short":              valid[:reprHeaderLen-1],
		"nothing":                         nil,
		"a length past the end":           append(slices.Clone(valid[:reprHeaderLen]), kindSet, 0x7f, 'k'),
		"an overlong length":              append(slices.Clone(valid[:reprHeaderLen]), kindSet, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"garbage after the last entry":    append(slices.Clone(valid), 0x99),
		"a header counting one entry too": append(slices.Clone(valid[:8]), 1, 0, 0, 0),
	}
	for name, writes := range cases {
		t.Run(name, func(t *testing.T) {
			err := s.db.ApplyLogged(ctx, 1, writes)
			if !errors.Is(err, ErrBadLoggedWrites) {
				t.Fatalf("ApplyLogged = %v; want ErrBadLoggedWrites", err)
			}
			for p := range uint32(3) {
				if d := partitionDump(t, s.db, p); len(d) != 0 {
					t.Fatalf("a refused apply wrote %v to partition %d", d, p)
				}
			}
		})
	}
	if err := s.db.ApplyLogged(ctx, 1, valid); err != nil {
		t.Fatal(err)
	}
	if d := partitionDump(t, s.db, 1); len(d[FamilyOutbox]) != 2 {
		t.Fatalf("partition 1 after a valid apply: %v", d)
	}
	if err := s.db.ApplyLogged(ctx, 1, reprOf(t, s.db, func(*pebble.Batch) {})); err != nil {
		t.Fatalf("ApplyLogged of no writes = %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.db.ApplyLogged(cctx, 1, valid); !errors.Is(err, context.Canceled) {
		t.Fatalf("ApplyLogged with a canceled context = %v", err)
	}
}

// TestApplyLoggedIsSeenByEveryRead applies writes to keys the store had
// cached (present and absent) and had looked up as missing through the key
// filter, and reads them back every way.
func TestApplyLoggedIsSeenByEveryRead(t *testing.T) {
	ctx := context.Background()
	a := openCL(t)
	defer a.close(t)
	log := newTestLogger()
	a.db.SetCommitLogger(log)
	a.db.LogPartition(0, true)
	keys := clKeysOf(0)
	if len(keys) < 3 {
		t.Fatalf("partition 0 has keys %v", keys)
	}
	tx := a.db.NewTxn()
	for _, tab := range a.tables {
		_ = tab.write(tx, 0, keys[0], []int64{1, 2}) // b has it cached, different
		_ = tab.write(tx, 0, keys[1], []int64{3})    // b looked it up as missing
		// keys[2]: b has it, a deletes it
		_ = tab.del(tx, 0, keys[2])
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := changelogRows(t, a.db, 0)

	b := openCL(t)
	defer b.close(t)
	waitKeyFilter(t, b.db)
	tx = b.db.NewTxn()
	for _, tab := range b.tables {
		_ = tab.write(tx, 0, keys[0], []int64{9, 9, 9})
		_ = tab.write(tx, 0, keys[2], []int64{9})
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	before := b.typedView(t, 0) // caches everything, misses included
	skips := b.db.Stats().KeyFilterSkips
	if len(before) != 4 || skips == 0 {
		t.Fatalf("b before the apply: %v, %d key filter skips", before, skips)
	}
	applyRows(t, b.db, 0, rows)
	if got, want := b.typedView(t, 0), a.typedView(t, 0); !maps.Equal(got, want) {
		t.Fatalf("b after the apply reads %v; want %v", got, want)
	}
	if got, want := b.scanView(t), a.scanView(t); !maps.Equal(got, want) {
		t.Fatalf("b after the apply scans %v; want %v", got, want)
	}
}

// --- SnapshotPartition ---

func TestSnapshotPartition(t *testing.T) {
	ctx := context.Background()
	s := openCL(t)
	defer s.close(t)
	log := newTestLogger()
	s.db.SetCommitLogger(log)
	s.db.LogPartition(3, true)
	for i := range 20 {
		tx := s.db.NewTxn()
		_ = s.tables[i%2].write(tx, 3, fmt.Sprintf("k%02d", i), slices.Repeat([]int64{int64(i)}, i))
		tx.SetCheckpoint("orders", 3, uint64(i))
		tx.PutRow(clFamilies[i%len(clFamilies)], 3, []byte(fmt.Sprint(i)), bytes.Repeat([]byte("v"), 3*i))
		tx.PutRow(Family(0xf0), 3, []byte(fmt.Sprint(i)), nil)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.db.LogPartition(3, false)
	for _, p := range []uint32{2, 4} { // neighbors, not logged
		tx := s.db.NewTxn()
		_ = s.tables[0].write(tx, p, "n", []int64{1})
		tx.PutRow(FamilyOutbox, p, []byte("n"), nil)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := partitionDump(t, s.db, 3)
	if len(want[FamilyLogHead]) != 1 || countRows(t, s.db, FamilyChangelog, 3) != 20 {
		t.Fatalf("partition 3 holds %v", want)
	}

	for _, chunk := range []int{1, 64, 300, 1 << 20} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			got := map[Family]map[string]string{}
			var last []byte
			chunks := 0
			err := s.db.SnapshotPartition(ctx, 3, chunk, func(w []byte) error {
				chunks++
				es := reprEntries(t, w)
				maxEntry := 0
				for _, e := range es {
					if !e.set {
						t.Fatalf("snapshot chunk holds a delete of %x", e.key)
					}
					if last != nil && bytes.Compare(e.key, last) <= 0 {
						t.Fatalf("key %x after %x", e.key, last)
					}
					last = bytes.Clone(e.key)
					f := Family(e.key[0])
					if got[f] == nil {
						got[f] = map[string]string{}
					}
					got[f][string(e.key[prefixLen:])] = string(e.value)
					maxEntry = max(maxEntry, len(e.key)+len(e.value)+2*binary.MaxVarintLen32+1)
				}
				if len(w) > chunk+maxEntry+reprHeaderLen {
					t.Fatalf("chunk of %d bytes for a chunk size of %d (largest entry %d)", len(w), chunk, maxEntry)
				}
				if chunks == 1 {
					// A commit made meanwhile is not part of the snapshot.
					tx := s.db.NewTxn()
					tx.PutRow(FamilyOutbox, 3, []byte("later"), nil)
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					t.Cleanup(func() {
						tx := s.db.NewTxn()
						tx.DeleteRow(FamilyOutbox, 3, []byte("later"))
						_ = tx.Commit(ctx)
					})
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			compareDumps(t, "snapshot", want, got)
			total := 0
			for _, rows := range want {
				total += len(rows)
			}
			if chunk == 1 && chunks != total {
				t.Fatalf("%d chunks of %d rows for a chunk size of 1; want one each", chunks, total)
			}
			if chunk == 1<<20 && chunks != 1 {
				t.Fatalf("%d chunks for a chunk size above the partition's size", chunks)
			}
			// The chunks rebuild the partition in another store.
			b := openCL(t)
			defer b.close(t)
			err = s.db.SnapshotPartition(ctx, 3, chunk, func(w []byte) error { return b.db.ApplyLogged(ctx, 3, w) })
			if err != nil {
				t.Fatal(err)
			}
			compareDumps(t, "rebuilt", partitionDump(t, s.db, 3), partitionDump(t, b.db, 3))
		})
	}

	stop := errors.New("stop")
	if err := s.db.SnapshotPartition(ctx, 3, 10, func([]byte) error { return stop }); err != stop {
		t.Fatalf("SnapshotPartition returns %v from fn's error; want it unchanged", err)
	}
	if err := s.db.SnapshotPartition(ctx, 3, 0, func([]byte) error { return nil }); err == nil {
		t.Fatal("SnapshotPartition with a chunk size of 0 succeeded")
	}
	calls := 0
	if err := s.db.SnapshotPartition(ctx, 7, 10, func([]byte) error { calls++; return nil }); err != nil || calls != 0 {
		t.Fatalf("SnapshotPartition of an empty partition: %v, %d calls", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.db.SnapshotPartition(cctx, 3, 1, func([]byte) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("SnapshotPartition with a canceled context = %v", err)
	}
}

// --- DropPartition ---

func TestDropPartitionAtTheEdgesOfTheKeySpace(t *testing.T) {
	ctx := context.Background()
	s := openCL(t)
	defer s.close(t)
	last := uint32(math.MaxUint32)
	tx := s.db.NewTxn()
	for _, p := range []uint32{last - 1, last} {
		tx.PutRow(Family(0xff), p, []byte("k"), []byte("v"))
		tx.PutRow(Family(0xff), p, nil, []byte("empty key"))
		tx.PutRow(FamilyOutbox, p, []byte("k"), []byte("v"))
		_ = s.tables[1].write(tx, p, "k", []int64{1})
		tx.SetCheckpoint("orders", p, 1)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	keep := partitionDump(t, s.db, last-1)
	if err := s.db.DropPartition(ctx, last); err != nil {
		t.Fatal(err)
	}
	if d := partitionDump(t, s.db, last); len(d) != 0 {
		t.Fatalf("partition %d after DropPartition: %v", last, d)
	}
	compareDumps(t, "the partition before", keep, partitionDump(t, s.db, last-1))
	// The metadata is kept: the store opens again with its tables.
	if err := s.db.DropPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.db.EnsureFingerprint([]byte("fp")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.db.getCopy(metaKey(metaLayout)); !ok || err != nil {
		t.Fatalf("layout version after dropping partition 0: %v %v", ok, err)
	}
	tx = s.db.NewTxn()
	defer tx.Discard()
	if v, ok, err := s.tables[1].read(tx, last-1, "k"); !ok || err != nil || !slices.Equal(v, []int64{1}) {
		t.Fatalf("Read of the partition kept = %v %v %v", v, ok, err)
	}
	if v, ok, err := s.tables[1].read(tx, last, "k"); ok || err != nil {
		t.Fatalf("Read of the dropped partition = %v %v %v", v, ok, err)
	}
}

// --- EncodeLogged / DecodeLogged ---

func TestEncodeDecodeLogged(t *testing.T) {
	for _, c := range []struct{ head, writes []byte }{
		{nil, nil}, {[]byte("h"), nil}, {nil, []byte("w")}, {bytes.Repeat([]byte("h"), 300), []byte("writes")},
	} {
		head, writes, err := DecodeLogged(EncodeLogged(c.head, c.writes))
		if err != nil || !bytes.Equal(head, c.head) || !bytes.Equal(writes, c.writes) {
			t.Fatalf("DecodeLogged(EncodeLogged(%q, %q)) = %q %q %v", c.head, c.writes, head, writes, err)
		}
	}
	for _, row := range [][]byte{nil, {0x80}, {0x05, 'a'}, bytes.Repeat([]byte{0xff}, 11)} {
		if _, _, err := DecodeLogged(row); !errors.Is(err, ErrBadLoggedWrites) {
			t.Fatalf("DecodeLogged(%x) = %v; want ErrBadLoggedWrites", row, err)
		}
	}
}

// FuzzApplyLogged feeds ApplyLogged (and DecodeLogged) arbitrary bytes: it
// never panics, never writes outside the partition or to its metadata or
// changelog, and applies all of a valid input or nothing of it.
func FuzzApplyLogged(f *testing.F) {
	ctx := context.Background()
	// The seeds: a logged commit's writes and changelog row, snapshot
	// chunks, a foreign key, no entries, nothing.
	seed := openCL(f)
	seed.db.SetCommitLogger(newTestLogger())
	seed.db.LogPartition(1, true)
	tx := seed.db.NewTxn()
	_ = seed.tables[0].write(tx, 1, "k", []int64{1})
	tx.SetCheckpoint("orders", 1, 5)
	tx.PutRow(FamilyOutbox, 1, []byte("o"), []byte("m"))
	tx.DeleteRow(FamilyHolds, 1, []byte("h"))
	if err := tx.Commit(ctx); err != nil {
		f.Fatal(err)
	}
	for _, r := range changelogRows(f, seed.db, 1) {
		_, w, _ := DecodeLogged(r.value)
		f.Add(bytes.Clone(w))
		f.Add(r.value)
	}
	_ = seed.db.SnapshotPartition(ctx, 1, 16, func(w []byte) error { f.Add(bytes.Clone(w)); return nil })
	f.Add(reprOf(f, seed.db, func(b *pebble.Batch) { _ = b.Set(rowKey(FamilyOutbox, 2, []byte("x")), nil, nil) }))
	f.Add(reprOf(f, seed.db, func(*pebble.Batch) {}))
	f.Add([]byte{})
	seed.close(f)

	// A store with rows outside partition 1 that must never change; a
	// fresh one every few hundred inputs, so that deleted rows do not pile
	// up and slow the fuzzing down.
	var (
		s       *clStore
		want    map[string]string
		inputs  int
		outside = func(t fataler) map[string]string {
			m := map[string]string{}
			it, err := s.db.pdb.NewIter(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer it.Close()
			for valid := it.First(); valid; valid = it.Next() {
				k := it.Key()
				if len(k) >= prefixLen && Family(k[0]) != FamilyMeta && binary.BigEndian.Uint32(k[1:prefixLen]) == 1 {
					continue
				}
				m[string(k)] = string(it.Value())
			}
			return m
		}
	)
	fresh := func(t fataler) {
		if s != nil {
			s.close(t)
		}
		s = openCL(t)
		tx := s.db.NewTxn()
		for _, p := range []uint32{0, 2} {
			_ = s.tables[0].write(tx, p, "k", []int64{int64(p)})
			tx.PutRow(FamilyChangelog, p, []byte("12345678"), []byte("row"))
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		want = outside(t)
	}
	f.Cleanup(func() {
		if s != nil {
			s.close(f)
		}
	})

	f.Fuzz(func(t *testing.T, data []byte) {
		if inputs++; inputs%500 == 1 {
			fresh(t)
		}
		_, _, _ = DecodeLogged(data)
		err := s.db.ApplyLogged(ctx, 1, data)
		if got := outside(t); !maps.Equal(got, want) {
			t.Fatalf("ApplyLogged (err %v) changed rows outside partition 1", err)
		}
		n := len(partitionDump(t, s.db, 1))
		if err != nil {
			if !errors.Is(err, ErrBadLoggedWrites) {
				t.Fatalf("ApplyLogged = %v; want ErrBadLoggedWrites", err)
			}
			if n != 0 {
				t.Fatalf("a refused apply wrote to partition 1")
			}
			return
		}
		// Accepted: the store holds what the last entry of each key says;
		// then partition 1 is emptied again.
		final := map[string]reprEntry{}
		for _, e := range reprEntries(t, data) {
			final[string(e.key)] = e
		}
		for k, e := range final {
			v, ok, gerr := s.db.getCopy([]byte(k))
			if gerr != nil || ok != e.set || !bytes.Equal(v, e.value) {
				t.Fatalf("key %x after the apply: %q %v %v; want %q %v", k, v, ok, gerr, e.value, e.set)
			}
		}
		if err := s.db.DropPartition(ctx, 1); err != nil {
			t.Fatal(err)
		}
	})
}

// nopLogger stamps commits with increasing seqs and an 8-byte head.
type nopLogger struct{ seq atomic.Uint64 }

func (l *nopLogger) Stamp(uint32, []Checkpoint) (uint64, []byte, error) {
	s := l.seq.Add(1)
	return s, binary.BigEndian.AppendUint64(nil, s), nil
}
func (l *nopLogger) Done(uint32, uint64, bool) {}

// BenchmarkLoggedCommit: BenchmarkCommit's Txn of 1000 writes to partition
// 0 (NoSync), with no partition logged, with another partition logged (the
// cost a commit not logged pays for the check), and with partition 0
// logged (the cost of a changelog row).
func BenchmarkLoggedCommit(b *testing.B) {
	keys := benchKeys(1_000_000)
	const n = 1000
	for _, mode := range []string{"off", "other-logged", "logged"} {
		b.Run(mode, func(b *testing.B) {
			db, tab, _ := benchOpen(b, WithDurability(NoSync))
			switch mode {
			case "other-logged":
				db.SetCommitLogger(new(nopLogger))
				db.LogPartition(1, true)
			case "logged":
				db.SetCommitLogger(new(nopLogger))
				db.LogPartition(0, true)
			}
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			var off uint64
			for b.Loop() {
				tx := db.NewTxn()
				for range n {
					k := keys[rng.IntN(len(keys))]
					if err := tab.Write(tx, 0, k, benchAccount{Owner: "someone", Balance: int64(off), Ops: 1}); err != nil {
						b.Fatal(err)
					}
					off++
				}
				tx.SetCheckpoint("bank/accounts", 0, off)
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
