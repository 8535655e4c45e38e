package state

import (
	"context"
	"errors"
	"sync"
	"testing"
)

type counter struct{ N int64 }

// A Txn started with NewTxnAfter reads its predecessor's writes while the
// predecessor commits, commits after it, and never commits when the
// predecessor did not.
func TestTxnAfterReadsPredecessorWrites(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		discard bool // end the predecessor with Discard instead of Commit
	}{{"committed", false}, {"discarded", true}} {
		t.Run(tc.name, func(t *testing.T) {
			db := openMem(t, nil)
			defer mustClose(t, db)
			counters := NewTable("counters", String(), JSON[counter]())
			shared := NewTable("accounts", String(), JSON[account]())
			if err := db.Attach(counters, shared); err != nil {
				t.Fatal(err)
			}
			key := []byte("k")
			tx1 := db.NewTxn()
			if err := counters.Write(tx1, 0, key, counter{N: 1}); err != nil {
				t.Fatal(err)
			}
			if err := shared.Write(tx1, 0, key, account{Owner: "a", History: []int64{1}}); err != nil {
				t.Fatal(err)
			}
			tx1.SetCheckpoint("src", 0, 1)
			tx2 := db.NewTxnAfter(tx1)

			// Before tx1 ends: tx2 sees tx1's write of the alias-free table;
			// nobody else does.
			v, ok, err := counters.Read(tx2, 0, key)
			if err != nil || !ok || v.N != 1 {
				t.Fatalf("Read through the predecessor = %+v, %v, %v; want 1", v, ok, err)
			}
			if _, ok, _ := counters.Get(ctx, "k"); ok {
				t.Fatal("Get sees an uncommitted write")
			}
			if err := counters.Write(tx2, 0, key, counter{N: v.N + 1}); err != nil {
				t.Fatal(err)
			}
			tx2.SetCheckpoint("src", 0, 2)

			var wg sync.WaitGroup
			var err1 error
			wg.Go(func() {
				if tc.discard {
					tx1.Discard()
				} else {
					err1 = tx1.Commit(ctx)
				}
			})
			// A table whose values may be shared waits for tx1 to end.
			a, ok, err := shared.Read(tx2, 0, key)
			if err != nil {
				t.Fatal(err)
			}
			if tc.discard == ok {
				t.Fatalf("shared Read after predecessor ended: %+v, %v", a, ok)
			}
			err2 := tx2.Commit(ctx)
			wg.Wait()
			if err1 != nil {
				t.Fatal(err1)
			}
			next, _, _ := db.Checkpoint("src", 0)
			got, ok, _ := counters.Get(ctx, "k")
			if tc.discard {
				if !errors.Is(err2, ErrPredecessorFailed) {
					t.Fatalf("Commit after a discarded predecessor = %v, want ErrPredecessorFailed", err2)
				}
				if ok || next != 0 {
					t.Fatalf("after a failed chain: value %+v %v, checkpoint %d; want none", got, ok, next)
				}
				return
			}
			if err2 != nil {
				t.Fatal(err2)
			}
			if !ok || got.N != 2 || next != 2 {
				t.Fatalf("after both commits: value %+v %v, checkpoint %d; want 2, 2", got, ok, next)
			}
			// A third Txn after a finished one reads committed state.
			tx3 := db.NewTxnAfter(tx2)
			if v, _, _ := counters.Read(tx3, 0, key); v.N != 2 {
				t.Fatalf("Read after the chain = %+v, want 2", v)
			}
			tx3.Discard()
		})
	}
}

// A predecessor whose Commit fails (its context is done) makes the
// successor's Commit fail too, with nothing of either visible.
func TestTxnAfterFailedCommit(t *testing.T) {
	db := openMem(t, nil)
	defer mustClose(t, db)
	counters := NewTable("counters", String(), JSON[counter]())
	if err := db.Attach(counters); err != nil {
		t.Fatal(err)
	}
	tx1 := db.NewTxn()
	_ = counters.Write(tx1, 0, []byte("a"), counter{N: 1})
	tx2 := db.NewTxnAfter(tx1)
	_ = counters.Write(tx2, 0, []byte("b"), counter{N: 1})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tx1.Commit(done); err == nil {
		t.Fatal("Commit with a done context succeeded")
	}
	if err := tx2.Commit(context.Background()); !errors.Is(err, ErrPredecessorFailed) {
		t.Fatalf("Commit after a failed predecessor = %v, want ErrPredecessorFailed", err)
	}
	for _, k := range []string{"a", "b"} {
		if _, ok, _ := counters.Get(context.Background(), k); ok {
			t.Fatalf("key %q visible after a failed chain", k)
		}
	}
}

// Many chained Txns of concurrent workers, each committing on its own
// goroutine while the next reads through it, sum exactly.
func TestTxnAfterPipelineSums(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	counters := NewTable("counters", String(), JSON[counter]())
	if err := db.Attach(counters); err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	const batches = 60
	var prev *Txn
	var done chan error
	for i := range batches {
		tx := db.NewTxnAfter(prev)
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Go(func() {
				v, _, err := counters.Read(tx, 0, k)
				if err == nil {
					err = counters.Write(tx, 0, k, counter{N: v.N + 1})
				}
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		tx.SetCheckpoint("src", 0, uint64(i+1))
		if done != nil {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		done = make(chan error, 1)
		go func(tx *Txn, done chan error) { done <- tx.Commit(ctx) }(tx, done)
		prev = tx
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		v, _, err := counters.Get(ctx, string(k))
		if err != nil || v.N != batches {
			t.Fatalf("key %s = %+v, %v; want %d", k, v, err, batches)
		}
	}
}
