package proptest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// TestPropertyTablesEqualSequentialFold runs random logs (several keys,
// seven types with all four fences, a per-event fence, associative,
// idempotent and non-associative types, poison records, handler failures)
// through the driver with random batch boundaries, partitions and restarts,
// and checks the table equals a naive sequential fold in log order.
func TestPropertyTablesEqualSequentialFold(t *testing.T) {
	t.Parallel() // see parallel_test.go
	rapid.Check(t, func(rt *rapid.T) {
		nkeys := rapid.IntRange(1, 5).Draw(rt, "keys")
		n := rapid.IntRange(0, SoakLen(60, 120)).Draw(rt, "events")
		fl := &Flaky{FailOn: map[int]bool{}, Failed: map[int]bool{}}
		type entry struct {
			ty     int // index into PTypes, or -1 for poison
			ev     PEv
			poison string
		}
		var log []entry
		for i := range n {
			k := fmt.Sprintf("k%d", rapid.IntRange(0, nkeys-1).Draw(rt, "key"))
			if rapid.IntRange(0, 30).Draw(rt, "poison?") == 0 {
				log = append(log, entry{ty: -1, poison: k})
				continue
			}
			ty, ev := DrawPEv(rt, k, i)
			if rapid.IntRange(0, 15).Draw(rt, "fail?") == 0 {
				fl.FailOn[i] = true
			}
			log = append(log, entry{ty: ty, ev: ev})
		}
		sizes := rapid.SliceOfN(rapid.IntRange(1, 40), 1, 20).Draw(rt, "batch sizes")
		partitions := uint32(rapid.IntRange(1, 3).Draw(rt, "partitions"))
		restartEvery := rapid.IntRange(0, 6).Draw(rt, "restart every")

		// Reference: a naive sequential fold in log order.
		want, wantRows := map[string]PState{}, map[string]MState{}
		for _, e := range log {
			if e.ty < 0 {
				continue
			}
			s := want[e.ev.K]
			PTypes[e.ty].Fold(&s, e.ev)
			want[e.ev.K] = s
			FoldRows(wantRows, e.ty, e.ev)
		}

		dir, err := os.MkdirTemp("", "strand-property-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		topo, all, rows := PropertyTopology(fl)
		next := 0
		d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(partitions),
			topologytest.WithBatchSizes(func() int { s := sizes[next%len(sizes)]; next++; return s }))
		defer d.Close()
		for _, e := range log {
			if e.ty < 0 {
				h := connector.Headers{Key: []byte(e.poison), Tag: PPlain.Tag(), Ordering: planner.Relaxed}
				p := PartitionOf(e.poison, partitions)
				d.PipeRecord("log", connector.Record{Partition: p, Headers: h, Payload: []byte("not json")})
				continue
			}
			topologytest.Pipe(d, PTypes[e.ty].Decl, e.ev)
		}
		steps := 0
		for round := 0; d.Lag() > 0 || Parked(d, partitions) > 0; round++ {
			if round > 10000 {
				rt.Fatalf("no progress: lag %d, parked %d", d.Lag(), Parked(d, partitions))
			}
			if !d.Step() {
				d.AdvanceClock(time.Second)
			}
			steps++
			if restartEvery > 0 && steps%restartEvery == 0 {
				d.Restart()
			}
		}
		got := all()
		for k, w := range want {
			if g := got[k]; g != w {
				rt.Fatalf("key %s: table %+v, sequential fold %+v", k, g, w)
			}
		}
		if len(got) != len(want) {
			rt.Fatalf("table has %d keys, fold %d", len(got), len(want))
		}
		CheckRows(rt, rows(), wantRows)
		poison := 0
		for _, e := range log {
			if e.ty < 0 {
				poison++
			}
		}
		if dls := d.DeadLetters(); len(dls) != poison {
			rt.Fatalf("%d dead letters, %d poison records", len(dls), poison)
		}
	})
}
