package engine

import (
	"bytes"
	"testing"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
)

// The rules of the valid history, case by case.
func TestClogHistoryRules(t *testing.T) {
	commit := func(e connector.Epoch, seq uint64) *ClogRecord {
		return &ClogRecord{Kind: ClogCommit, Meta: ClogMeta{Epoch: e, Seq: seq}}
	}
	fence := func(e connector.Epoch) *ClogRecord { return &ClogRecord{Kind: ClogFence, Meta: ClogMeta{Epoch: e}} }
	steps := []struct {
		r    *ClogRecord
		want ClogVerdict
	}{
		{commit(1, 1), ClogInconsistent}, // a commit before any fence
		{fence(1), ClogValid},
		{commit(1, 1), ClogValid},
		{commit(1, 2), ClogValid},
		{commit(1, 2), ClogDuplicate}, // sent again
		{commit(1, 4), ClogInconsistent},
		{fence(3), ClogValid},
		{commit(1, 3), ClogFenced}, // the deposed owner's late commit
		{fence(2), ClogOther},      // an older fence arriving late
		{commit(3, 3), ClogValid},  // the new owner goes on from the last valid commit
		{commit(4, 4), ClogInconsistent},
		{&ClogRecord{Kind: ClogSnapshotChunk}, ClogOther},
	}
	var h ClogHistory
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
	pl, err := encodeClog(ClogSnapshotEnd, &ClogMeta{Epoch: 7, Member: 3, Snapshot: 9, Chunks: 2, Seq: 11, Resume: 40}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeClog(pl)
	if err != nil || r.Kind != ClogSnapshotEnd || r.Meta.Resume != 40 || r.Meta.Chunks != 2 || len(r.Writes) != 0 {
		t.Fatalf("DecodeClog = %+v, %v", r, err)
	}
	head := []byte(`{"e":2,"m":5,"s":8,"r":[{"src":"s/t","from":3,"next":9}]}`)
	writes := []byte("0123456789ab-writes")
	pl, err = commitPayload(state.EncodeLogged(head, writes))
	if err != nil {
		t.Fatal(err)
	}
	r, err = DecodeClog(pl)
	if err != nil || r.Kind != ClogCommit || r.Meta.Seq != 8 || r.Meta.Epoch != 2 || !bytes.Equal(r.Writes, writes) ||
		len(r.Meta.Ranges) != 1 || r.Meta.Ranges[0] != (ClogRange{"s/t", 3, 9}) {
		t.Fatalf("DecodeClog(commit) = %+v, %v", r, err)
	}
}

// Garbage never panics the decoder, and what decodes encodes back to a
// record that decodes the same.
func FuzzDecodeClog(f *testing.F) {
	pl, _ := encodeClog(ClogFence, &ClogMeta{Epoch: 1, Member: 2}, nil)
	f.Add(pl)
	pl, _ = encodeClog(ClogSnapshotChunk, &ClogMeta{Snapshot: 1, Index: 3}, []byte("rows"))
	f.Add(pl)
	f.Add([]byte("SCL1\x02\x05{}"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeClog(b)
		if err != nil {
			return
		}
		again, err := encodeClog(r.Kind, &r.Meta, r.Writes)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeClog(again)
		if err != nil || r2.Kind != r.Kind || r2.Meta.Seq != r.Meta.Seq || r2.Meta.Epoch != r.Meta.Epoch || !bytes.Equal(r2.Writes, r.Writes) {
			t.Fatalf("re-encoded record decodes to %+v, %v; want %+v", r2, err, r)
		}
	})
}
