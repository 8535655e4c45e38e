package state_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/state"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// SEv is a sequenced event: the key's Seq-th.
type SEv struct {
	K   string
	Seq uint64
}

// The records of a store, one by one: a re-sequenced source with a key
// whose next numbers went through more batches than the delta rows keep, a
// key held behind an open gap, a key whose gap was given up, and a parked
// key; tables read typed and raw; the errors of a missing table and of a
// closed store.
func TestStoreRecords(t *testing.T) {
	ctx := context.Background()
	decl := stream.DeclareFunc(1, func(e SEv) string { return e.K }, stream.WithSequence(func(e SEv) uint64 { return e.Seq }))
	topo := topology.New("records")
	src := topology.Source[string](topo, "s/log").Resequence(topology.WithHoldLimits(2, 100), topology.WithGapPolicy(stream.GapSkip, 0))
	sum := topology.NewTable[string, uint64](topo, "sum", stream.JSON[uint64]())
	topology.Project(topology.On(src, decl), sum, func(v *uint64, e SEv) error {
		if e.K == "stuck" {
			return errors.New("stuck")
		}
		*v += e.Seq
		return nil
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(3), topologytest.WithBatchSize(1))
	for s := uint64(1); s <= 70; s++ { // more batches than the delta rows keep
		topologytest.Pipe(d, decl, SEv{K: "a", Seq: s})
		d.Advance()
	}
	topologytest.Pipe(d, decl, SEv{K: "b", Seq: 1}, SEv{K: "b", Seq: 3}, SEv{K: "b", Seq: 4}) // waits for 2
	topologytest.Pipe(d, decl, SEv{K: "c", Seq: 2}, SEv{K: "c", Seq: 3}, SEv{K: "c", Seq: 4}) // 1 given up: 4 overflows the hold limit
	topologytest.Pipe(d, decl, SEv{K: "stuck", Seq: 1})
	d.Advance()

	st := d.State()
	if v, ok, err := state.Get(ctx, st, sum, "a"); err != nil || !ok || v != 70*71/2 {
		t.Fatalf("Get a = %d, %v, %v; want %d", v, ok, err, 70*71/2)
	}
	if _, ok, err := state.Get(ctx, st, sum, "nobody"); err != nil || ok {
		t.Fatalf("Get nobody = %v, %v; want no row", ok, err)
	}
	kc, _ := sum.Codecs()
	ka, _ := kc.Append(nil, "a")
	raw, part, ok, err := st.GetRaw(ctx, "sum", ka)
	if err != nil || !ok || string(raw) != fmt.Sprint(70*71/2) || part != d.PartitionOf(ka) {
		t.Fatalf("GetRaw a = %q in partition %d, %v, %v; want %d in %d", raw, part, ok, err, 70*71/2, d.PartitionOf(ka))
	}
	rows := map[string]string{}
	if err := st.ScanRaw(ctx, "sum", func(_ uint32, k, v []byte) bool { rows[string(k)] = string(v); return true }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows["b"] != "1" || rows["c"] != "9" {
		t.Fatalf("ScanRaw: %v; want a, b = 1 and c = 2+3+4", rows)
	}
	if _, _, _, err := st.GetRaw(ctx, "nope", ka); !errors.Is(err, state.ErrNoTable) {
		t.Fatalf("GetRaw of a missing table = %v, want ErrNoTable", err)
	}

	held, err := st.Held(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || string(held[0].Key) != "b" || held[0].Next != 2 || len(held[0].Records) != 2 ||
		held[0].Records[0].Headers.Seq != 3 || held[0].Records[1].Headers.Seq != 4 || held[0].Records[0].Since.IsZero() {
		t.Fatalf("held %+v; want b waiting for 2 with 3 and 4", held)
	}
	gaps, err := st.Gaps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gaps) != 1 || string(gaps[0].Key) != "c" || gaps[0].From != 1 || gaps[0].To != 1 {
		t.Fatalf("gaps %+v; want c's 1..1", gaps)
	}
	parked, err := st.Parked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || string(parked[0].Key) != "stuck" || len(parked[0].Records) != 1 || parked[0].LastError == "" || parked[0].Attempts < 1 {
		t.Fatalf("parked %+v; want stuck with its record and error", parked)
	}
	if dls, err := st.DeadLetters(ctx); err != nil || len(dls) != 0 {
		t.Fatalf("pending dead letters %+v, %v; want none (the driver published them)", dls, err)
	}
	if msgs, err := st.Outbox(ctx); err != nil || len(msgs) != 0 {
		t.Fatalf("outbox %+v, %v; want none", msgs, err)
	}
	srcs, err := st.Sources(ctx)
	if err != nil || len(srcs) != 1 || srcs[0].Partitions != 3 {
		t.Fatalf("sources %+v, %v", srcs, err)
	}
	var next uint64
	for p, c := range srcs[0].Checkpoints {
		if got, ok, err := st.Checkpoint("s/log", p); err != nil || !ok || got != c {
			t.Fatalf("Checkpoint %d = %d, %v, %v; Sources says %d", p, got, ok, err, c)
		}
		next += c
	}
	if next != 70+3+3+1 {
		t.Fatalf("checkpoints sum to %d, want every record", next)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Held(ctx); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Held after Close = %v, want ErrClosed", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A directory without a store is refused with ErrNoStore.
func TestOpenNoStore(t *testing.T) {
	if _, err := state.Open(context.Background(), t.TempDir()); !errors.Is(err, state.ErrNoStore) {
		t.Fatalf("Open of an empty directory = %v, want ErrNoStore", err)
	}
}
