package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// waitKeyFilter waits until db's key filter has loaded (tests only).
func waitKeyFilter(tb interface {
	Helper()
	Fatal(...any)
}, db *DB) {
	tb.Helper()
	if db.filter == nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for !db.filter.ready.Load() {
		if time.Now().After(deadline) {
			tb.Fatal("key filter not ready after 10 s")
		}
		time.Sleep(time.Millisecond) // polls the filter's ready flag
	}
}

// TestKeyFilterHasNoFalseNegatives adds keys from several goroutines while
// the filter grows, and checks that every added key is "maybe present" and
// that absent keys are mostly reported absent.
func TestKeyFilterHasNoFalseNegatives(t *testing.T) {
	for _, budget := range []int64{64, 4 << 10, DefaultKeyFilterSize} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			f := newKeyFilterFrom(25_000, budget) // grows to three parts
			f.ready.Store(true)
			const perG, gs = 25_000, 4
			var wg sync.WaitGroup
			for g := range gs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for range perG {
						h := r.Uint64()
						f.add(h)
						if f.absent(h) {
							t.Errorf("key %x added but reported absent", h)
							return
						}
					}
				}()
			}
			wg.Wait()
			for g := range gs {
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for range perG {
					if h := r.Uint64(); f.absent(h) {
						t.Fatalf("key %x reported absent after all adds", h)
					}
				}
			}
			if size := f.size(); size > max(budget, filterBlockWords*4) {
				t.Fatalf("filter holds %d bytes, budget %d", size, budget)
			}
			r := rand.New(rand.NewPCG(99, 99))
			fp := 0
			const probes = 50_000
			for range probes {
				if !f.absent(r.Uint64()) {
					fp++
				}
			}
			rate := float64(fp) / probes
			t.Logf("budget %d: %d bytes in %d parts, false positives %.3f%%", budget, f.size(), len(*f.parts.Load()), 100*rate)
			if budget == DefaultKeyFilterSize && rate > 0.03 {
				t.Fatalf("false-positive rate %.3f with room to grow; want below 3%%", rate)
			}
		})
	}
}

// TestKeyFilterAfterReopen writes rows, reopens the store (the filter is
// rebuilt by its scan), and checks that every row is read back, that rows
// never written are answered without Pebble, and that a row written after
// the reopen is found too.
func TestKeyFilterAfterReopen(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	tab := NewTable("t", String(), JSON[int64]())
	db := openMem(t, fs)
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	tx := db.NewTxn()
	for i := range 2000 {
		if err := tab.Write(tx, uint32(i%4), []byte(fmt.Sprint("k", i)), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mustClose(t, db)

	db = openMem(t, fs)
	defer mustClose(t, db)
	tab = NewTable("t", String(), JSON[int64]())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	waitKeyFilter(t, db)
	tx = db.NewTxn()
	defer tx.Discard()
	for i := range 2000 {
		v, ok, err := tab.Read(tx, uint32(i%4), []byte(fmt.Sprint("k", i)))
		if err != nil || !ok || v != int64(i) {
			t.Fatalf("Read(k%d) = %d %v %v; want %d true", i, v, ok, err, i)
		}
	}
	before := db.Stats()
	for i := range 2000 {
		if _, ok, err := tab.Read(tx, uint32(i%4), []byte(fmt.Sprint("absent", i))); err != nil || ok {
			t.Fatalf("Read(absent%d) = %v %v; want not found", i, ok, err)
		}
	}
	after := db.Stats()
	if skips := after.KeyFilterSkips - before.KeyFilterSkips; skips < 1900 {
		t.Fatalf("the filter answered %d of 2000 absent reads; want nearly all", skips)
	}
	tx2 := db.NewTxn()
	if err := tab.Write(tx2, 1, []byte("new"), 7); err != nil {
		t.Fatal(err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tab.b.Load().cache.purge() // make the next read go to Pebble
	tx3 := db.NewTxn()
	defer tx3.Discard()
	if v, ok, err := tab.Read(tx3, 1, []byte("new")); err != nil || !ok || v != 7 {
		t.Fatalf("Read(new) after its commit = %d %v %v; want 7 true", v, ok, err)
	}
}
