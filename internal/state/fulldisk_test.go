package state

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// The tests of a store whose disk fails or fills up (docs/design.md, "When
// the log or the store changes"): the process never stops, commits fail
// with an error, and a restart holds exactly the fold of the events up to
// its checkpoints.

// commitUntilFailed commits batches of increments from one goroutine per
// partition (as the partition pipelines do) until each has seen a commit
// fail, calling trouble once after the 40th commit began. It returns, per
// partition, the checkpoint of its last commit that returned nil, the last
// one it tried, and the error.
func commitUntilFailed(t *testing.T, db *DB, tab *Table[string, int64], trouble func()) (ok, tried []uint64, errs []error) {
	t.Helper()
	ctx := context.Background()
	ok, tried, errs = make([]uint64, crashPartitions), make([]uint64, crashPartitions), make([]error, crashPartitions)
	var (
		wg      sync.WaitGroup
		once    sync.Once
		commits atomic.Int64
	)
	for p := range uint32(crashPartitions) {
		wg.Go(func() {
			next, _, err := db.Checkpoint(crashSource, p)
			if err != nil {
				errs[p] = err
				return
			}
			ok[p], tried[p] = next, next
			for {
				if commits.Add(1) == 40 {
					once.Do(trouble)
				}
				tx := db.NewTxn()
				const n = 50
				for off := next; off < next+n; off++ {
					k, a := crashEvent(p, off)
					v, _, err := tab.Read(tx, p, []byte(k))
					if err == nil {
						err = tab.Write(tx, p, []byte(k), v+a)
					}
					if err != nil {
						errs[p] = err
						tx.Discard()
						return
					}
				}
				tx.SetCheckpoint(crashSource, p, next+n)
				tx.PutRow(FamilyOutbox, p, []byte("last"), []byte(strconv.FormatUint(next+n, 10)))
				tried[p] = next + n
				if err := tx.Commit(ctx); err != nil {
					errs[p] = err
					return
				}
				next += n
				ok[p] = next
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("commits still running 30s after the disk failed")
	}
	return ok, tried, errs
}

// checkFold checks that the store holds exactly the fold of the events up
// to its checkpoints, and returns the checkpoints.
func checkFold(t *testing.T, db *DB, tab *Table[string, int64]) [crashPartitions]uint64 {
	t.Helper()
	var next [crashPartitions]uint64
	for p := range uint32(crashPartitions) {
		n, _, err := db.Checkpoint(crashSource, p)
		if err != nil {
			t.Fatal(err)
		}
		next[p] = n
	}
	for k, want := range crashFold(next) {
		if v, _, err := tab.Get(context.Background(), k); err != nil || v != want {
			t.Errorf("key %s = %d (%v), want %d: the table is not the fold of the events up to its checkpoints %v", k, v, err, want, next)
		}
	}
	return next
}

func openCounters(t *testing.T, dir string, opts ...Option) (*DB, *Table[string, int64]) {
	t.Helper()
	db, err := Open(dir, append([]Option{WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	tab := NewTable("counters", String(), JSON[int64]())
	tab.SetPartitions(10) // crashLocator's partitions
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	return db, tab
}

// A disk whose free space falls below the store's reserve while partitions
// commit: every commit from then on is refused with an error wrapping
// ErrDiskFull, ErrStoreFailed and ENOSPC, without Pebble writing anything
// (so it never meets a full disk); once there is room again commits go on;
// and a restart holds exactly what the commits that returned nil wrote.
func TestDiskBelowReserveRefusesCommitsAndRestartIsExact(t *testing.T) {
	mem := vfs.NewMem()
	const total = 1 << 30
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: total, TotalBytes: total})
	db, tab := openCounters(t, "db", withFS(mem), WithDiskReserve(8<<20))
	ok, tried, errs := commitUntilFailed(t, db, tab, func() {
		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 4 << 20, UsedBytes: total - 4<<20, TotalBytes: total})
	})
	for p, err := range errs {
		if !errors.Is(err, ErrDiskFull) || !errors.Is(err, ErrStoreFailed) || !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("partition %d: commit below the reserve = %v, want ErrDiskFull, ErrStoreFailed and ENOSPC", p, err)
		}
		if ok[p] == tried[p] {
			t.Errorf("partition %d: the refused commit is not the last one tried", p)
		}
	}
	if !strings.Contains(errs[0].Error(), "4194304 bytes free, less than the 8388608 bytes") || !strings.Contains(errs[0].Error(), "make room on the disk") {
		t.Errorf("the error does not say how much is free, what is needed and what to do: %v", errs[0])
	}
	// Room again: the store is healthy and commits go on.
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: total, TotalBytes: total})
	time.Sleep(2 * spaceCheckEvery) // paces: the store's last look at the free space expires
	tx := db.NewTxn()
	tx.PutRow(FamilyOutbox, 0, []byte("after"), []byte("room"))
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("a commit once there is room again = %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, tab = openCounters(t, "db", withFS(mem))
	defer db.Close()
	next := checkFold(t, db, tab)
	for p := range crashPartitions {
		if next[p] != ok[p] {
			t.Errorf("partition %d: checkpoint %d after the restart, the last commit that returned nil wrote %d", p, next[p], ok[p])
		}
	}
}

// walSyncFails is an errorfs injector that fails every sync of a
// write-ahead log file once turned on: a disk that accepted the writes into
// its cache and cannot persist them (a full thin-provisioned volume, an I/O
// error).
type walSyncFails struct{ on atomic.Bool }

func (w *walSyncFails) String() string { return "WAL syncs fail" }

func (w *walSyncFails) MaybeError(op errorfs.Op) error {
	if !w.on.Load() || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return &fs.PathError{Op: "fsync", Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

// A write-ahead log whose fsync fails while partitions commit (Pebble's
// error-injecting file system): Pebble declares its commit pipeline dead
// (Logger.Fatalf), and strand turns that into an error of every commit
// wrapping ErrStoreFailed instead of a panic of the process; the store then
// refuses writes; and a restart holds exactly the fold of the events up to
// its checkpoints, which are at least those of the commits that returned
// nil and at most those tried.
func TestFailedWALSyncFailsTheStoreNotTheProcess(t *testing.T) {
	dir := t.TempDir()
	inj := &walSyncFails{}
	db, tab := openCounters(t, dir, withFS(errorfs.Wrap(vfs.Default, inj)))
	ok, tried, errs := commitUntilFailed(t, db, tab, func() { inj.on.Store(true) })
	for p, err := range errs {
		if !errors.Is(err, ErrStoreFailed) {
			t.Errorf("partition %d: commit whose WAL sync failed = %v, want ErrStoreFailed", p, err)
		}
	}
	if !strings.Contains(errs[0].Error(), "make room on its disk") {
		t.Errorf("the error does not say what to do: %v", errs[0])
	}
	tx := db.NewTxn()
	tx.PutRow(FamilyOutbox, 0, []byte("after"), []byte("failure"))
	if err := tx.Commit(context.Background()); !errors.Is(err, ErrStoreFailed) {
		t.Errorf("a commit after the failure = %v, want ErrStoreFailed", err)
	}
	if err := db.Close(); err != nil {
		t.Logf("Close after the failure: %v", err)
	}

	inj.on.Store(false)
	db, tab = openCounters(t, dir)
	defer db.Close()
	next := checkFold(t, db, tab)
	for p := range crashPartitions {
		if next[p] < ok[p] || next[p] > tried[p] {
			t.Errorf("partition %d: checkpoint %d after the restart, want between %d (the last commit that returned nil) and %d (the last tried)",
				p, next[p], ok[p], tried[p])
		}
	}
}
