package proptest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// TestPropertyFailuresLeaveNoTrace: random logs as in
// TestPropertyTablesEqualSequentialFold, with folds that change their row
// in place (pointer, map, slices) and then fail — by error or panic,
// transiently or permanently, some more often than MaxAttempts allows —, a
// second in-place projection of the same types into another table, and a
// failing sink in the same run as a projection. Across random batchings
// and restarts, every table equals the sequential fold of exactly the
// events that were not dead-lettered, and every dead letter is justified:
// a permanent failure, or a record that failed MaxAttempts times in a row.
func TestPropertyFailuresLeaveNoTrace(t *testing.T) {
	t.Parallel() // see parallel_test.go
	rapid.Check(t, func(rt *rapid.T) {
		nkeys := rapid.IntRange(1, 4).Draw(rt, "keys")
		n := rapid.IntRange(0, SoakLen(50, 100)).Draw(rt, "events")
		fl := &faults{transient: map[int]int{}, panics: map[int]bool{}, permanent: map[int]bool{},
			seen: map[int]int{}, sinkFail: map[int]bool{}}
		type entry struct {
			ty int
			ev PEv
		}
		var log []entry
		for i := range n {
			k := fmt.Sprintf("k%d", rapid.IntRange(0, nkeys-1).Draw(rt, "key"))
			ty, ev := DrawPEv(rt, k, i)
			switch rapid.IntRange(0, 12).Draw(rt, "fault") {
			case 0:
				fl.transient[i] = 1
			case 1:
				fl.transient[i] = 2
				fl.panics[i] = true
			case 2:
				fl.transient[i] = failMaxAttempts // exhausts its tries
			case 3:
				fl.permanent[i] = true
			case 4:
				fl.sinkFail[i] = true
			}
			log = append(log, entry{ty: ty, ev: ev})
		}
		sizes := rapid.SliceOfN(rapid.IntRange(1, 30), 1, 20).Draw(rt, "batch sizes")
		partitions := uint32(rapid.IntRange(1, 3).Draw(rt, "partitions"))
		restartEvery := rapid.IntRange(0, 5).Draw(rt, "restart every")

		topo := topology.New("failures", topology.WithWorkers(3), topology.WithRetry(failMaxAttempts, time.Second, time.Second))
		src := topology.Source[string](topo, "log")
		mirror := topology.NewTable[string, MState](topo, "mirror", stream.JSON[MState]())
		rows := topology.NewTable[string, MState](topo, "rows", stream.JSON[MState]())
		for ty, pt := range PTypes {
			s := topology.On(src, pt.Decl)
			if pt.Decl == PPlain || pt.Decl == pRelease {
				// Folded first, never failing itself: it must be put back
				// when the projection after it fails.
				topology.Project(s, mirror, func(m *MState, e PEv) error { m.fold(ty, e); return nil })
			}
			if pt.Decl == pFlag {
				s.ForEach("side effect", func(_ context.Context, _ string, events []PEv) error {
					for _, e := range events {
						if err := fl.sink(e); err != nil {
							return err
						}
					}
					return nil
				}, topology.WithMaxBatch(1))
			}
			topology.Project(s, rows, func(m *MState, e PEv) error {
				m.fold(ty, e) // change the row in place first, then fail
				return fl.after(e)
			})
		}

		dir, err := os.MkdirTemp("", "strand-failures-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		next := 0
		d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(partitions),
			topologytest.WithBatchSizes(func() int { s := sizes[next%len(sizes)]; next++; return s }))
		defer d.Close()
		for _, e := range log {
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

		// Which events were dead-lettered, and why.
		dead := map[int]deadletter.Letter{}
		for _, dl := range d.DeadLetters() {
			var e PEv
			if err := json.Unmarshal(dl.Payload, &e); err != nil {
				rt.Fatalf("dead letter payload %q: %v", dl.Payload, err)
			}
			if _, dup := dead[e.N]; dup {
				rt.Fatalf("event %d dead-lettered twice", e.N)
			}
			dead[e.N] = dl
		}
		byN := map[int]entry{}
		for _, e := range log {
			byN[e.ev.N] = e
		}
		for nn, dl := range dead {
			e := byN[nn]
			// Justified: the event itself failed that way (a failure stays
			// with its event: the others of its run are applied).
			justified := false
			switch dl.Reason {
			case deadletter.ReasonPermanent:
				justified = fl.permanent[nn]
			case deadletter.ReasonExhausted:
				justified = fl.seen[nn] >= failMaxAttempts
			}
			if !justified {
				rt.Fatalf("event %d (key %s, type %d) dead-lettered (%s, %d attempts) but did not fail so itself: faults transient %d, seen %d",
					nn, e.ev.K, e.ty, dl.Reason, dl.Attempts, fl.transient[nn], fl.seen[nn])
			}
			if dl.Reason == deadletter.ReasonExhausted && dl.Attempts != failMaxAttempts {
				rt.Fatalf("event %d exhausted after %d attempts, want %d", nn, dl.Attempts, failMaxAttempts)
			}
		}
		for nn := range fl.seen {
			if fl.seen[nn] > fl.transient[nn] && !fl.permanent[nn] {
				rt.Fatalf("event %d failed %d times, %d injected", nn, fl.seen[nn], fl.transient[nn])
			}
		}

		// Reference: the sequential fold of every event not dead-lettered.
		wantRows, wantMirror := map[string]MState{}, map[string]MState{}
		for _, e := range log {
			if _, gone := dead[e.ev.N]; gone {
				continue
			}
			s := wantRows[e.ev.K]
			s.fold(e.ty, e.ev)
			wantRows[e.ev.K] = s
			if d := PTypes[e.ty].Decl; d == PPlain || d == pRelease {
				m := wantMirror[e.ev.K]
				m.fold(e.ty, e.ev)
				wantMirror[e.ev.K] = m
			}
		}
		for name, pair := range map[string]struct {
			table *stateScan
			want  map[string]MState
		}{"rows": {&stateScan{rows}, wantRows}, "mirror": {&stateScan{mirror}, wantMirror}} {
			got := pair.table.all(rt)
			for k, w := range pair.want {
				if g := got[k]; !equalMState(g, w) {
					rt.Fatalf("table %s key %s:\n got  %s\n want %s", name, k, show(g), show(w))
				}
			}
			if len(got) != len(pair.want) {
				rt.Fatalf("table %s has %d keys, the fold %d", name, len(got), len(pair.want))
			}
		}
	})
}
