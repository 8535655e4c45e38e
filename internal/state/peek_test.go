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
