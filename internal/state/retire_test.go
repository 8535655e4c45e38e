package state

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/strand-io/strand/internal/testrun"
)

const (
	retireParts = 2
	retireKeys  = 40
)

// retireKey is the i-th key of the rebuild tests, and its partition.
func retireKey(i int) (string, uint32) { return fmt.Sprintf("k%03d", i), uint32(i % retireParts) }

// fillRetire writes every key with value base+i in one Txn.
func fillRetire(t *testing.T, db *DB, tbl *Table[string, int], base int) {
	t.Helper()
	tx := db.NewTxn()
	for i := range retireKeys {
		k, p := retireKey(i)
		if err := tbl.Write(tx, p, []byte(k), base+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// rebuildUpToSwitch opens a table with old rows (values i), begins a
// build and writes its rows (values 1000+i): FinishBuild is what is left.
func rebuildUpToSwitch(t *testing.T, db *DB) (*Table[string, int], Build) {
	t.Helper()
	tbl := NewTable("counts", String(), JSON[int]())
	tbl.SetPartitions(retireParts)
	if err := db.Attach(tbl); err != nil {
		t.Fatal(err)
	}
	fillRetire(t, db, tbl, 0)
	b, err := db.BeginBuild(context.Background(), tbl, true, retireParts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fillRetire(t, db, tbl, 1000)
	return tbl, b
}

// countTableRows counts the keys of table id in Pebble (the live database, not
// a view), in every partition.
func countTableRows(t *testing.T, db *DB, id uint32) int {
	t.Helper()
	n := 0
	for p := range uint32(retireParts) {
		lo := appendTableKey(nil, id, p, nil)
		it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
		if err != nil {
			t.Fatal(err)
		}
		for valid := it.First(); valid; valid = it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// waitNoRows waits until table id has no key left in Pebble; it fails
// only if that never happens (a minute is no measure of speed).
func waitNoRows(t *testing.T, db *DB, id uint32) {
	t.Helper()
	testrun.WaitFor(t, time.Minute, func() error { // the retirement has no event to wait on
		if n := countTableRows(t, db, id); n != 0 {
			return fmt.Errorf("the old rows of table id %d are still there (%d keys) after the switch", id, n)
		}
		return nil
	})
}

func checkNew(t *testing.T, tbl *Table[string, int]) {
	t.Helper()
	ctx := context.Background()
	for i := range retireKeys {
		k, _ := retireKey(i)
		if v, ok, err := tbl.Get(ctx, k); err != nil || !ok || v != 1000+i {
			t.Fatalf("Get(%s) = %d %v %v after the switch, want the new version's %d", k, v, ok, err, 1000+i)
		}
	}
	n := 0
	if err := tbl.Scan(ctx, func(k string, v int) bool {
		if v < 1000 {
			t.Errorf("Scan after the switch saw %s = %d, an old version's value", k, v)
		}
		n++
		return true
	}); err != nil || n != retireKeys {
		t.Fatalf("Scan after the switch saw %d rows (%v), want %d", n, err, retireKeys)
	}
}

// TestRebuildRemovesOldRowsWithoutRestart: right after a rebuild's switch
// the old version's rows leave Pebble, with the store still open, and its
// marker with them.
func TestRebuildRemovesOldRowsWithoutRestart(t *testing.T) {
	ctx := context.Background()
	db, err := Open(t.TempDir(), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, db)
	tbl, b := rebuildUpToSwitch(t, db)
	if n := countTableRows(t, db, b.OldID); n != retireKeys {
		t.Fatalf("%d old rows before the switch, want %d", n, retireKeys)
	}
	if err := db.FinishBuild(ctx, tbl, retireParts); err != nil {
		t.Fatal(err)
	}
	checkNew(t, tbl)
	waitNoRows(t, db, b.OldID)
	if n := countTableRows(t, db, b.ID); n != retireKeys {
		t.Fatalf("%d rows of the new version, want %d", n, retireKeys)
	}
	db.bg.Wait() // the removal's goroutine has returned: its batch is all there is
	if _, ok, err := db.getCopy(metaKey(metaRetiredPrefix + "counts")); err != nil || ok {
		t.Fatalf("the marker of the old rows is still there (%v %v) after their removal", ok, err)
	}
	checkNew(t, tbl)
}

// TestRebuildCrashBeforeRemovalRestartRemoves: a crash between the switch
// and the removal (the removal held by the test hook, the crash a
// CrashClone of the in-memory file system) leaves the old rows and the
// marker; the restart (DropRetired, as AttachEvolving calls it) removes
// them and reads answer the new version.
func TestRebuildCrashBeforeRemovalRestartRemoves(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db, err := Open("db", withFS(mem), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	reached, release := make(chan struct{}), make(chan struct{})
	db.retireHook = func() { close(reached); <-release }
	tbl, b := rebuildUpToSwitch(t, db)
	if err := db.FinishBuild(ctx, tbl, retireParts); err != nil {
		t.Fatal(err)
	}
	<-reached
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	close(release)
	mustClose(t, db)

	db2, err := Open("db", withFS(crashed), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, db2)
	if n := countTableRows(t, db2, b.OldID); n != retireKeys {
		t.Fatalf("after the crash %d old rows, want all %d (the crash came before the removal)", n, retireKeys)
	}
	if _, ok, err := db2.getCopy(metaKey(metaRetiredPrefix + "counts")); err != nil || !ok {
		t.Fatalf("after the crash the marker is missing (%v %v)", ok, err)
	}
	tbl2 := NewTable("counts", String(), JSON[int]())
	tbl2.SetPartitions(retireParts)
	if err := db2.Attach(tbl2); err != nil {
		t.Fatal(err)
	}
	if err := db2.DropRetired(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countTableRows(t, db2, b.OldID); n != 0 {
		t.Fatalf("after the restart %d old rows are left", n)
	}
	if _, ok, err := db2.getCopy(metaKey(metaRetiredPrefix + "counts")); err != nil || ok {
		t.Fatalf("after the restart the marker is still there (%v %v)", ok, err)
	}
	checkNew(t, tbl2)
}

// TestRebuildReadsDuringRemoval: a Scan that began before the switch
// reads every old row although the removal commits while it is
// suspended (its snapshot keeps them), and every Get that begins after
// FinishBuild returned answers the new version, while the removal runs
// and after; a GetRecent answers the new version too once its reader saw
// it (before, it may answer the newest view taken before the switch).
func TestRebuildReadsDuringRemoval(t *testing.T) {
	ctx := context.Background()
	db, err := Open(t.TempDir(), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, db)
	tbl, b := rebuildUpToSwitch(t, db)

	scanning, removed := make(chan struct{}), make(chan struct{})
	type result struct {
		old, n int
		err    error
	}
	scanned := make(chan result, 1)
	go func() {
		var r result
		r.err = tbl.Scan(ctx, func(_ string, v int) bool {
			if r.n == 0 {
				close(scanning)
				<-removed
			}
			r.n++
			if v < 1000 {
				r.old++
			}
			return true
		})
		scanned <- r
	}()
	<-scanning

	hold := make(chan struct{})
	db.retireHook = func() { <-hold }
	if err := db.FinishBuild(ctx, tbl, retireParts); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			sawNew := false
			for i := r; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, _ := retireKey(i % retireKeys)
				get := tbl.Get
				if i%2 == 1 {
					get = func(ctx context.Context, k string) (int, bool, error) {
						v, ok, _, err := tbl.GetRecent(ctx, k)
						return v, ok, err
					}
				}
				v, ok, err := get(ctx, k)
				if err == nil && ok && v == 1000+i%retireKeys {
					sawNew = true
					continue
				}
				// GetRecent never waits: until this reader's first answer
				// from a view taken after the switch, it may answer from
				// the newest view taken before it (the old version), never
				// after one (reads never go back).
				if i%2 == 1 && !sawNew && err == nil && ok && v == i%retireKeys {
					continue
				}
				t.Errorf("a read during the removal: %s = %d %v %v, want the new version's %d", k, v, ok, err, 1000+i%retireKeys)
				return
			}
		})
	}
	close(hold)
	waitNoRows(t, db, b.OldID)
	close(stop)
	wg.Wait()
	close(removed)
	r := <-scanned
	if r.err != nil || r.n != retireKeys || r.old != retireKeys {
		t.Fatalf("the Scan begun before the switch saw %d rows, %d of the old version (%v), want all %d old", r.n, r.old, r.err, retireKeys)
	}
	checkNew(t, tbl)
}
