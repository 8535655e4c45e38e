package state

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// TestMain: property tests try 25 cases each here (stateChecks: the
// model tests of transactions and of the changelog took over half of the
// package's minute; internal/testrun's default is 50), 500 with
// STRAND_SOAK=1, or what -rapid.checks says; and no goroutine may leak
// (internal/testrun).
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if !explicit && !crashtest.Soak() {
		if err := flag.Set("rapid.checks", stateChecks); err != nil {
			panic(err)
		}
	}
	testrun.Main(m) // keeps a -rapid.checks that was set
}

// stateChecks is the cases each property test of the package tries in the
// default run (issue 33 item 7).
const stateChecks = "25"

type account struct {
	Owner   string  `json:"owner"`
	Balance int64   `json:"balance"`
	History []int64 `json:"history,omitempty"`
}

var quiet = slog.New(slog.DiscardHandler)

// openMem opens a DB on an in-memory file system.
func openMem(tb testing.TB, fs vfs.FS, opts ...Option) *DB {
	tb.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	db, err := Open("db", append([]Option{withFS(fs), WithLogger(quiet), WithDurability(NoSync)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return db
}

func mustClose(tb testing.TB, db *DB) {
	tb.Helper()
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
}

func TestReadYourWritesWithinTxn(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	accounts := NewTable("accounts", String(), JSON[account]())
	if err := db.Attach(accounts); err != nil {
		t.Fatal(err)
	}

	tx := db.NewTxn()
	if _, ok, err := accounts.Read(tx, 0, []byte("a")); err != nil || ok {
		t.Fatalf("Read of a new key = ok %v, err %v; want absent", ok, err)
	}
	if err := accounts.Write(tx, 0, []byte("a"), account{Owner: "ann", Balance: 10}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := accounts.Read(tx, 0, []byte("a"))
	if err != nil || !ok || got.Balance != 10 {
		t.Fatalf("Read after Write = %+v %v %v; want balance 10", got, ok, err)
	}
	// Not visible outside the Txn yet.
	if _, ok, _ := accounts.Get(ctx, "a"); ok {
		t.Fatal("Get sees an uncommitted write")
	}
	// Same key bytes in another partition is another row.
	if _, ok, _ := accounts.Read(tx, 1, []byte("a")); ok {
		t.Fatal("Read in partition 1 sees the write made in partition 0")
	}
	if err := accounts.Delete(tx, 0, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := accounts.Read(tx, 0, []byte("a")); ok {
		t.Fatal("Read after Delete still sees the value")
	}
	if err := accounts.Write(tx, 0, []byte("a"), account{Owner: "ann", Balance: 20}); err != nil {
		t.Fatal(err)
	}
	tx.SetCheckpoint("bank", 0, 7)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok, err = accounts.Get(ctx, "a")
	if err != nil || !ok || got.Balance != 20 {
		t.Fatalf("Get after Commit = %+v %v %v; want balance 20", got, ok, err)
	}
	if next, ok, err := db.Checkpoint("bank", 0); err != nil || !ok || next != 7 {
		t.Fatalf("Checkpoint = %d %v %v; want 7", next, ok, err)
	}
	if _, ok, err := db.Checkpoint("bank", 1); err != nil || ok {
		t.Fatalf("Checkpoint of an unused partition = ok %v, err %v; want absent", ok, err)
	}

	// The next Txn reads the committed value.
	tx2 := db.NewTxn()
	defer tx2.Discard()
	got, ok, err = accounts.Read(tx2, 0, []byte("a"))
	if err != nil || !ok || got.Balance != 20 {
		t.Fatalf("Read in the next Txn = %+v %v %v; want balance 20", got, ok, err)
	}
}

func TestTxnUsedAfterCommitOrDiscard(t *testing.T) {
	db := openMem(t, nil)
	defer mustClose(t, db)
	tab := NewTable("t", String(), String())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	tx := db.NewTxn()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("empty commit: %v", err)
	}
	if err := tx.Commit(context.Background()); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("second Commit = %v; want ErrTxnDone", err)
	}
	if err := tab.Write(tx, 0, []byte("k"), "v"); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("Write after Commit = %v; want ErrTxnDone", err)
	}
	if _, _, err := tab.Read(tx, 0, []byte("k")); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("Read after Commit = %v; want ErrTxnDone", err)
	}
	tx.Discard() // no-op

	tx = db.NewTxn()
	tx.Discard()
	if err := tx.Commit(context.Background()); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("Commit after Discard = %v; want ErrTxnDone", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tx = db.NewTxn()
	if err := tab.Write(tx, 0, []byte("k"), "v"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a canceled context = %v; want context.Canceled", err)
	}
	if _, ok, _ := tab.Get(context.Background(), "k"); ok {
		t.Fatal("a canceled Commit wrote its value")
	}
}

func TestConcurrentTxnUseOnDifferentKeys(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	counts := NewTable("counts", String(), JSON[int64]())
	other := NewTable("other", String(), JSON[int64]())
	if err := db.Attach(counts, other); err != nil {
		t.Fatal(err)
	}
	const workers, keysPer, rounds, batches = 8, 20, 5, 4
	for b := 0; b < batches; b++ {
		tx := db.NewTxn()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for r := range rounds {
					for i := range keysPer {
						key := []byte(fmt.Sprintf("w%d-k%d", w, i))
						tab := counts
						if i%2 == 1 {
							tab = other
						}
						v, _, err := tab.Read(tx, uint32(w%3), key)
						if err != nil {
							errs <- err
							return
						}
						if want := int64(b*rounds + r); v != want {
							errs <- fmt.Errorf("batch %d round %d key %s: read %d, want %d", b, r, key, v, want)
							return
						}
						if err := tab.Write(tx, uint32(w%3), key, v+1); err != nil {
							errs <- err
							return
						}
					}
				}
				tx.PutRow(FamilyOutbox, uint32(w), []byte("done"), []byte{byte(b)})
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		tx.SetCheckpoint("src", 0, uint64(b+1))
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	err := counts.Scan(ctx, func(k string, v int64) bool {
		n++
		if v != batches*rounds {
			t.Errorf("key %s = %d, want %d", k, v, batches*rounds)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != workers*keysPer/2 {
		t.Fatalf("scan saw %d keys, want %d", n, workers*keysPer/2)
	}
}

func TestReopenResumesCheckpointAndState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (*DB, *Table[string, account], *Table[string, string]) {
		db, err := Open(dir, WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		a := NewTable("accounts", String(), JSON[account]())
		n := NewTable("names", String(), String())
		// Attach in a different order each time: ids come from names.
		if err := db.Attach(n, a); err != nil {
			t.Fatal(err)
		}
		return db, a, n
	}
	db, a, n := open()
	tx := db.NewTxn()
	_ = a.Write(tx, 0, []byte("x"), account{Owner: "xena", Balance: 5})
	_ = n.Write(tx, 0, []byte("x"), "xena")
	tx.SetCheckpoint("bank", 0, 100)
	tx.SetCheckpoint("bank", 3, 42)
	tx.PutRow(FamilyParked, 0, []byte("x"), []byte("parked"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mustClose(t, db)

	db, a, n = open()
	defer mustClose(t, db)
	if v, ok, err := a.Get(ctx, "x"); err != nil || !ok || v.Balance != 5 {
		t.Fatalf("after reopen accounts[x] = %+v %v %v", v, ok, err)
	}
	if v, ok, err := n.Get(ctx, "x"); err != nil || !ok || v != "xena" {
		t.Fatalf("after reopen names[x] = %q %v %v", v, ok, err)
	}
	for p, want := range map[uint32]uint64{0: 100, 3: 42} {
		if next, ok, err := db.Checkpoint("bank", p); err != nil || !ok || next != want {
			t.Fatalf("after reopen checkpoint of partition %d = %d %v %v; want %d", p, next, ok, err, want)
		}
	}
	if v, ok, err := db.Row(FamilyParked, 0, []byte("x")); err != nil || !ok || string(v) != "parked" {
		t.Fatalf("after reopen parked row = %q %v %v", v, ok, err)
	}
}

func TestEnsureFingerprint(t *testing.T) {
	fs := vfs.NewMem()
	db := openMem(t, fs)
	if err := db.EnsureFingerprint([]byte{1, 2, 3}); err != nil {
		t.Fatalf("first fingerprint: %v", err)
	}
	if err := db.EnsureFingerprint([]byte{1, 2, 3}); err != nil {
		t.Fatalf("same fingerprint again: %v", err)
	}
	if err := db.EnsureFingerprint(nil); err == nil {
		t.Fatal("empty fingerprint accepted")
	}
	mustClose(t, db)

	db = openMem(t, fs)
	defer mustClose(t, db)
	if err := db.EnsureFingerprint([]byte{1, 2, 3}); err != nil {
		t.Fatalf("same fingerprint after reopen: %v", err)
	}
	err := db.EnsureFingerprint([]byte{9, 9})
	if !errors.Is(err, ErrIncompatibleTopology) {
		t.Fatalf("other fingerprint = %v; want ErrIncompatibleTopology", err)
	}
	if !strings.Contains(err.Error(), "010203") || !strings.Contains(err.Error(), "0909") {
		t.Fatalf("error %q does not show the stored and the offered fingerprint", err)
	}
}

func TestAttachErrors(t *testing.T) {
	db := openMem(t, nil)
	defer mustClose(t, db)
	var nilTable *Table[string, string]
	cases := []struct {
		name   string
		tables []Attacher
		want   string
	}{
		{"a nil table is refused", []Attacher{nil}, "table 1 of 1 is nil"},
		{"a typed nil table is refused", []Attacher{nilTable}, "nil table"},
		{"an empty name is refused", []Attacher{NewTable("", String(), String())}, "empty name"},
		{"a table without value codec is refused by name", []Attacher{NewTable("balances", String(), Codec[string](nil))}, `table "balances" has no value codec`},
		{"a table without key codec is refused by name", []Attacher{NewTable("balances", Codec[string](nil), String())}, `table "balances" has no key codec`},
		{"the same name twice is refused", []Attacher{NewTable("dup", String(), String()), NewTable("dup", String(), String())}, `table "dup" is given twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := db.Attach(c.tables...)
			if !errors.Is(err, ErrInvalidTable) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Attach = %v; want ErrInvalidTable mentioning %q", err, c.want)
			}
		})
	}

	t.Run("a failed Attach attaches nothing", func(t *testing.T) {
		good := NewTable("good", String(), String())
		if err := db.Attach(good, NewTable("bad", String(), Codec[string](nil))); err == nil {
			t.Fatal("Attach with a bad table succeeded")
		}
		if _, _, err := good.Get(context.Background(), "k"); !errors.Is(err, ErrNotAttached) {
			t.Fatalf("Get on the good table = %v; want ErrNotAttached", err)
		}
	})

	t.Run("another table with an attached name is refused", func(t *testing.T) {
		if err := db.Attach(NewTable("taken", String(), String())); err != nil {
			t.Fatal(err)
		}
		err := db.Attach(NewTable("taken", String(), String()))
		if !errors.Is(err, ErrInvalidTable) {
			t.Fatalf("Attach = %v; want ErrInvalidTable", err)
		}
	})

	t.Run("attaching the same table twice does nothing", func(t *testing.T) {
		tab := NewTable("twice", String(), String())
		if err := db.Attach(tab); err != nil {
			t.Fatal(err)
		}
		if err := db.Attach(tab); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a table attached to another open database is refused", func(t *testing.T) {
		other := openMem(t, nil)
		defer mustClose(t, other)
		tab := NewTable("shared", String(), String())
		if err := other.Attach(tab); err != nil {
			t.Fatal(err)
		}
		if err := db.Attach(tab); !errors.Is(err, ErrInvalidTable) {
			t.Fatalf("Attach = %v; want ErrInvalidTable", err)
		}
	})

	t.Run("an unattached table refuses use", func(t *testing.T) {
		tab := NewTable("loose", String(), String())
		tx := db.NewTxn()
		defer tx.Discard()
		if err := tab.Write(tx, 0, []byte("k"), "v"); !errors.Is(err, ErrNotAttached) {
			t.Fatalf("Write = %v; want ErrNotAttached", err)
		}
		if err := tab.Scan(context.Background(), func(string, string) bool { return true }); !errors.Is(err, ErrNotAttached) {
			t.Fatalf("Scan = %v; want ErrNotAttached", err)
		}
	})

	t.Run("a table used with another database's Txn is refused", func(t *testing.T) {
		other := openMem(t, nil)
		defer mustClose(t, other)
		tab := NewTable("mine", String(), String())
		if err := db.Attach(tab); err != nil {
			t.Fatal(err)
		}
		tx := other.NewTxn()
		defer tx.Discard()
		if err := tab.Write(tx, 0, []byte("k"), "v"); !errors.Is(err, ErrNotAttached) {
			t.Fatalf("Write = %v; want ErrNotAttached", err)
		}
	})
}

func TestAttachAfterReopenOfAnotherDB(t *testing.T) {
	fs := vfs.NewMem()
	tab := NewTable("t", String(), String())
	db := openMem(t, fs)
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	mustClose(t, db)
	if _, _, err := tab.Get(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v; want ErrClosed", err)
	}
	db = openMem(t, fs)
	defer mustClose(t, db)
	if err := db.Attach(tab); err != nil {
		t.Fatalf("re-attaching to a new database after the old one closed: %v", err)
	}
}

func TestRows(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)

	tx := db.NewTxn()
	tx.PutRow(FamilyOutbox, 1, []byte("b"), []byte("2"))
	tx.PutRow(FamilyOutbox, 1, []byte("a"), []byte("1"))
	tx.PutRow(FamilyOutbox, 2, []byte("c"), []byte("3"))
	tx.PutRow(FamilyDeadLetters, 1, []byte("d"), []byte("4"))
	tx.PutRow(FamilyOutbox, 1, []byte("gone"), []byte("x"))
	tx.DeleteRow(FamilyOutbox, 1, []byte("gone"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := db.Rows(ctx, FamilyOutbox, 1, func(k, v []byte) error {
		got = append(got, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a=1", "b=2"}; !slices.Equal(got, want) {
		t.Fatalf("outbox rows of partition 1 = %v; want %v", got, want)
	}
	stop := errors.New("stop")
	if err := db.Rows(ctx, FamilyOutbox, 1, func(k, v []byte) error { return stop }); err != stop {
		t.Fatalf("Rows returned %v; want the callback's error", err)
	}

	tx = db.NewTxn()
	tx.PutRow(FamilyTable, 0, []byte("k"), []byte("v"))
	if err := tx.Commit(ctx); !errors.Is(err, ErrReservedFamily) {
		t.Fatalf("Commit after PutRow to a reserved family = %v; want ErrReservedFamily", err)
	}
	if err := db.Rows(ctx, FamilyCheckpoint, 0, func(k, v []byte) error { return nil }); !errors.Is(err, ErrReservedFamily) {
		t.Fatalf("Rows of a reserved family = %v; want ErrReservedFamily", err)
	}

	tx = db.NewTxn()
	tx.SetCheckpoint("", 0, 1)
	if err := tx.Commit(ctx); err == nil || !strings.Contains(err.Error(), "empty source name") {
		t.Fatalf("Commit after an empty source name = %v", err)
	}
}

// Get looks in the key's home partition first (XXH32 % partitions) and then
// in every other one: a row is never reported missing because a producer
// partitioned it otherwise.
func TestGetFindsRowsInEveryPartition(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	tab := NewTable("t", String(), String())
	tab.SetPartitions(4)
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	home := xxh32.Partition([]byte("k"), 4)
	tx := db.NewTxn()
	_ = tab.Write(tx, (home+1)%4, []byte("k"), "elsewhere")
	_ = tab.Write(tx, (home+2)%4, []byte("j"), "only elsewhere")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := tab.Get(ctx, "k"); err != nil || !ok || v != "elsewhere" {
		t.Fatalf("Get(k) = %q %v %v; want the row of partition %d", v, ok, err, (home+1)%4)
	}
	tx = db.NewTxn()
	_ = tab.Write(tx, home, []byte("k"), "at home")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := tab.Get(ctx, "k"); err != nil || !ok || v != "at home" {
		t.Fatalf("Get(k) = %q %v %v; want the row of its home partition %d", v, ok, err, home)
	}
	if v, ok, err := tab.Get(ctx, "j"); err != nil || !ok || v != "only elsewhere" {
		t.Fatalf("Get(j) = %q %v %v", v, ok, err)
	}
	if _, ok, err := tab.Get(ctx, "absent"); err != nil || ok {
		t.Fatalf("Get(absent) = %v %v", ok, err)
	}
}

func TestScanSkipsOtherTablesAndPartitions(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	a := NewTable("a", String(), String())
	b := NewTable("b", String(), String())
	c := NewTable("c", String(), String())
	if err := db.Attach(a, b, c); err != nil {
		t.Fatal(err)
	}
	tx := db.NewTxn()
	want := map[string]string{}
	for p := uint32(0); p < 5; p++ {
		for i := range 3 {
			k := fmt.Sprintf("p%d-%d", p, i)
			_ = a.Write(tx, p, []byte(k), "a")
			_ = c.Write(tx, p, []byte(k), "c")
			if p%2 == 0 {
				_ = b.Write(tx, p, []byte(k), "b"+k)
				want[k] = "b" + k
			}
		}
	}
	_ = b.Write(tx, 0xFFFFFFFF, []byte("last"), "blast")
	want["last"] = "blast"
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if err := b.Scan(ctx, func(k, v string) bool { got[k] = v; return true }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Scan(b) = %v; want %v", got, want)
	}
	n := 0
	if err := b.Scan(ctx, func(k, v string) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Fatalf("Scan stopped after %d calls (err %v); want 2", n, err)
	}
}

func TestScanAndGetSeeOnlyWholeCommits(t *testing.T) {
	// Concurrent readers must never see part of a commit: every commit
	// writes the same value to all keys of a table and to the checkpoint.
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	tab := NewTable("t", String(), JSON[uint64]())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	const keys, commits = 50, 200
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			first, seen := uint64(0), 0
			err := tab.Scan(ctx, func(k string, v uint64) bool {
				if seen == 0 {
					first = v
				} else if v != first {
					errs <- fmt.Errorf("scan saw %d and %d in one view", first, v)
					return false
				}
				seen++
				return true
			})
			if err != nil {
				errs <- err
				return
			}
			if seen != 0 && seen != keys {
				errs <- fmt.Errorf("scan saw %d keys, want 0 or %d", seen, keys)
				return
			}
		}
	})
	wg.Go(func() {
		// A Pebble snapshot shows checkpoint and rows from one point.
		for {
			select {
			case <-done:
				return
			default:
			}
			snap := db.pdb.NewSnapshot()
			cp, cpOK := snapGetU64(snap.Get, checkpointKey("src", 0))
			row, rowOK := snapGetRow(snap.Get, appendTableKey(nil, 1, 0, []byte("k0")))
			_ = snap.Close()
			if cpOK != rowOK || cp != row {
				errs <- fmt.Errorf("snapshot: checkpoint %d (%v) but row %d (%v)", cp, cpOK, row, rowOK)
				return
			}
		}
	})
	for c := uint64(1); c <= commits; c++ {
		tx := db.NewTxn()
		for i := range keys {
			if err := tab.Write(tx, 0, []byte(fmt.Sprintf("k%d", i)), c); err != nil {
				t.Fatal(err)
			}
		}
		tx.SetCheckpoint("src", 0, c)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func snapGetU64[C interface{ Close() error }](get func([]byte) ([]byte, C, error), key []byte) (uint64, bool) {
	v, c, err := get(key)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	return binary.BigEndian.Uint64(v), true
}

func snapGetRow[C interface{ Close() error }](get func([]byte) ([]byte, C, error), key []byte) (uint64, bool) {
	v, c, err := get(key)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	n, err := JSON[uint64]().Decode(v)
	return n, err == nil
}

func TestClosedDB(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	tab := NewTable("t", String(), String())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	tx := db.NewTxn()
	_ = tab.Write(tx, 0, []byte("k"), "v")
	mustClose(t, db)
	if err := db.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v; want ErrClosed", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close = %v; want ErrClosed", err)
	}
	checks := map[string]error{
		"Get":  func() error { _, _, err := tab.Get(ctx, "k"); return err }(),
		"Scan": tab.Scan(ctx, func(string, string) bool { return true }),
		"Read": func() error {
			_, _, err := tab.Read(db.NewTxn(), 0, []byte("k"))
			return err
		}(),
		"Checkpoint":        func() error { _, _, err := db.Checkpoint("s", 0); return err }(),
		"Rows":              db.Rows(ctx, FamilyOutbox, 0, func(k, v []byte) error { return nil }),
		"EnsureFingerprint": db.EnsureFingerprint([]byte{1}),
		"Attach":            db.Attach(NewTable("u", String(), String())),
		"SyncWAL":           db.SyncWAL(),
	}
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
}

func TestOpenRefusesBadOptions(t *testing.T) {
	for name, opt := range map[string]Option{
		"tiny cache":         WithCacheSize(1 << 10),
		"negative cache":     WithValueCacheSize(-1),
		"unknown durability": WithDurability(7),
	} {
		if db, err := Open("db", withFS(vfs.NewMem()), opt); err == nil {
			_ = db.Close()
			t.Errorf("Open with %s succeeded", name)
		}
	}
	if _, err := Open(""); err == nil {
		t.Error("Open with an empty directory succeeded")
	}
}

func TestOpenRefusesUnknownLayout(t *testing.T) {
	fs := vfs.NewMem()
	db := openMem(t, fs)
	if err := db.pdb.Set(metaKey(metaLayout), []byte{99}, nil); err != nil {
		t.Fatal(err)
	}
	mustClose(t, db)
	if _, err := Open("db", withFS(fs), WithLogger(quiet)); !errors.Is(err, ErrIncompatibleLayout) {
		t.Fatalf("Open = %v; want ErrIncompatibleLayout", err)
	}
}

func TestPebbleOptions(t *testing.T) {
	for _, size := range []int64{minCacheSize, 16 << 20, DefaultCacheSize, 1 << 30} {
		o := options{cacheSize: size}
		p := o.pebbleOptions(nil, quiet)
		if int64(p.MemTableSize)*4 > size {
			t.Errorf("cache %d: memtable %d is more than a quarter of the cache", size, p.MemTableSize)
		}
		if p.MemTableSize > uint64(maxMemTableSize) {
			t.Errorf("cache %d: memtable %d above %d", size, p.MemTableSize, maxMemTableSize)
		}
		if p.FormatMajorVersion != pebble.FormatValueSeparation {
			t.Errorf("format %v, want the pinned FormatValueSeparation", p.FormatMajorVersion)
		}
		if p.MemTableStopWritesThreshold != 4 {
			t.Errorf("stop-writes threshold %d, want 4", p.MemTableStopWritesThreshold)
		}
	}
}

// levelRecorder records log records at or above a level.
type levelRecorder struct {
	min     slog.Level
	mu      sync.Mutex
	records []string
}

func (r *levelRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.min }
func (r *levelRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *levelRecorder) WithGroup(string) slog.Handler      { return r }

func TestPebbleLogsOnlyAtDebug(t *testing.T) {
	info := &levelRecorder{min: slog.LevelInfo}
	debug := &levelRecorder{min: slog.LevelDebug}
	for _, rec := range []*levelRecorder{info, debug} {
		dir := t.TempDir()
		for range 2 { // create, then reopen with WAL recovery
			db, err := Open(dir, WithLogger(slog.New(rec)))
			if err != nil {
				t.Fatal(err)
			}
			tab := NewTable("t", String(), String())
			if err := db.Attach(tab); err != nil {
				t.Fatal(err)
			}
			tx := db.NewTxn()
			_ = tab.Write(tx, 0, []byte("k"), "v")
			if err := tx.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			mustClose(t, db)
		}
	}
	if len(info.records) != 0 {
		t.Fatalf("Pebble logged at Info or above during a normal run: %q", info.records)
	}
	if len(debug.records) == 0 {
		t.Fatal("Pebble's informational messages did not reach the logger at Debug")
	}
}
