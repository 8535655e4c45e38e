package topology_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// wEv is the window tests' event: N at event time At (seconds from wBase).
type wEv struct {
	K   string
	At  int64
	N   int64
	Seq int
}

// wFinal is a window's final result as EmitFinal publishes it.
type wFinal struct {
	K          string
	Start, End int64 // seconds from wBase
	Sum, Count int64
}

type wAgg struct{ Sum, Count int64 }

var (
	wEvents = stream.DeclareFunc(1, func(e wEv) string { return e.K })
	wFinals = stream.DeclareFunc(2, func(f wFinal) string { return f.K })
	wBase   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func wTime(e wEv) time.Time  { return wBase.Add(time.Duration(e.At) * time.Second) }
func wSec(t time.Time) int64 { return int64(t.Sub(wBase) / time.Second) }
func wFold(a *wAgg, e wEv) error {
	a.Sum += e.N
	a.Count++
	return nil
}

func wTopology(windows topology.Windows, opts ...topology.WindowOption) (*topology.Topology, *topology.WindowTable[string, wAgg]) {
	topo := topology.New("win")
	src := topology.Source[string](topo, "w/events")
	wt := topology.NewWindowTable[string, wAgg](topo, "sums", windows, stream.JSON[wAgg](), opts...)
	topology.Aggregate(topology.On(src, wEvents), wt, topology.EventTimeOf(wTime), wFold)
	topology.EmitFinal(wt, "w/finals", wFinals, func(k string, w topology.Window, a wAgg) wFinal {
		return wFinal{K: k, Start: wSec(w.Start), End: wSec(w.End), Sum: a.Sum, Count: a.Count}
	})
	return topo, wt
}

func wOutput(t *testing.T, d *topologytest.Driver) []wFinal {
	t.Helper()
	var out []wFinal
	for _, m := range d.Output("w/finals") {
		var f wFinal
		if err := json.Unmarshal(m.Payload, &f); err != nil {
			t.Fatalf("final result %q: %v", m.Payload, err)
		}
		out = append(out, f)
	}
	return out
}

func wCounters(d *topologytest.Driver) stream.Counters {
	var c stream.Counters
	for _, st := range d.App().Stats() {
		c.LateEvents += st.Total.LateEvents
		c.WindowsClosed += st.Total.WindowsClosed
	}
	return c
}

func TestTumblingWindowsCloseAndEmitOnce(t *testing.T) {
	topo, wt := wTopology(topology.Tumbling(10*time.Second), topology.WithGrace(5*time.Second))
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(1), topologytest.WithBatchSize(2))
	ctx := context.Background()

	topologytest.Pipe(d, wEvents, wEv{K: "a", At: 1, N: 1}, wEv{K: "a", At: 9, N: 2}, wEv{K: "b", At: 3, N: 10},
		wEv{K: "a", At: 12, N: 4}, wEv{K: "a", At: 7, N: 8}) // 7 is out of order, within the grace
	d.Advance()
	r, ok, err := wt.Get(ctx, "a", wBase)
	if err != nil || !ok || r.Value.Sum != 11 || r.Final {
		t.Fatalf("a [0,10) = %+v, %v, %v; want Sum 11, open", r, ok, err)
	}
	if got := wOutput(t, d); len(got) != 0 {
		t.Fatalf("finals before any window closed: %+v", got)
	}
	// Stream time 15 closes [0,10) (end 10 + grace 5): for both keys.
	topologytest.Pipe(d, wEvents, wEv{K: "c", At: 15, N: 100}, wEv{K: "a", At: 2, N: 1000}) // 2 is late
	d.Advance()
	if c := wCounters(d); c.LateEvents != 1 || c.WindowsClosed != 2 {
		t.Fatalf("counters %+v, want 1 late event, 2 windows closed", c)
	}
	d.Restart()
	d.Advance()
	got := wOutput(t, d)
	want := map[string]wFinal{"a": {K: "a", Start: 0, End: 10, Sum: 11, Count: 3}, "b": {K: "b", Start: 0, End: 10, Sum: 10, Count: 1}}
	if len(got) != 2 {
		t.Fatalf("finals %+v, want %+v", got, want)
	}
	for _, f := range got {
		if want[f.K] != f {
			t.Fatalf("final %+v, want %+v", f, want[f.K])
		}
	}
	r, ok, _ = wt.Get(ctx, "a", wBase)
	if !ok || !r.Final || r.Value.Sum != 11 {
		t.Fatalf("a [0,10) after close = %+v, %v; want final Sum 11", r, ok)
	}
	rs, err := wt.Range(ctx, "a", wBase, wBase.Add(time.Minute))
	if err != nil || len(rs) != 2 || rs[1].Value.Sum != 4 || rs[1].Final {
		t.Fatalf("a's windows = %+v, %v; want [0,10) and open [10,20) Sum 4", rs, err)
	}
}
