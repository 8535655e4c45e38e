package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Update reads like Read, writes like Write, and writes nothing when fn
// fails; for alias-free and shared values, inside one Txn and after a
// predecessor.
func TestUpdate(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	counters := NewTable("counters", String(), JSON[counter]())
	accounts := NewTable("accounts", String(), JSON[account]())
	if err := db.Attach(counters, accounts); err != nil {
		t.Fatal(err)
	}
	key := []byte("k")
	inc := func(v *counter, ok bool) error { v.N++; return nil }
	boom := errors.New("boom")

	tx := db.NewTxn()
	if err := counters.Update(tx, 0, key, func(v *counter, ok bool) error {
		if ok || v.N != 0 {
			t.Fatalf("absent key: %+v, %v", *v, ok)
		}
		v.N = 5
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := counters.Update(tx, 0, key, func(v *counter, ok bool) error { v.N = 99; return boom }); !errors.Is(err, boom) {
		t.Fatalf("Update with a failing fn = %v, want its error", err)
	}
	if v, ok, _ := counters.Read(tx, 0, key); !ok || v.N != 5 {
		t.Fatalf("after a failed Update: %+v %v, want 5", v, ok)
	}
	if err := accounts.Update(tx, 0, key, func(v *account, ok bool) error {
		v.Owner, v.History = "o", append(v.History, 1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tx.SetCheckpoint("src", 0, 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// A failed Update of a committed key changes nothing, even if fn
	// changed a shared value in place before failing.
	tx = db.NewTxn()
	if err := accounts.Update(tx, 0, key, func(v *account, ok bool) error {
		v.History[0] = 42
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if err := counters.Update(tx, 0, key, inc); err != nil {
		t.Fatal(err)
	}
	tx2 := db.NewTxnAfter(tx)
	done := make(chan error, 1)
	go func() { done <- tx.Commit(ctx) }()
	if err := counters.Update(tx2, 0, key, inc); err != nil {
		t.Fatal(err)
	}
	a, _, err := accounts.Read(tx2, 0, key)
	if err != nil || len(a.History) != 1 || a.History[0] != 1 {
		t.Fatalf("shared value after a failed in-place Update: %+v, %v", a, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := counters.Get(ctx, "k"); v.N != 7 {
		t.Fatalf("counter = %+v, want 7", v)
	}
	if a, _, _ := accounts.Get(ctx, "k"); len(a.History) != 1 || a.History[0] != 1 {
		t.Fatalf("account = %+v, want history [1]", a)
	}
}

// TestUpdateDoesNotAllocate guards the no-failure path of Update against
// heap escapes: folding into a key the Txn already holds allocates nothing
// (the key buffer stays on the stack, the value is encoded into the Txn's
// arena). A failure path that formats the stack key buffer into an error
// once made every Update allocate it.
func TestUpdateDoesNotAllocate(t *testing.T) {
	db := openMem(t, nil)
	defer mustClose(t, db)
	tab := NewTable("t", String(), JSON[int64]())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	tx := db.NewTxn()
	defer tx.Discard()
	key := []byte("k")
	add := func(v *int64, _ bool) error { *v++; return nil }
	if err := tab.Update(tx, 0, key, add); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := tab.Update(tx, 0, key, add); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Update of a key the Txn holds allocates %v times; want 0", n)
	}
}

// TestUpdateEncodingsInTheArena writes values of many sizes (some larger
// than an arena chunk) through Update across several Txns, reusing the
// Txns' memory, and reads every one back after each commit.
func TestUpdateEncodingsInTheArena(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	tab := NewTable("t", String(), String())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for round := range 4 {
		tx := db.NewTxn()
		for i := range 300 {
			k := fmt.Sprintf("k%03d", i)
			size := (i*997 + round*131) % (3 * arenaChunk / 2)
			v := strings.Repeat(string(rune('a'+(i+round)%26)), size)
			if err := tab.Update(tx, 0, []byte(k), func(cur *string, _ bool) error { *cur = v; return nil }); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			got, ok, err := tab.Get(ctx, k)
			if err != nil || !ok || got != v {
				t.Fatalf("round %d: Get(%s) = %d bytes %v %v; want %d bytes", round, k, len(got), ok, err, len(v))
			}
		}
	}
}
