package topology_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/proptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// Tests of issue 23: exactly-once in every topology shape.

// TwoCount is a row fed by two inputs: what each input applied.
type TwoCount struct{ A, B int }

// A table fed by two sources: every event of both is applied exactly once,
// whatever the batching and the partition count (one writer per row).
func TestTableFedByTwoSources(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{1, 7, 100} {
		for _, parts := range []uint32{1, 3} {
			t.Run(fmt.Sprintf("batch=%d/partitions=%d", bs, parts), func(t *testing.T) {
				incA := stream.DeclareFunc(1, grouptest.EvKey)
				incB := stream.DeclareFunc(2, grouptest.EvKey)
				topo := topology.New("two")
				tbl := topology.NewTable[string, TwoCount](topo, "counts", stream.JSON[TwoCount]())
				sa := topology.Source[string](topo, "s/a")
				sb := topology.Source[string](topo, "s/b")
				topology.Project(topology.On(sa, incA), tbl, func(c *TwoCount, e grouptest.Ev) error { c.A++; return nil })
				topology.Project(topology.On(sb, incB), tbl, func(c *TwoCount, e grouptest.Ev) error { c.B++; return nil })
				d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(bs), topologytest.WithPartitions(parts))
				keys := []string{"x", "y", "z", "w"}
				for i := range 300 {
					topologytest.PipeTo(d, "s/a", incA, grouptest.Ev{K: keys[i%len(keys)]})
					topologytest.PipeTo(d, "s/b", incB, grouptest.Ev{K: keys[(i/3)%len(keys)]})
				}
				d.Advance()
				for _, k := range keys {
					got, _, err := tbl.Get(context.Background(), k)
					if err != nil {
						t.Fatal(err)
					}
					if want := (TwoCount{75, 75}); got != want {
						t.Errorf("key %s: %+v, want %+v", k, got, want)
					}
				}
			})
		}
	}
}

// Two KeyBy steps into one table: their repartition topics are two inputs
// of one table.
func TestTableFedByTwoKeyBySteps(t *testing.T) {
	type depot struct{ In, Out int }
	arrive := stream.DeclareFunc(1, grouptest.EvKey)
	leave := stream.DeclareFunc(2, grouptest.EvKey)
	topo := topology.New("depots")
	src := topology.Source[string](topo, "parcels")
	tbl := topology.NewTable[string, depot](topo, "depots", stream.JSON[depot]())
	byDepotIn := topology.KeyBy(topology.On(src, arrive), "in", func(e grouptest.Ev) (string, error) { return fmt.Sprint("D", e.N%3), nil })
	byDepotOut := topology.KeyBy(topology.On(src, leave), "out", func(e grouptest.Ev) (string, error) { return fmt.Sprint("D", e.N%3), nil })
	topology.Project(byDepotIn, tbl, func(v *depot, e grouptest.Ev) error { v.In++; return nil })
	topology.Project(byDepotOut, tbl, func(v *depot, e grouptest.Ev) error { v.Out++; return nil })
	d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(3), topologytest.WithPartitions(2))
	for i := range 300 {
		topologytest.Pipe(d, arrive, grouptest.Ev{K: fmt.Sprint("p", i), N: i})
		topologytest.Pipe(d, leave, grouptest.Ev{K: fmt.Sprint("p", i), N: i})
	}
	d.Advance()
	for i := range 3 {
		got, _, err := tbl.Get(context.Background(), fmt.Sprint("D", i))
		if err != nil {
			t.Fatal(err)
		}
		if (got != depot{100, 100}) {
			t.Errorf("depot D%d: %+v, want {100 100}", i, got)
		}
	}
}

// A Permanent error dead-letters the failing event only, with its own
// error; the healthy events of its run are applied, whatever the batching,
// also when the run is reduced.
func TestPermanentFailureStaysWithItsEvent(t *testing.T) {
	for _, reduced := range []bool{false, true} {
		for _, bs := range []int{1, 2, 5, 100} {
			t.Run(fmt.Sprintf("reduced=%v/batch=%d", reduced, bs), func(t *testing.T) {
				var opts []stream.Option
				if reduced {
					opts = append(opts, stream.WithReduce(algebra.Sum(func(e grouptest.Ev) int64 { return e.Amount },
						func(e grouptest.Ev, v int64) grouptest.Ev { e.Amount = v; return e })))
				}
				scan := stream.DeclareFunc(1, grouptest.EvKey, opts...)
				topo := topology.New("scans")
				src := topology.Source[string](topo, "scans")
				tbl := topology.NewTable[string, int64](topo, "totals", stream.JSON[int64]())
				topology.Project(topology.On(src, scan), tbl, func(v *int64, e grouptest.Ev) error {
					if e.Amount >= 1000 {
						return stream.Permanent(fmt.Errorf("unknown depot %d", e.Amount))
					}
					*v += e.Amount
					return nil
				})
				d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(bs))
				topologytest.Pipe(d, scan, grouptest.Ev{K: "a", Amount: 1}, grouptest.Ev{K: "a", Amount: 1009}, grouptest.Ev{K: "a", Amount: 2},
					grouptest.Ev{K: "b", Amount: 4}, grouptest.Ev{K: "a", Amount: 1010}, grouptest.Ev{K: "a", Amount: 8})
				d.Advance()
				if got, _, _ := tbl.Get(context.Background(), "a"); got != 11 {
					t.Errorf("a = %d, want 11 (1+2+8; the two bad scans dead-lettered)", got)
				}
				if got, _, _ := tbl.Get(context.Background(), "b"); got != 4 {
					t.Errorf("b = %d, want 4", got)
				}
				var got []string
				for _, l := range d.DeadLetters() {
					if l.Reason != deadletter.ReasonPermanent {
						t.Errorf("dead letter at %d: reason %v, want permanent", l.Offset, l.Reason)
					}
					got = append(got, fmt.Sprintf("%d:%v", l.Offset, l.Err))
				}
				slices.Sort(got)
				if len(got) != 2 || !strings.HasPrefix(got[0], "1:") || !strings.Contains(got[0], "unknown depot 1009") ||
					!strings.HasPrefix(got[1], "4:") || !strings.Contains(got[1], "unknown depot 1010") {
					t.Errorf("dead letters %q, want offsets 1 and 4, each with its own error", got)
				}
			})
		}
	}
}

// Retries exhausted dead-letter the failing event only; the other events
// of its run are applied.
func TestExhaustedRetriesStayWithTheirEvent(t *testing.T) {
	for _, bs := range []int{1, 3, 100} {
		t.Run(fmt.Sprintf("batch=%d", bs), func(t *testing.T) {
			ev := stream.DeclareFunc(1, grouptest.EvKey)
			topo := topology.New("exhaust", topology.WithRetry(2, time.Second, time.Second))
			src := topology.Source[string](topo, "log")
			tbl := topology.NewTable[string, []int64](topo, "seen", stream.JSON[[]int64]())
			topology.Project(topology.On(src, ev), tbl, func(v *[]int64, e grouptest.Ev) error {
				*v = append(*v, e.Amount) // in place, then fail: no trace may stay
				if e.Amount == 2 {
					return errors.New("always fails")
				}
				return nil
			})
			d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(bs))
			topologytest.Pipe(d, ev, grouptest.Ev{K: "a", Amount: 1}, grouptest.Ev{K: "a", Amount: 2}, grouptest.Ev{K: "a", Amount: 3})
			d.Advance()
			if got, _, _ := tbl.Get(context.Background(), "a"); !slices.Equal(got, []int64{1}) {
				t.Errorf("after the first failure: %v, want [1] (the key parked at the failing event)", got)
			}
			for range 3 {
				d.AdvanceClock(time.Minute)
				d.Advance()
			}
			if got, _, _ := tbl.Get(context.Background(), "a"); !slices.Equal(got, []int64{1, 3}) {
				t.Errorf("after the retries: %v, want [1 3]", got)
			}
			dls := d.DeadLetters()
			if len(dls) != 1 || dls[0].Offset != 1 || dls[0].Reason != deadletter.ReasonExhausted {
				t.Fatalf("dead letters %+v, want only offset 1, retries-exhausted", dls)
			}
		})
	}
}

// Amounts that make the folds below fail: a scan of amount in
// [badPermanent, badPermanent+10] fails with a Permanent error, one in
// [badAlways, badAlways+10] fails every time (its tries run out); healthy
// amounts are in [-3, 3]. A reduced run's sum tells which kinds it holds.
const (
	badPermanent = 1000
	badAlways    = 100_000
)

// TestPropertyDeadLettersDoNotDependOnBatching: random logs of two event
// types, one of them reduced (a Sum), with events that fail permanently or
// on every try; random batch sizes, partition counts and restarts. The
// dead letters are exactly the failing events, each with its own reason and
// error, and every table equals the sequential fold of the other events —
// what batches of one record give — whatever the batching.
func TestPropertyDeadLettersDoNotDependOnBatching(t *testing.T) {
	t.Parallel() // see parallel_test.go
	type row struct {
		Sum   int64
		Plain []int
	}
	const maxAttempts = 2
	failOf := func(amt int64) error {
		switch {
		case amt >= badAlways-300:
			return fmt.Errorf("amount %d: store down", amt)
		case amt >= badPermanent-300:
			return stream.Permanent(fmt.Errorf("amount %d: unknown depot", amt))
		}
		return nil
	}
	rapid.Check(t, func(rt *rapid.T) {
		sum := stream.DeclareFunc(1, grouptest.EvKey, stream.WithReduce(algebra.Sum(func(e grouptest.Ev) int64 { return e.Amount },
			func(e grouptest.Ev, v int64) grouptest.Ev { e.Amount = v; return e })))
		plain := stream.DeclareFunc(2, grouptest.EvKey)
		topo := topology.New("batching", topology.WithWorkers(2), topology.WithRetry(maxAttempts, time.Second, time.Second))
		src := topology.Source[string](topo, "log")
		tbl := topology.NewTable[string, row](topo, "rows", stream.JSON[row]())
		topology.Project(topology.On(src, sum), tbl, func(r *row, e grouptest.Ev) error {
			r.Sum += e.Amount // in place first
			return failOf(e.Amount)
		})
		topology.Project(topology.On(src, plain), tbl, func(r *row, e grouptest.Ev) error {
			r.Plain = append(r.Plain, e.N)
			return failOf(e.Amount)
		})

		n := rapid.IntRange(1, proptest.SoakLen(30, 60)).Draw(rt, "events")
		nkeys := rapid.IntRange(1, 3).Draw(rt, "keys")
		type entry struct {
			plain bool
			ev    grouptest.Ev
		}
		var log []entry
		for i := range n {
			e := grouptest.Ev{K: fmt.Sprint("k", rapid.IntRange(0, nkeys-1).Draw(rt, "key")), N: i,
				Amount: int64(rapid.IntRange(-3, 3).Draw(rt, "amount"))}
			switch rapid.IntRange(0, 8).Draw(rt, "fault") {
			case 0:
				e.Amount = badPermanent + int64(rapid.IntRange(0, 10).Draw(rt, "bad"))
			case 1:
				e.Amount = badAlways + int64(rapid.IntRange(0, 10).Draw(rt, "bad"))
			}
			log = append(log, entry{plain: rapid.Bool().Draw(rt, "plain"), ev: e})
		}
		sizes := rapid.SliceOfN(rapid.IntRange(1, 25), 1, 10).Draw(rt, "batch sizes")
		parts := uint32(rapid.IntRange(1, 2).Draw(rt, "partitions"))
		restartEvery := rapid.IntRange(0, 4).Draw(rt, "restart every")

		next := 0
		d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(parts),
			topologytest.WithBatchSizes(func() int { s := sizes[next%len(sizes)]; next++; return s }))
		defer d.Close()
		for _, e := range log {
			if e.plain {
				topologytest.Pipe(d, plain, e.ev)
			} else {
				topologytest.Pipe(d, sum, e.ev)
			}
		}
		steps := 0
		for round := 0; d.Lag() > 0 || proptest.Parked(d, parts) > 0; round++ {
			if round > 10000 {
				rt.Fatalf("no progress: lag %d, parked %d", d.Lag(), proptest.Parked(d, parts))
			}
			if !d.Step() {
				d.AdvanceClock(time.Second)
			}
			steps++
			if restartEvery > 0 && steps%restartEvery == 0 {
				d.Restart()
			}
		}

		want := map[string]row{}
		wantDead := map[int]deadletter.Reason{}
		for _, e := range log {
			switch {
			case e.ev.Amount >= badAlways:
				wantDead[e.ev.N] = deadletter.ReasonExhausted
				continue
			case e.ev.Amount >= badPermanent:
				wantDead[e.ev.N] = deadletter.ReasonPermanent
				continue
			}
			r := want[e.ev.K]
			if e.plain {
				r.Plain = append(r.Plain, e.ev.N)
			} else {
				r.Sum += e.ev.Amount
			}
			want[e.ev.K] = r
		}
		gotDead := map[int]deadletter.Reason{}
		for _, dl := range d.DeadLetters() {
			var e grouptest.Ev
			if err := json.Unmarshal(dl.Payload, &e); err != nil {
				rt.Fatalf("dead letter payload %q: %v", dl.Payload, err)
			}
			if _, dup := gotDead[e.N]; dup {
				rt.Fatalf("event %d dead-lettered twice", e.N)
			}
			gotDead[e.N] = dl.Reason
			if own := fmt.Sprintf("amount %d:", e.Amount); dl.Err == nil || !strings.Contains(dl.Err.Error(), own) {
				rt.Fatalf("dead letter of event %d (amount %d) carries error %v, not its own", e.N, e.Amount, dl.Err)
			}
		}
		if !maps.Equal(gotDead, wantDead) {
			rt.Fatalf("dead letters (event → reason) %v, want %v", gotDead, wantDead)
		}
		got := map[string]row{}
		if err := tbl.Scan(context.Background(), func(k string, v row) bool { got[k] = v; return true }); err != nil {
			rt.Fatal(err)
		}
		for k, w := range want {
			if g := got[k]; g.Sum != w.Sum || !slices.Equal(g.Plain, w.Plain) {
				rt.Fatalf("key %s: %+v, want %+v", k, g, w)
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok && (g.Sum != 0 || len(g.Plain) != 0) {
				rt.Fatalf("key %s: %+v, want no row", k, g)
			}
		}
	})
}

// A fold that never returns does not hold a stop: Run and Close return
// within the drain timeout (with room for a slow machine), the stuck run is
// in Stats with its key and handler, nothing of its batch is committed, and
// a fold written with ProjectContext sees its context cancelled.
func TestStopReturnsWhenAFoldNeverReturns(t *testing.T) {
	for _, withCtx := range []bool{false, true} {
		t.Run(fmt.Sprintf("context=%v", withCtx), func(t *testing.T) {
			ev := stream.DeclareFunc(1, grouptest.EvKey)
			topo := topology.New("stuck", topology.WithWorkers(2))
			src := topology.Source[string](topo, "s/log")
			tbl := topology.NewTable[string, int](topo, "counts", stream.JSON[int]())
			entered := make(chan struct{}, 16)
			unblock := make(chan struct{})
			sawCancel := make(chan struct{}, 1)
			if withCtx {
				topology.ProjectContext(topology.On(src, ev), tbl, func(ctx context.Context, n *int, e grouptest.Ev) error {
					if e.K == "stuck" {
						entered <- struct{}{}
						select {
						case <-ctx.Done():
							sawCancel <- struct{}{}
							<-unblock // and still does not return
						case <-unblock:
						}
					}
					*n++
					return nil
				})
			} else {
				topology.Project(topology.On(src, ev), tbl, func(n *int, e grouptest.Ev) error {
					if e.K == "stuck" {
						entered <- struct{}{}
						<-unblock
					}
					*n++
					return nil
				})
			}
			ctx := context.Background()
			cl := grouptest.Broker(t)
			if err := cl.EnsureTopic(ctx, "s", "log", 1); err != nil {
				t.Fatal(err)
			}
			pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
			if err != nil {
				t.Fatal(err)
			}
			if err := iggy.PublishBatch(ctx, pub, ev, []grouptest.Ev{{K: "a"}, {K: "stuck"}, {K: "b"}}); err != nil {
				t.Fatal(err)
			}
			_ = pub.Close(ctx)
			app, err := topology.Open(ctx, topo, cl, t.TempDir(), topology.WithDrainTimeout(200*time.Millisecond),
				topology.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			defer close(unblock) // the stuck goroutine ends with the test
			runCtx, stop := context.WithCancel(ctx)
			runErr := make(chan error, 1)
			go func() { runErr <- app.Run(runCtx) }()
			<-entered
			start := time.Now()
			stop()
			select {
			case err := <-runErr:
				if err != nil {
					t.Errorf("Run = %v, want nil after a stop", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("Run did not return within 60s of the stop (drain timeout 200ms)")
			}
			t.Logf("Run returned %v after the stop", time.Since(start))
			closed := make(chan error, 1)
			go func() { closed <- app.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Errorf("Close = %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("Close did not return within 60s")
			}
			if withCtx {
				select {
				case <-sawCancel:
				default:
					t.Error("the fold's context was not cancelled")
				}
			}
			var stuck []stream.StuckRun
			for _, st := range app.Stats() {
				for _, ps := range st.Partitions {
					stuck = append(stuck, ps.Stuck...)
				}
			}
			if len(stuck) != 1 || string(stuck[0].Key) != "stuck" || !strings.Contains(stuck[0].Handlers, `project into "counts"`) {
				t.Fatalf("Stats: stuck runs %+v, want key \"stuck\" in project into \"counts\"", stuck)
			}
		})
	}
}

// The test-only options refuse what they cannot mean.
func TestFaultOptionsRefuseBadValues(t *testing.T) {
	topo, _, _ := grouptest.Counter("faults")
	_, err := topology.Open(context.Background(), topo, grouptest.Broker(t), t.TempDir(), topology.WithOutboxGrace(-time.Second))
	if err == nil || !strings.Contains(err.Error(), "topology.WithOutboxGrace") {
		t.Fatalf("Open with a negative outbox grace = %v, want an error naming topology.WithOutboxGrace", err)
	}
}
