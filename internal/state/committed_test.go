package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// peekN returns PeekCommitted's counter of key k in partition 0, -1 when
// the key has no row.
func peekN(t *testing.T, tab *Table[string, counter], k string) int64 {
	t.Helper()
	v, ok, err := tab.PeekCommitted(0, []byte(k))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return -1
	}
	return v.N
}

// commitN commits counter n (or, n < 0, a delete) of key k in partition 0.
func commitN(t *testing.T, db *DB, tab *Table[string, counter], k string, n int64) {
	t.Helper()
	tx := db.NewTxn()
	var err error
	if n < 0 {
		err = tab.Delete(tx, 0, []byte(k))
	} else {
		err = tab.Write(tx, 0, []byte(k), counter{N: n})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// openCounterTable opens an in-memory store (closed when the test ends) with a
// table of counters, values that share no memory.
func openCounterTable(t *testing.T, name string) (*DB, *Table[string, counter]) {
	t.Helper()
	db := openMem(t, nil)
	t.Cleanup(func() { mustClose(t, db) })
	tab := NewTable(name, String(), JSON[counter]())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	return db, tab
}

// TestPeekCommittedCache: a committed read of a table whose values share
// no memory is served from the value cache, sees every commit at once, and
// no write that did not commit: a discarded Txn, a Commit that failed, the
// successor of a failed predecessor leave what it sees (and the cache)
// unchanged. A dropped partition and logged writes applied (a restore, an
// ownership move) change it too.
func TestPeekCommittedCache(t *testing.T) {
	ctx := context.Background()
	db, tab := openCounterTable(t, "rates")
	hits := func() int64 { h, _, _ := tab.cacheStats(); return h }
	want := func(what string, n int64) {
		t.Helper()
		h0 := hits()
		if got := peekN(t, tab, "k"); got != n {
			t.Fatalf("%s: PeekCommitted = %d, want %d", what, got, n)
		}
		if got := peekN(t, tab, "k"); got != n || hits() == h0 {
			t.Fatalf("%s: a second PeekCommitted = %d with %d cache hits, want %d from the cache", what, got, hits()-h0, n)
		}
	}
	want("no row yet", -1)
	commitN(t, db, tab, "k", 1)
	want("after the first commit", 1)

	tx := db.NewTxn()
	if err := tab.Write(tx, 0, []byte("k"), counter{N: 2}); err != nil {
		t.Fatal(err)
	}
	want("with a write not committed", 1)
	tx.Discard()
	want("after a discarded Txn", 1)

	tx = db.NewTxn()
	if err := tab.Write(tx, 0, []byte("k"), counter{N: 3}); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := tx.Commit(done); err == nil {
		t.Fatal("Commit with a done context succeeded")
	}
	want("after a failed Commit", 1)

	tx1 := db.NewTxn()
	if err := tab.Write(tx1, 0, []byte("k"), counter{N: 4}); err != nil {
		t.Fatal(err)
	}
	tx2 := db.NewTxnAfter(tx1)
	if err := tab.Write(tx2, 0, []byte("k"), counter{N: 5}); err != nil {
		t.Fatal(err)
	}
	tx1.Discard()
	if err := tx2.Commit(ctx); !errors.Is(err, ErrPredecessorFailed) {
		t.Fatalf("Commit after a discarded predecessor = %v, want ErrPredecessorFailed", err)
	}
	want("after a failed chain", 1)

	commitN(t, db, tab, "k", 6)
	want("after a second commit", 6)
	commitN(t, db, tab, "k", -1)
	want("after a delete", -1)
	commitN(t, db, tab, "k", 7)
	want("after a commit of a deleted key", 7)

	// A restore: the partition is dropped, and another store's rows of it
	// are applied as logged writes.
	other := openMem(t, nil)
	defer mustClose(t, other)
	otab := NewTable("rates", String(), JSON[counter]())
	if err := other.Attach(otab); err != nil {
		t.Fatal(err)
	}
	commitN(t, other, otab, "k", 9)
	var chunks [][]byte
	if err := other.SnapshotPartition(ctx, 0, 1<<20, func(w []byte) error {
		chunks = append(chunks, append([]byte(nil), w...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.DropPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	want("after the partition was dropped", -1)
	for _, w := range chunks {
		if err := db.ApplyLogged(ctx, 0, w); err != nil {
			t.Fatal(err)
		}
	}
	want("after the other store's rows were applied", 9)
}

// TestCommittedReadsKeepOffWritesInFlight: while a write of the table is
// in flight, a committed read neither hits nor fills; a fill is dropped if
// a write began after the read did.
func TestCommittedReadsKeepOffWritesInFlight(t *testing.T) {
	c := newValueCache[int](&cacheBudget{limit: 1 << 20})
	key, other := []byte("k"), []byte("o")
	const h, ho = 1, 2
	c.put(h, string(key), 0, 1, true, 1)
	if v, _, hit, _, _ := c.lookupCommitted(h, key); !hit || v != 1 {
		t.Fatalf("lookupCommitted = %d, hit %v; want 1 from the cache", v, hit)
	}
	c.writes.begin()
	_, _, hit, w, gen := c.lookupCommitted(h, key)
	if hit {
		t.Fatal("lookupCommitted hit while a write was in flight")
	}
	c.fillCommitted(ho, other, 5, true, 1, w, gen)
	if c.len() != 1 {
		t.Fatal("a committed read filled the cache while a write was in flight")
	}
	c.put(h, string(key), 0, 2, true, 1)
	c.writes.end()
	if v, _, hit, _, _ := c.lookupCommitted(h, key); !hit || v != 2 {
		t.Fatalf("lookupCommitted after the write = %d, hit %v; want 2 from the cache", v, hit)
	}

	// A read that began before a write and fills after it: dropped.
	_, _, hit, w, gen = c.lookupCommitted(ho, other)
	if hit {
		t.Fatal("hit of a key never cached")
	}
	c.writes.begin()
	c.writes.end()
	c.fillCommitted(ho, other, 5, true, 1, w, gen)
	if c.len() != 1 {
		t.Fatal("a fill from before a write was kept")
	}
	// One with no write since: kept.
	_, _, _, w, gen = c.lookupCommitted(ho, other)
	c.fillCommitted(ho, other, 5, true, 1, w, gen)
	if v, _, hit, _, _ := c.lookupCommitted(ho, other); !hit || v != 5 {
		t.Fatalf("lookupCommitted after a fill = %d, hit %v; want 5", v, hit)
	}
}

// TestPeekCommittedNeverGoesBack: readers beside a writer that commits
// rising counters to a few keys never see a key's counter go down, nor
// one older than the last commit that returned before the read began.
func TestPeekCommittedNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	db, tab := openCounterTable(t, "rates")
	const keys, commits, readers = 4, 1500, 3
	var committed [keys]atomic.Int64 // the last counter whose commit returned
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Go(func() {
			var last [keys]int64
			for i := 0; !stop.Load(); i++ {
				k := (i + r) % keys
				floor := committed[k].Load()
				v, ok, err := tab.PeekCommitted(0, fmt.Appendf(nil, "k%d", k))
				if err != nil {
					errs <- err
					return
				}
				var n int64
				if ok {
					n = v.N
				}
				if n < floor || n < last[k] {
					errs <- fmt.Errorf("reader %d key %d: read %d after %d, with %d committed before the read", r, k, n, last[k], floor)
					return
				}
				last[k] = n
			}
		})
	}
	for i := 1; i <= commits; i++ {
		k := i % keys
		tx := db.NewTxn()
		if i%10 == 0 { // a write that never commits
			_ = tab.Write(tx, 0, fmt.Appendf(nil, "k%d", k), counter{N: 1 << 40})
			tx.Discard()
			continue
		}
		if err := tab.Write(tx, 0, fmt.Appendf(nil, "k%d", k), counter{N: int64(i)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		committed[k].Store(int64(i))
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		if v, _, _ := tab.PeekCommitted(0, fmt.Appendf(nil, "k%d", k)); v.N != committed[k].Load() {
			t.Fatalf("key %d at the end: %d, want %d", k, v.N, committed[k].Load())
		}
	}
}
