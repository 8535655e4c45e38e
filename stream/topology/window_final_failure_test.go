package topology_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// Failed final results (docs/design.md §18, "Windows"): a window whose
// EmitFinal function fails as it closes is closed as on success and its
// result is dead-lettered, once, with its aggregate.

// wfFinal is the final result of the failing-finals test: X is NaN (which
// JSON cannot encode) for the windows whose result must fail to encode.
type wfFinal struct {
	K          string
	Start, End int64
	Sum        int64
	X          float64
}

var wfFinals = stream.DeclareFunc(3, func(f wfFinal) string { return f.K })

func TestFailedWindowFinalIsDeadLettered(t *testing.T) {
	topo := topology.New("win-fail")
	src := topology.Source[string](topo, "w/events")
	wt := topology.NewWindowTable[string, grouptest.WAgg](topo, "sums", topology.Tumbling(10*time.Second), stream.JSON[grouptest.WAgg](), topology.WithGrace(5*time.Second))
	topology.Aggregate(topology.On(src, grouptest.WEvents), wt, topology.EventTimeOf(grouptest.WTime), grouptest.WFold)
	topology.EmitFinal(wt, "w/finals", wfFinals, func(k string, w topology.Window, a grouptest.WAgg) wfFinal {
		f := wfFinal{K: k, Start: grouptest.WSec(w.Start), End: grouptest.WSec(w.End), Sum: a.Sum}
		switch {
		case k == "e": // both of its windows: the result does not encode
			f.X = math.NaN()
		case k == "p" && f.Start == 0: // its first window: the function panics
			panic("no result for " + k)
		}
		return f
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(1), topologytest.WithBatchSize(3))
	ctx := context.Background()

	topologytest.Pipe(d, grouptest.WEvents,
		grouptest.WEv{K: "a", At: 1, N: 1}, grouptest.WEv{K: "e", At: 2, N: 3}, grouptest.WEv{K: "p", At: 3, N: 5},
		grouptest.WEv{K: "a", At: 12, N: 2}, grouptest.WEv{K: "e", At: 13, N: 4}, grouptest.WEv{K: "p", At: 14, N: 6}, grouptest.WEv{K: "e", At: 14, N: 10})
	d.Advance()
	// Stream time 35 closes [0,10) and [10,20) of a, e and p in one sweep.
	topologytest.Pipe(d, grouptest.WEvents, grouptest.WEv{K: "c", At: 35, N: 100})
	d.Advance()
	var c stream.Counters
	for _, st := range d.App().Stats() {
		c.WindowsClosed += st.Total.WindowsClosed
		c.TimerFailures += st.Total.TimerFailures
	}
	if c.WindowsClosed != 6 || c.TimerFailures != 3 {
		t.Fatalf("counters: %d windows closed, %d failures; want 6, 3", c.WindowsClosed, c.TimerFailures)
	}
	d.Restart() // nothing is dead-lettered or emitted again
	d.Advance()

	var out []wfFinal
	for _, m := range d.Output("w/finals") {
		var f wfFinal
		if err := json.Unmarshal(m.Payload, &f); err != nil {
			t.Fatalf("final result %q: %v", m.Payload, err)
		}
		out = append(out, f)
	}
	wantOut := map[wfFinal]bool{{K: "a", Start: 0, End: 10, Sum: 1}: true, {K: "a", Start: 10, End: 20, Sum: 2}: true, {K: "p", Start: 10, End: 20, Sum: 6}: true}
	if len(out) != len(wantOut) {
		t.Fatalf("final results %+v, want %v", out, wantOut)
	}
	for _, f := range out {
		if !wantOut[f] {
			t.Fatalf("final result %+v, want one of %v", f, wantOut)
		}
	}

	type win struct {
		k          string
		start, end int64
	}
	wantDL := map[win]grouptest.WAgg{{"e", 0, 10}: {Sum: 3, Count: 1}, {"e", 10, 20}: {Sum: 14, Count: 2}, {"p", 0, 10}: {Sum: 5, Count: 1}}
	dls := d.DeadLetters()
	if len(dls) != len(wantDL) {
		t.Fatalf("%d dead letters %v, want one per failing window: %v", len(dls), dls, wantDL)
	}
	ids := map[[16]byte]bool{}
	seen := map[win]bool{}
	for _, dl := range dls {
		if dl.Reason != deadletter.ReasonWindowFinal || dl.Attempts != 1 || dl.Err == nil || dl.Source != "w/events" {
			t.Fatalf("dead letter %v: reason %v, %d attempts; want %v, 1 attempt, an error", dl, dl.Reason, dl.Attempts, deadletter.ReasonWindowFinal)
		}
		w, err := dl.Window()
		if err != nil {
			t.Fatalf("dead letter %v: %v", dl, err)
		}
		k := win{string(w.Key), grouptest.WSec(w.Start), grouptest.WSec(w.End)}
		want, ok := wantDL[k]
		if !ok || seen[k] || w.Table != "sums" {
			t.Fatalf("dead letter of window %+v of table %q: want each of %v once, table sums", k, w.Table, wantDL)
		}
		seen[k] = true
		agg, err := stream.JSON[grouptest.WAgg]().Decode(w.Aggregate)
		if err != nil || agg != want {
			t.Fatalf("window %+v: aggregate %q = %+v, %v; want %+v", k, w.Aggregate, agg, err, want)
		}
		msg := dl.Err.Error()
		if k.k == "p" && !strings.Contains(msg, "panic: no result for p") || k.k == "e" && !strings.Contains(msg, "encode") {
			t.Fatalf("window %+v: error %q does not say what failed", k, msg)
		}
		if ids[dl.ID()] {
			t.Fatalf("dead letter %v: its id is another's", dl)
		}
		ids[dl.ID()] = true
	}

	// The window table's rows are as for a success: every window closed,
	// with its aggregate.
	for k, want := range wantDL {
		r, ok, err := wt.Get(ctx, k.k, grouptest.WBase.Add(time.Duration(k.start)*time.Second))
		if err != nil || !ok || !r.Final || r.Value != want {
			t.Fatalf("window %+v = %+v, %v, %v; want final %+v", k, r, ok, err, want)
		}
	}
	if r, ok, _ := wt.Get(ctx, "a", grouptest.WBase); !ok || !r.Final || r.Value.Sum != 1 {
		t.Fatalf("a [0,10) = %+v, %v; want final Sum 1", r, ok)
	}
}
