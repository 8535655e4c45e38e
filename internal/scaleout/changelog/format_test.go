package changelog

import (
	"bytes"
	"testing"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
)

// The rules of the valid history, case by case.
func TestClogHistoryRules(t *testing.T) {
	commit := func(e connector.Epoch, seq uint64) *Record {
		return &Record{Kind: KindCommit, Meta: Meta{Epoch: e, Seq: seq}}
	}
	fence := func(e connector.Epoch) *Record { return &Record{Kind: KindFence, Meta: Meta{Epoch: e}} }
	steps := []struct {
		r    *Record
		want Verdict
	}{
		{commit(1, 1), Inconsistent}, // a commit before any fence
		{fence(1), Valid},
		{commit(1, 1), Valid},
		{commit(1, 2), Valid},
		{commit(1, 2), Duplicate}, // sent again
		{commit(1, 4), Inconsistent},
		{fence(3), Valid},
		{commit(1, 3), Fenced}, // the deposed owner's late commit
		{fence(2), Other},      // an older fence arriving late
		{commit(3, 3), Valid},  // the new owner goes on from the last valid commit
		{commit(4, 4), Inconsistent},
		{&Record{Kind: KindSnapshotChunk}, Other},
	}
	var h History
	for i, s := range steps {
		if got := h.Next(s.r); got != s.want {
			t.Errorf("step %d (%v epoch %d seq %d): %v, want %v", i, s.r.Kind, s.r.Meta.Epoch, s.r.Meta.Seq, got, s.want)
		}
	}
	if h.Epoch != 3 || h.Last != 3 {
		t.Errorf("history ends at epoch %d commit %d, want 3 and 3", h.Epoch, h.Last)
	}
}

// Records encode and decode; a commit row's payload keeps head and writes.
func TestClogRoundTrip(t *testing.T) {
	pl, err := encodeClog(KindSnapshotEnd, &Meta{Epoch: 7, Member: 3, Snapshot: 9, Chunks: 2, Seq: 11, Resume: 40}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Decode(pl)
	if err != nil || r.Kind != KindSnapshotEnd || r.Meta.Resume != 40 || r.Meta.Chunks != 2 || len(r.Writes) != 0 {
		t.Fatalf("Decode = %+v, %v", r, err)
	}
	head := []byte(`{"e":2,"m":5,"s":8,"r":[{"src":"s/t","from":3,"next":9}]}`)
	writes := []byte("0123456789ab-writes")
	pl, err = commitPayload(state.EncodeLogged(head, writes))
	if err != nil {
		t.Fatal(err)
	}
	r, err = Decode(pl)
	if err != nil || r.Kind != KindCommit || r.Meta.Seq != 8 || r.Meta.Epoch != 2 || !bytes.Equal(r.Writes, writes) ||
		len(r.Meta.Ranges) != 1 || r.Meta.Ranges[0] != (Range{"s/t", 3, 9}) {
		t.Fatalf("Decode(commit) = %+v, %v", r, err)
	}
}

// Garbage never panics the decoder, and what decodes encodes back to a
// record that decodes the same.
func FuzzDecodeClog(f *testing.F) {
	pl, _ := encodeClog(KindFence, &Meta{Epoch: 1, Member: 2}, nil)
	f.Add(pl)
	pl, _ = encodeClog(KindSnapshotChunk, &Meta{Snapshot: 1, Index: 3}, []byte("rows"))
	f.Add(pl)
	f.Add([]byte("SCL1\x02\x05{}"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		again, err := encodeClog(r.Kind, &r.Meta, r.Writes)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Decode(again)
		if err != nil || r2.Kind != r.Kind || r2.Meta.Seq != r.Meta.Seq || r2.Meta.Epoch != r.Meta.Epoch || !bytes.Equal(r2.Writes, r.Writes) {
			t.Fatalf("re-encoded record decodes to %+v, %v; want %+v", r2, err, r)
		}
	})
}
