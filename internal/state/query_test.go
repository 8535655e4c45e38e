package state

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// ScanPartition reads one partition of one table in key order, from after
// a key (exclusive), whatever rows of other tables and partitions lie
// around it.
func TestScanPartition(t *testing.T) {
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
	want := map[uint32][]string{}
	for _, p := range []uint32{0, 1, 2, 0xFFFFFFFF} {
		for i := range 4 {
			k := fmt.Sprintf("p%d-%d", p, i)
			_ = a.Write(tx, p, []byte(k), "a")
			_ = c.Write(tx, p, []byte(k), "c")
			if p != 1 {
				_ = b.Write(tx, p, []byte(k), "b"+k)
				want[p] = append(want[p], k)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	scan := func(p uint32, after []byte, max int) []string {
		t.Helper()
		var got []string
		err := b.ScanPartition(ctx, p, after, func(kb []byte, k, v string) bool {
			if string(kb) != k || v != "b"+k {
				t.Fatalf("row %q = %q, %q", kb, k, v)
			}
			got = append(got, k)
			return len(got) < max
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, p := range []uint32{0, 1, 2, 0xFFFFFFFF} {
		if got := scan(p, nil, 100); !slices.Equal(got, want[p]) {
			t.Errorf("partition %d: %q, want %q", p, got, want[p])
		}
	}
	if got := scan(2, []byte("p2-1"), 100); !slices.Equal(got, want[2][2:]) {
		t.Errorf("after p2-1: %q, want %q", got, want[2][2:])
	}
	if got := scan(2, []byte("p2-1x"), 100); !slices.Equal(got, want[2][2:]) {
		t.Errorf("after p2-1x (not a key): %q, want %q", got, want[2][2:])
	}
	if got := scan(2, []byte("p2-3"), 100); len(got) != 0 {
		t.Errorf("after the last key: %q", got)
	}
	if got := scan(0, nil, 2); !slices.Equal(got, want[0][:2]) {
		t.Errorf("stopped after 2: %q", got)
	}
	b.SetPartitions(7)
	if b.Partitions() != 7 {
		t.Fatalf("Partitions = %d", b.Partitions())
	}
	if kb, err := b.AppendKey([]byte("x"), "key"); err != nil || string(kb) != "xkey" {
		t.Fatalf("AppendKey = %q, %v", kb, err)
	}
	unbound := NewTable("u", String(), String())
	if err := unbound.ScanPartition(ctx, 0, nil, func([]byte, string, string) bool { return true }); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("ScanPartition of an unattached table = %v", err)
	}
}

// CopyTo makes a copy of an open store that ScanReadOnly reads, holding
// every commit that returned, NoSync ones included; the store itself stays
// locked.
func TestCopyToIsReadableWhileOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, WithLogger(quiet), WithDurability(NoSync))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.EnsureFingerprint([]byte("fp")); err != nil {
		t.Fatal(err)
	}
	tab := NewTable("t", String(), String())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		tx := db.NewTxn()
		_ = tab.Write(tx, uint32(i%3), []byte(fmt.Sprint("k", i)), "v")
		tx.SetCheckpoint("s", uint32(i%3), uint64(i+1))
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ScanReadOnly(dir, func(Family, uint32, []byte, []byte) error { return nil }); err == nil {
		t.Fatal("ScanReadOnly of an open store succeeded")
	}
	cp := filepath.Join(dir, "copy")
	if err := db.CopyTo(cp); err != nil {
		t.Fatal(err)
	}
	rows, cps := 0, map[uint32]bool{}
	meta, err := ScanReadOnly(cp, func(f Family, p uint32, _, _ []byte) error {
		switch f {
		case FamilyTable:
			rows++
		case FamilyCheckpoint:
			cps[p] = true
		}
		return nil
	})
	if err != nil || rows != 50 || len(cps) != 3 || string(meta.Fingerprint) != "fp" {
		t.Fatalf("copy: %d rows, checkpoints %v, meta %+v, %v", rows, cps, meta, err)
	}
	if err := db.CopyTo(cp); err == nil {
		t.Fatal("CopyTo an existing directory succeeded")
	}
	// The store reopens with the copy left inside its directory.
	mustClose(t, db)
	if err := db.CopyTo(filepath.Join(dir, "closed")); !errors.Is(err, ErrClosed) {
		t.Fatalf("CopyTo after Close = %v, want ErrClosed", err)
	}
	db, err = Open(dir, WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, db)
}
