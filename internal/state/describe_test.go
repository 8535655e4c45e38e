package state

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestEnsureTopology: the description is kept beside the fingerprint, a
// store of the legacy fingerprint is brought up to the new one, and a
// refusal carries the stored description.
func TestEnsureTopology(t *testing.T) {
	fs := vfs.NewMem()
	db := openMem(t, fs)
	// A store written before descriptions: the legacy fingerprint only.
	if err := db.EnsureFingerprint([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := db.EnsureTopology([]byte{2}, []byte{1}, "described\n"); err != nil {
		t.Fatalf("a store of the legacy fingerprint was refused: %v", err)
	}
	mustClose(t, db)
	db = openMem(t, fs)
	defer mustClose(t, db)
	if err := db.EnsureTopology([]byte{2}, nil, "described\n"); err != nil {
		t.Fatalf("the upgraded store was refused: %v", err)
	}
	err := db.EnsureTopology([]byte{3}, []byte{1}, "other\n")
	var ie *IncompatibleError
	if !errors.As(err, &ie) || !errors.Is(err, ErrIncompatibleTopology) {
		t.Fatalf("another topology = %v, want an *IncompatibleError", err)
	}
	if ie.StoredDescription != "described\n" || string(ie.Stored) != "\x02" || string(ie.Now) != "\x03" {
		t.Fatalf("refusal %+v", ie)
	}
	if err := db.EnsureFingerprint([]byte{2}); err != nil {
		t.Fatalf("EnsureFingerprint of the stored fingerprint: %v", err)
	}
}
