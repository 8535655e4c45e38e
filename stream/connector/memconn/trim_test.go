package memconn_test

import (
	"context"
	"slices"
	"testing"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/memconn"
)

// TestTrimRemovesTheOldestRecords checks retention in memory: after Trim,
// StartOffsets reports where each partition starts, a poll from offset 0
// starts there, Records leaves the removed records out, and a smaller Trim
// brings nothing back.
func TestTrimRemovesTheOldestRecords(t *testing.T) {
	b, err := memconn.New()
	if err != nil {
		t.Fatal(err)
	}
	top, err := b.CreateTopic("t", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var _ connector.StartOffsetter = top
	for i := range 5 {
		if _, err := top.Append(0, connector.Record{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if starts, err := top.StartOffsets(ctx); err != nil || !slices.Equal(starts, []uint64{0, 0}) {
		t.Fatalf("StartOffsets before any trim = %v, %v; want [0 0]", starts, err)
	}
	top.Trim(0, 3)
	top.Trim(0, 2)  // less than before: nothing comes back
	top.Trim(1, 10) // an empty partition: its start is its end
	if starts, err := top.StartOffsets(ctx); err != nil || !slices.Equal(starts, []uint64{3, 0}) {
		t.Fatalf("StartOffsets after trims = %v, %v; want [3 0]", starts, err)
	}
	r, err := top.Open(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Poll(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var offs []uint64
	for _, rec := range recs {
		offs = append(offs, rec.Offset)
	}
	if !slices.Equal(offs, []uint64{3, 4}) {
		t.Errorf("poll from 0 after Trim(3) gave offsets %v; want [3 4]", offs)
	}
	if got := top.Records(0); len(got) != 2 || got[0].Offset != 3 {
		t.Errorf("Records after Trim(3) = %d records from %v; want 2 from offset 3", len(got), got)
	}
	if off, err := top.Append(1, connector.Record{}); err != nil || off != 0 {
		t.Errorf("Append to the trimmed empty partition = %d, %v; want offset 0", off, err)
	}
}
