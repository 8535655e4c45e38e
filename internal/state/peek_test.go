package state

import (
	"context"
	"testing"
)

// TestPeekCopiesAndSeesTheTxn: Peek sees the Txn's own writes and the
// committed value, never leaves an entry in the Txn, and hands out values
// that share no memory with the Txn or the value cache; PeekCommitted
// sees only commits; Clone copies a shared value.
func TestPeekCopiesAndSeesTheTxn(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	tab := NewTable("rows", String(), JSON[row]())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	tx := db.NewTxn()
	if _, ok, err := tab.Peek(tx, 0, []byte("a")); err != nil || ok {
		t.Fatalf("Peek of a missing key = %v, %v", ok, err)
	}
	if err := tab.Write(tx, 0, []byte("a"), row{"x": {1}}); err != nil {
		t.Fatal(err)
	}
	v, ok, err := tab.Peek(tx, 0, []byte("a"))
	if err != nil || !ok || len(v["x"]) != 1 {
		t.Fatalf("Peek of the Txn's write = %v, %v, %v", v, ok, err)
	}
	v["x"][0] = 99 // must not reach the Txn
	if _, ok, _ := tab.PeekCommitted(0, []byte("a")); ok {
		t.Fatal("PeekCommitted saw an uncommitted write")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok, err := tab.PeekCommitted(0, []byte("a"))
	if err != nil || !ok || got["x"][0] != 1 {
		t.Fatalf("PeekCommitted after the commit = %v, %v, %v; want x=[1]", got, ok, err)
	}
	tx2 := db.NewTxn()
	defer tx2.Discard()
	for range 2 { // the second from the value cache
		v, ok, err := tab.Peek(tx2, 0, []byte("a"))
		if err != nil || !ok || v["x"][0] != 1 {
			t.Fatalf("Peek of the committed value = %v, %v, %v; want x=[1]", v, ok, err)
		}
		v["x"][0] = 42
	}
	r, _, err := tab.Read(tx2, 0, []byte("a"))
	if err != nil || r["x"][0] != 1 {
		t.Fatalf("Read after changing Peek's copies = %v, %v; want x=[1]", r, err)
	}
	c, err := tab.Clone(r)
	if err != nil {
		t.Fatal(err)
	}
	c["x"][0] = 7
	if r["x"][0] != 1 {
		t.Fatal("Clone shares memory with its argument")
	}
}

// TestPeekThroughAPredecessor: Peek of a table whose values share no
// memory sees a committing predecessor's write (NewTxnAfter), as Read does,
// and remembers nothing: once the predecessor is discarded, the next Peek
// sees the committed state (none), and the Txn commits no change.
func TestPeekThroughAPredecessor(t *testing.T) {
	ctx := context.Background()
	db, counters := openCounterTable(t, "counters")
	key := []byte("k")
	tx1 := db.NewTxn()
	if err := counters.Write(tx1, 0, key, counter{N: 1}); err != nil {
		t.Fatal(err)
	}
	tx2 := db.NewTxnAfter(tx1)
	for range 2 {
		v, ok, err := counters.Peek(tx2, 0, key)
		if err != nil || !ok || v.N != 1 {
			t.Fatalf("Peek through the predecessor = %+v, %v, %v; want 1", v, ok, err)
		}
	}
	tx1.Discard()
	if v, ok, err := counters.Peek(tx2, 0, key); err != nil || ok {
		t.Fatalf("Peek after the predecessor was discarded = %+v, %v, %v; want none", v, ok, err)
	}
	tx2.Discard()

	tx3 := db.NewTxn()
	if err := counters.Write(tx3, 0, key, counter{N: 2}); err != nil {
		t.Fatal(err)
	}
	if err := tx3.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx4 := db.NewTxn()
	for range 2 { // Pebble, then the value cache
		if v, ok, err := counters.Peek(tx4, 0, key); err != nil || !ok || v.N != 2 {
			t.Fatalf("Peek of the committed value = %+v, %v, %v; want 2", v, ok, err)
		}
	}
	if err := tx4.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s := tx4.CommitStats(); s.Changes != 0 {
		t.Fatalf("a Txn that only peeked committed %d changes, want 0", s.Changes)
	}
}
