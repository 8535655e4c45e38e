package topology_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// A projection that folds in place (appending to the row's slice) and fails
// once, after an earlier record of the same key was folded in the same
// batch: the retry must build on the row as it was before the failing run.
func TestFailedFoldLeavesNoTraceInPlace(t *testing.T) {
	open := stream.DeclareFunc(1, grouptest.EvKey, stream.WithFence(planner.Acquire))
	add := stream.DeclareFunc(2, grouptest.EvKey)
	topo := topology.New("inplace")
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, []int64](topo, "sums", stream.JSON[[]int64]())
	failures := 0
	topology.Project(topology.On(src, open), table, func(v *[]int64, e grouptest.Ev) error {
		*v = append((*v)[:0], 0)
		return nil
	})
	topology.Project(topology.On(src, add), table, func(v *[]int64, e grouptest.Ev) error {
		(*v)[0] += e.Amount                // in place: the backing array is the Txn's
		if e.Amount == 3 && failures < 2 { // the run's try, then the event's own
			failures++
			return errors.New("flaky")
		}
		return nil
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(100))
	topologytest.Pipe(d, open, grouptest.Ev{K: "a"})
	topologytest.Pipe(d, add, grouptest.Ev{K: "a", Amount: 2}, grouptest.Ev{K: "a", Amount: 3})
	d.Advance()
	if v, _, _ := table.Get(context.Background(), "a"); !slices.Equal(v, []int64{2}) {
		t.Fatalf("after the failure the row is %v, want [2] (the open and the 2; the 3 folded in place is gone)", v)
	}
	d.AdvanceClock(time.Hour)
	d.Advance()
	if v, _, _ := table.Get(context.Background(), "a"); !slices.Equal(v, []int64{5}) {
		t.Fatalf("after the retry the row is %v, want [5]", v)
	}
	// A later batch builds on the committed value, not on a cached one.
	topologytest.Pipe(d, add, grouptest.Ev{K: "a", Amount: 10})
	d.Advance()
	if v, _, _ := table.Get(context.Background(), "a"); !slices.Equal(v, []int64{15}) {
		t.Fatalf("after a later batch the row is %v, want [15]", v)
	}
}

// Attempts are counted per failing record: four fenced events of one key
// that each fail exactly once are each tried twice and none is dead-lettered.
func TestAttemptsAreCountedPerFailingRecord(t *testing.T) {
	step := stream.DeclareFunc(1, grouptest.EvKey, stream.WithFence(planner.AcqRel))
	tries := map[int]int{}
	topo := topology.New("attempts", topology.WithRetry(3, time.Second, time.Minute))
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, []int](topo, "steps", stream.JSON[[]int]())
	topology.Project(topology.On(src, step), table, func(v *[]int, e grouptest.Ev) error {
		tries[e.N]++
		if tries[e.N] == 1 {
			return errors.New("once")
		}
		*v = append(*v, e.N)
		return nil
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(100))
	topologytest.Pipe(d, step, grouptest.Ev{K: "a", N: 1}, grouptest.Ev{K: "a", N: 2}, grouptest.Ev{K: "a", N: 3}, grouptest.Ev{K: "a", N: 4})
	for range 8 {
		d.Advance()
		d.AdvanceClock(time.Hour)
	}
	d.Advance()
	if dls := d.DeadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %+v, want none: every record failed only once", dls)
	}
	if v, _, _ := table.Get(context.Background(), "a"); !slices.Equal(v, []int{1, 2, 3, 4}) {
		t.Fatalf("row %v, want [1 2 3 4]", v)
	}
	for n := 1; n <= 4; n++ {
		if tries[n] != 2 {
			t.Fatalf("record %d tried %d times, want 2", n, tries[n])
		}
	}
}

// A reduction whose user function panics (a Sum getter here) fails its run
// like a failing handler: the key is parked, other keys go on, nothing of
// the run is applied, and the retry applies it once the function recovers.
func TestPanicInsideAReductionFailsOnlyItsKey(t *testing.T) {
	boom := true
	sum := stream.DeclareFunc(1, grouptest.EvKey, stream.WithReduce(algebra.Sum(
		func(e grouptest.Ev) int64 {
			if boom && e.K == "bad" {
				panic("getter broke")
			}
			return e.Amount
		},
		func(e grouptest.Ev, n int64) grouptest.Ev { e.Amount = n; return e })))
	topo := topology.New("reducepanic")
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, int64](topo, "sums", stream.JSON[int64]())
	topology.Project(topology.On(src, sum), table, func(v *int64, e grouptest.Ev) error { *v += e.Amount; return nil })
	d := topologytest.NewDriver(t, topo)
	topologytest.Pipe(d, sum, grouptest.Ev{K: "bad", Amount: 1}, grouptest.Ev{K: "bad", Amount: 2}, grouptest.Ev{K: "good", Amount: 3}, grouptest.Ev{K: "good", Amount: 4})
	d.Advance()
	ctx := context.Background()
	if v, _, _ := table.Get(ctx, "good"); v != 7 {
		t.Fatalf("good = %d, want 7", v)
	}
	if _, ok, _ := table.Get(ctx, "bad"); ok {
		t.Fatal("the key whose reduction panicked has a row")
	}
	if keys, recs := d.Parked(); keys != 1 || recs != 2 {
		t.Fatalf("parked %d keys, %d records; want 1 and 2", keys, recs)
	}
	boom = false
	d.AdvanceClock(time.Hour)
	d.Advance()
	if v, _, _ := table.Get(ctx, "bad"); v != 3 {
		t.Fatalf("bad after the retry = %d, want 3", v)
	}
}

// A payload codec or a key function that panics dead-letters the record it
// panicked on (undecodable, key-mismatch) and the rest of the run goes on.
func TestPanickingCodecAndKeyFunctionDeadLetterTheirRecord(t *testing.T) {
	codec := stream.CodecFunc(stream.JSON[grouptest.Ev]().Append, func(data []byte) (grouptest.Ev, error) {
		e, err := stream.JSON[grouptest.Ev]().Decode(data)
		if err == nil && e.N == 1 {
			panic("codec broke")
		}
		return e, err
	})
	decl := stream.DeclareFunc(1, func(e grouptest.Ev) string {
		if e.N == 2 {
			panic("key function broke")
		}
		return e.K
	}, stream.WithPayload(codec))
	topo := topology.New("panics")
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, int64](topo, "sums", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), table, func(v *int64, e grouptest.Ev) error { *v += e.Amount; return nil })
	d := topologytest.NewDriver(t, topo)
	for n := range 4 {
		env, err := stream.DeclareFunc(1, grouptest.EvKey).Envelope(grouptest.Ev{K: "a", N: n, Amount: 10 * int64(n+1)})
		if err != nil {
			t.Fatal(err)
		}
		d.PipeRecord("log", connector.Record{Headers: env.Headers, Payload: env.Payload})
	}
	d.Advance()
	dls := d.DeadLetters()
	if len(dls) != 2 || dls[0].Offset != 1 || dls[0].Reason != deadletter.ReasonDecode || dls[1].Offset != 2 || dls[1].Reason != deadletter.ReasonKeyMismatch {
		t.Fatalf("dead letters %+v, want offset 1 undecodable and offset 2 key-mismatch", dls)
	}
	if v, _, _ := table.Get(context.Background(), "a"); v != 10+40 {
		t.Fatalf("a = %d, want 50 (offsets 0 and 3)", v)
	}
}
