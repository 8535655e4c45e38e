package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A stopped store with three commits of checkpoints and rows; the name of
// its directory.
func stoppedStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, tab := openCounters(t, dir)
	for i := range 3 {
		tx := db.NewTxn()
		if err := tab.Write(tx, 0, []byte(fmt.Sprint("k", i)), int64(i+1)); err != nil {
			t.Fatal(err)
		}
		tx.SetCheckpoint("s", 0, uint64(i+1))
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newest returns the last (in name order) file of dir matching pattern.
func newest(t *testing.T, dir, pattern string) string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(ms) == 0 {
		t.Fatalf("no %s in %s", pattern, dir)
	}
	slices.Sort(ms)
	return ms[len(ms)-1]
}

func damage(t *testing.T, name string) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 3; i < len(b)/3+8 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
}

// A store is never taken for a new one when it is not: one whose files are
// missing or damaged is refused with an error wrapping ErrStoreDamaged that
// names the file (or what is left) and says what to do; losing a
// write-ahead log of a stopped store loses nothing, since a store that
// stops keeps nothing in its logs.
func TestDamagedStoreIsRefusedNamingTheFile(t *testing.T) {
	for _, c := range []struct {
		name   string
		harm   func(t *testing.T, dir string) string // returns the file harmed
		says   []string                              // nil: opens, with everything
		exact  bool
		nameIt bool
	}{
		{name: "a write-ahead log deleted opens with everything", harm: func(t *testing.T, dir string) string {
			f := newest(t, dir, "*.log")
			remove(t, f)
			return f
		}},
		{name: "a table file deleted is named", nameIt: true, says: []string{"is damaged or missing"}, harm: func(t *testing.T, dir string) string {
			f := newest(t, dir, "*.sst")
			remove(t, f)
			return f
		}},
		{name: "the MANIFEST deleted is named", nameIt: true, says: []string{"is damaged or missing"}, harm: func(t *testing.T, dir string) string {
			f := newest(t, dir, "MANIFEST-*")
			remove(t, f)
			return f
		}},
		{name: "a damaged OPTIONS file is named", nameIt: true, says: []string{"is damaged or missing"}, harm: func(t *testing.T, dir string) string {
			f := newest(t, dir, "OPTIONS-*")
			damage(t, f)
			return f
		}},
		{name: "a damaged MANIFEST that lost the metadata is refused", says: []string{"its metadata is gone", "the MANIFEST"}, harm: func(t *testing.T, dir string) string {
			f := newest(t, dir, "MANIFEST-*")
			damage(t, f)
			return f
		}},
		{name: "Pebble's files gone is refused", says: []string{"Pebble's files are gone", "strand-store.id"}, harm: func(t *testing.T, dir string) string {
			names, _ := os.ReadDir(dir)
			for _, n := range names {
				if n.Name() != StoreIDFile {
					remove(t, filepath.Join(dir, n.Name()))
				}
			}
			return dir
		}},
		{name: "a damaged identity file is named", nameIt: true, says: []string{"identity file"}, harm: func(t *testing.T, dir string) string {
			f := filepath.Join(dir, StoreIDFile)
			damage(t, f)
			return f
		}},
		{name: "the identity file of another store is refused", says: []string{"files of two stores were mixed"}, harm: func(t *testing.T, dir string) string {
			other := stoppedStore(t)
			b, err := os.ReadFile(filepath.Join(other, StoreIDFile))
			if err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, StoreIDFile)
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return f
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := stoppedStore(t)
			harmed := c.harm(t, dir)
			db, err := Open(dir, WithLogger(quiet))
			if c.says == nil {
				if err != nil {
					t.Fatalf("Open = %v", err)
				}
				defer db.Close()
				if next, _, err := db.Checkpoint("s", 0); err != nil || next != 3 {
					t.Fatalf("checkpoint %d (%v), want 3", next, err)
				}
				return
			}
			if err == nil {
				_ = db.Close()
				t.Fatalf("Open of a store whose %s was harmed succeeded", filepath.Base(harmed))
			}
			t.Logf("Open: %v", err)
			if !errors.Is(err, ErrStoreDamaged) {
				t.Errorf("Open = %v, want ErrStoreDamaged", err)
			}
			want := append([]string{"restore the directory from a backup, or move it away and start again"}, c.says...)
			if c.nameIt {
				want = append(want, harmed)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q", w)
				}
			}
			// Refused again: the refusal made nothing worse.
			if db, err := Open(dir, WithLogger(quiet)); err == nil {
				_ = db.Close()
				t.Error("a second Open succeeded")
			}
		})
	}
}

// crashedStore is a store whose last commits are only in its write-ahead
// log, as a process killed after committing leaves it: a copy of the
// directory of an open store.
func crashedStore(t *testing.T) string {
	t.Helper()
	src := stoppedStore(t)
	db, tab := openCounters(t, src)
	defer db.Close()
	for i := range 3 {
		tx := db.NewTxn()
		if err := tab.Write(tx, 0, []byte(fmt.Sprint("c", i)), int64(i+1)); err != nil {
			t.Fatal(err)
		}
		tx.SetCheckpoint("s", 0, uint64(4+i))
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	names, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A crashed store opens with its last commits (replayed from its
// write-ahead log). One whose write-ahead log is damaged from its first
// record on opens as if the process had crashed before those commits (Pebble
// takes a damaged tail of the last log for a torn write): at an earlier
// checkpoint, with exactly the rows of the commits up to it, so the state
// is still the fold of the events up to its checkpoint.
func TestCrashedStoreWithADamagedWALOpensAtAnEarlierCheckpoint(t *testing.T) {
	dir := crashedStore(t)
	db, err := Open(dir, WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if next, _, err := db.Checkpoint("s", 0); err != nil || next != 6 {
		t.Fatalf("checkpoint of the crashed store %d (%v), want 6", next, err)
	}
	_ = db.Close()

	dir = crashedStore(t)
	wal := newest(t, dir, "*.log")
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 20 && i < len(b); i++ { // inside the first record
		b[i] ^= 0xff
	}
	if err := os.WriteFile(wal, b, 0o644); err != nil {
		t.Fatal(err)
	}
	db, tab := openCounters(t, dir)
	defer db.Close()
	if next, _, err := db.Checkpoint("s", 0); err != nil || next != 3 {
		t.Fatalf("checkpoint after the damaged log %d (%v), want 3", next, err)
	}
	for i := range 3 {
		if v, ok, err := tab.Get(context.Background(), fmt.Sprint("k", i)); err != nil || !ok || v != int64(i+1) {
			t.Errorf("row k%d = %d, %v (%v): a commit before the checkpoint is missing", i, v, ok, err)
		}
		if _, ok, _ := tab.Get(context.Background(), fmt.Sprint("c", i)); ok {
			t.Errorf("row c%d is there: a commit after the checkpoint was applied", i)
		}
	}
}

// A store written before identity files existed (no id in its metadata,
// no identity file) is adopted: it opens with everything and has both
// afterwards.
func TestStoreWithoutIdentityIsAdopted(t *testing.T) {
	dir := stoppedStore(t)
	remove(t, filepath.Join(dir, StoreIDFile))
	db, err := Open(dir, WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if next, _, err := db.Checkpoint("s", 0); err != nil || next != 3 {
		t.Fatalf("checkpoint %d (%v), want 3", next, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, StoreIDFile)); err != nil {
		t.Fatalf("no identity file after the adopting open: %v", err)
	}
}
