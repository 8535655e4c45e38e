package state

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/strand-io/strand/internal/testfs"
	"github.com/strand-io/strand/internal/testrun"
)

// TestReadsNeverShowWhatACrashTakesBack holds the WAL fsync of a commit, so
// that Pebble shows it while it has not returned: Get, GetFresh, Scan and
// ScanPartition must keep answering the state before it (without waiting
// for it), a crash at that moment must leave every answer given in place,
// and once the commit returned the next read shows it.
func TestReadsNeverShowWhatACrashTakesBack(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	fs := testfs.NewSyncHold(mem)
	db, err := Open("db", withFS(fs), WithLogger(quiet)) // Sync durability
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		fs.Release()
		if !closed {
			mustClose(t, db)
		}
	}()
	tbl := NewTable("counts", String(), JSON[int]())
	tbl.SetPartitions(1)
	if err := db.Attach(tbl); err != nil {
		t.Fatal(err)
	}
	commit := func(v int, next uint64) error {
		tx := db.NewTxn()
		if err := tbl.Write(tx, 0, []byte("k"), v); err != nil {
			return err
		}
		tx.SetCheckpoint("src", 0, next)
		return tx.Commit(ctx)
	}
	if err := commit(1, 10); err != nil {
		t.Fatal(err)
	}
	check := func(want int, wantNext uint64) {
		t.Helper()
		v, ok, fr, err := tbl.GetFresh(ctx, "k")
		if err != nil || !ok || v != want {
			t.Fatalf("GetFresh = %v %v %v, want %d", v, ok, err, want)
		}
		if len(fr.Checkpoints) != 1 || fr.Checkpoints[0] != (Checkpoint{Source: "src", Next: wantNext}) || fr.Partition != 0 {
			t.Fatalf("freshness %+v, want src at %d in partition 0", fr, wantNext)
		}
		if v, ok, fr, err := tbl.GetRecent(ctx, "k"); err != nil || !ok || v > want || fr.Checkpoints[0].Next > wantNext {
			t.Fatalf("GetRecent = %v %v %+v %v: newer than %d at %d", v, ok, fr, err, want, wantNext)
		}
		got := -1
		if err := tbl.Scan(ctx, func(_ string, v int) bool { got = v; return true }); err != nil || got != want {
			t.Fatalf("Scan saw %d (%v), want %d", got, err, want)
		}
		got = -1
		if err := tbl.ScanPartition(ctx, 0, nil, func(_ []byte, _ string, v int) bool { got = v; return true }); err != nil || got != want {
			t.Fatalf("ScanPartition saw %d (%v), want %d", got, err, want)
		}
	}
	check(1, 10)

	fs.Hold()
	done := make(chan error, 1)
	go func() { done <- commit(2, 11) }()
	testrun.WaitFor(t, 20*time.Second, func() error { // until Pebble shows the held commit
		var live int
		b, err := tbl.binding()
		if err != nil {
			t.Fatal(err)
		}
		ok, err := db.get(appendTableKey(nil, b.id, 0, []byte("k")), func(b []byte) error { live = int(b[0] - '0'); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if ok && live == 2 {
			return nil
		}
		return errors.New("the held commit is not visible to Pebble's readers")
	})
	check(1, 10) // not the held commit, and without waiting for it
	select {
	case err := <-done:
		t.Fatalf("the commit returned (%v) while its WAL sync was held", err)
	default:
	}

	// A crash now: the store comes back with what every reader saw.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	fs.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	check(2, 11) // the commit returned: the next read shows it
	// and GetRecent soon after, never going back
	testrun.WaitFor(t, 20*time.Second, func() error {
		v, _, _, err := tbl.GetRecent(ctx, "k")
		if err != nil || v < 1 {
			t.Fatalf("GetRecent = %v %v", v, err)
		}
		if v != 2 {
			return errors.New("GetRecent does not show the returned commit")
		}
		return nil
	})
	mustClose(t, db)
	closed = true

	db2, err := Open("db", withFS(crashed), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, db2)
	tbl2 := NewTable("counts", String(), JSON[int]())
	tbl2.SetPartitions(1)
	if err := db2.Attach(tbl2); err != nil {
		t.Fatal(err)
	}
	v, ok, fr, err := tbl2.GetFresh(ctx, "k")
	if err != nil || !ok || v < 1 || fr.Checkpoints[0].Next < 10 {
		t.Fatalf("after the crash: %v %v %+v %v; want at least what readers saw (1 at 10)", v, ok, fr, err)
	}
}

// BenchmarkGetWhileCommitting measures the cost of durable reads: Get of
// 1,000 keys while another goroutine commits one row at a time (Sync
// durability, on the machine's disk), against the live read Get used to
// make (a Pebble point read of the latest visible state, which may show a
// commit a crash takes back), and GetRecent (the newest durable view
// without waiting for an fsync). Idle: no commit runs, the view is reused.
func BenchmarkGetWhileCommitting(b *testing.B) {
	for _, mode := range []string{"durable", "recent", "live", "durable-idle"} {
		b.Run(mode, func(b *testing.B) {
			db, tab, _ := benchOpen(b)
			tab.SetPartitions(1)
			keys := benchKeys(1000)
			ctx := context.Background()
			tx := db.NewTxn()
			for _, k := range keys {
				if err := tab.Write(tx, 0, k, benchAccount{Balance: 1}); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if mode != "durable-idle" {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						tx := db.NewTxn()
						_ = tab.Write(tx, 0, keys[i%len(keys)], benchAccount{Balance: int64(i)})
						if err := tx.Commit(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			bnd, err := tab.binding()
			if err != nil {
				b.Fatal(err)
			}
			syncs := db.ViewSyncs()
			i := 0
			for b.Loop() {
				k := keys[i%len(keys)]
				i++
				if mode == "recent" {
					if _, ok, _, err := tab.GetRecent(ctx, string(k)); err != nil || !ok {
						b.Fatal(ok, err)
					}
					continue
				}
				if mode == "live" {
					buf := appendTableKey(nil, bnd.id, 0, k)
					if _, ok, _, err := tab.load(db, buf, db.hash(buf), 0, k); err != nil || !ok {
						b.Fatal(ok, err)
					}
					continue
				}
				if _, ok, err := tab.Get(ctx, string(k)); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
			b.ReportMetric(float64(db.ViewSyncs()-syncs)/float64(b.N), "syncs/op")
			close(stop)
			wg.Wait()
		})
	}
}
