package state

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/internal/xxh32"
)

// confirmer plays a partition's changelog for one partition: commits are
// confirmed (verified) some time after they return, as a publish and read
// back would; the ReadGate waits for every commit stamped so far, the
// ConfirmedCheck answers at once from the head's commit number.
type confirmer struct {
	mu       sync.Mutex
	stamped  uint64 // last commit stamped
	verified uint64
	moved    chan struct{} // closed and replaced when verified moves
	gates    atomic.Int64  // ReadGate calls
}

func (c *confirmer) gate(ctx context.Context, _ uint32) error {
	c.gates.Add(1)
	c.mu.Lock()
	target := c.stamped
	for c.verified < target {
		ch := c.moved
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
	c.mu.Unlock()
	return nil
}

func (c *confirmer) check(_ uint32, head []byte) (bool, error) {
	if head == nil {
		return true, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return binary.BigEndian.Uint64(head) <= c.verified, nil
}

func (c *confirmer) confirm(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq > c.verified {
		c.verified = seq
		close(c.moved)
		c.moved = make(chan struct{})
	}
}

func (c *confirmer) confirmedSeq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.verified
}

// loggedKey is the store of the confirmed-view tests: NoSync, in memory,
// with table "t" (uint64 values over parts partitions) whose key "k" is in
// partition p, which is logged through log.
type loggedKey struct {
	db  *DB
	tbl *Table[string, uint64]
	p   uint32
	log *testLogger
}

const loggedKeyName = "k"

func newLoggedKey(t *testing.T, parts uint32) *loggedKey {
	t.Helper()
	tbl := withParts(NewTable("t", String(), JSON[uint64]()), parts)
	db, err := Open("db", withFS(vfs.NewMem()), WithLogger(quiet), WithDurability(NoSync))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Attach(tbl); err != nil {
		t.Fatal(err)
	}
	f := &loggedKey{db: db, tbl: tbl, p: xxh32.Partition([]byte(loggedKeyName), parts), log: newTestLogger()}
	db.SetCommitLogger(f.log)
	db.LogPartition(f.p, true)
	return f
}

// confirmUpTo installs a ConfirmedCheck that confirms the heads up to the
// commit number the returned counter holds.
func (f *loggedKey) confirmUpTo() *atomic.Uint64 {
	var verified atomic.Uint64
	f.db.SetConfirmedCheck(func(_ uint32, head []byte) (bool, error) {
		return head == nil || binary.BigEndian.Uint64(head) <= verified.Load(), nil
	})
	return &verified
}

// write commits value v of the key.
func (f *loggedKey) write(t *testing.T, v uint64) {
	t.Helper()
	tx := f.db.NewTxn()
	if err := f.tbl.Write(tx, f.p, []byte(loggedKeyName), v); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRecentReadsAnswerTheConfirmedView: with a ReadGate and a
// ConfirmedCheck installed, a committer writes one key (commit i writes
// value i) while its commits are confirmed a little later; GetRecent and
// ScanPartitionRecent answer without calling the gate (once a view is
// confirmed), never show a commit that was not confirmed when they
// answered, and no answer (of either form, Get's included) is older than
// one received before its read began.
func TestRecentReadsAnswerTheConfirmedView(t *testing.T) {
	ctx := context.Background()
	f := newLoggedKey(t, 4)
	db, tbl, p, key := f.db, f.tbl, f.p, loggedKeyName
	c := &confirmer{moved: make(chan struct{})}
	f.log.onStamp = func(_ uint32, seq uint64, _ []Checkpoint) {
		c.mu.Lock()
		c.stamped = seq
		c.mu.Unlock()
	}
	db.SetReadGate(c.gate)
	db.SetConfirmedCheck(c.check)

	const commits = 300
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the committer, and its changelog a little behind
		defer close(done)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := uint64(1); i <= commits; i++ {
			tx := db.NewTxn()
			if err := tbl.Write(tx, p, []byte(key), i); err != nil {
				t.Error(err)
				return
			}
			tx.SetCheckpoint("src", p, i)
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			if rng.IntN(4) == 0 {
				c.confirm(i)
			}
			time.Sleep(50 * time.Microsecond) // paces the commits beside the readers
		}
		c.confirm(commits)
	})
	var mu sync.Mutex
	var clock, lastDoneAt uint64
	var best uint64 // the newest value answered so far
	type done1 struct{ at, val uint64 }
	var answered []done1
	var recentGates, recentReads atomic.Int64
	read := func(form int) {
		mu.Lock()
		begun := clock
		var floor uint64 // newest value answered before this read began
		for _, a := range answered {
			if a.at <= begun {
				floor = max(floor, a.val)
			}
		}
		mu.Unlock()
		before := c.gates.Load()
		var val uint64
		var ok bool
		var fr Freshness
		var err error
		switch form {
		case 0:
			val, ok, fr, err = tbl.GetRecent(ctx, key)
		case 1:
			fr, err = tbl.ScanPartitionRecent(ctx, p, nil, func(_ []byte, _ string, v uint64) bool {
				val, ok = v, true
				return false
			})
		default:
			val, ok, fr, err = tbl.GetFresh(ctx, key)
		}
		confirmedNow := c.confirmedSeq()
		if err != nil {
			t.Error(err)
			return
		}
		if form < 2 {
			recentReads.Add(1)
			recentGates.Add(c.gates.Load() - before)
		}
		if !ok {
			if floor > 0 {
				t.Errorf("form %d: no row after an answer of %d", form, floor)
			}
			return
		}
		if val > confirmedNow {
			t.Errorf("form %d answered commit %d, confirmed only up to %d", form, val, confirmedNow)
		}
		if val < floor {
			t.Errorf("form %d answered %d after an answer of %d was received", form, val, floor)
		}
		if len(fr.Checkpoints) != 1 || fr.Checkpoints[0].Next != val {
			t.Errorf("form %d: value %d with checkpoints %v", form, val, fr.Checkpoints)
		}
		mu.Lock()
		clock++
		lastDoneAt = clock
		answered = append(answered, done1{lastDoneAt, val})
		best = max(best, val)
		mu.Unlock()
	}
	for r := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				form := 0
				switch {
				case r == 1:
					form = 1
				case r == 2 && i%8 == 0:
					form = 2 // a waiting read now and then
				}
				read(form)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Every commit is confirmed now: recent reads catch up with the last
	// (the first may still answer the view taken before it, and start
	// the advance).
	testrun.WaitFor(t, 10*time.Second, func() error {
		if best != commits {
			read(0)
		}
		if best != commits {
			return fmt.Errorf("recent reads answered up to %d, want %d (every commit confirmed)", best, commits)
		}
		return nil
	})
	// The recent reads waited on the gate only until a view was confirmed
	// (the first read) and after a waiting read promoted a newer one: far
	// fewer than they were.
	if g, n := recentGates.Load(), recentReads.Load(); n == 0 || g > n/2 {
		t.Errorf("%d of %d recent reads went through the waiting gate", g, n)
	}
	t.Logf("%d recent reads, %d of them through the gate; %d answers in all", recentReads.Load(), recentGates.Load(), len(answered))
}

// TestConfirmedViewResetByARestore: a restore of the partition (held, then
// released) drops its confirmed view: a view from before the restore is
// never answered after it, and until the restore ends recent reads use the
// waiting path.
func TestConfirmedViewResetByARestore(t *testing.T) {
	ctx := context.Background()
	f := newLoggedKey(t, 2)
	db, tbl, p, key := f.db, f.tbl, f.p, loggedKeyName
	verified := f.confirmUpTo()
	write := func(v uint64) { t.Helper(); f.write(t, v) }
	get := func() uint64 {
		t.Helper()
		v, _, _, err := tbl.GetRecent(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	write(1)
	verified.Store(1)
	if got := get(); got != 1 {
		t.Fatalf("GetRecent = %d, want 1", got)
	}
	write(2) // commit 2, not confirmed: the confirmed view stays at 1
	if got := get(); got != 1 {
		t.Fatalf("GetRecent with commit 2 unconfirmed = %d, want 1", got)
	}
	// A restore replaces the partition's rows: here with value 7 as
	// commit 2 of another owner (a confirmed one).
	db.ResetConfirmedView(p, true)
	tx := db.NewTxn()
	if err := tbl.Write(tx, p, []byte(key), 7); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil { // commit 3 of the logger, standing in for the applied one
		t.Fatal(err)
	}
	verified.Store(3)
	db.ResetConfirmedView(p, false)
	if got := get(); got != 7 {
		t.Fatalf("GetRecent after the restore = %d, want 7 (no view from before it)", got)
	}
}

// TestWaitingReadMovesTheConfirmedView: a waiting read (GetFresh) whose
// gate passed confirms the view it read, so a later GetRecent does not
// answer an older view even while the ConfirmedCheck has not caught up
// (here it lags the gate on purpose).
func TestWaitingReadMovesTheConfirmedView(t *testing.T) {
	ctx := context.Background()
	f := newLoggedKey(t, 2)
	tbl, key := f.tbl, loggedKeyName
	f.db.SetReadGate(func(context.Context, uint32) error { return nil })
	verified := f.confirmUpTo()
	write := func(v uint64) { t.Helper(); f.write(t, v) }
	write(1)
	verified.Store(1)
	if v, _, _, err := tbl.GetRecent(ctx, key); err != nil || v != 1 {
		t.Fatalf("GetRecent = %d, %v; want 1", v, err)
	}
	write(2)
	if v, _, _, err := tbl.GetFresh(ctx, key); err != nil || v != 2 {
		t.Fatalf("GetFresh = %d, %v; want 2", v, err)
	}
	for range 3 {
		if v, _, _, err := tbl.GetRecent(ctx, key); err != nil || v != 2 {
			t.Fatalf("GetRecent after GetFresh answered 2 = %d, %v; want 2", v, err)
		}
	}
}
