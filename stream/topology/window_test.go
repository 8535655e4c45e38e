package topology_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

func wOutput(t *testing.T, d *topologytest.Driver) []grouptest.WFinal {
	t.Helper()
	var out []grouptest.WFinal
	for _, m := range d.Output("w/finals") {
		var f grouptest.WFinal
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
	topo, wt := grouptest.WTopology(topology.Tumbling(10*time.Second), topology.WithGrace(5*time.Second))
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(1), topologytest.WithBatchSize(2))
	ctx := context.Background()

	topologytest.Pipe(d, grouptest.WEvents, grouptest.WEv{K: "a", At: 1, N: 1}, grouptest.WEv{K: "a", At: 9, N: 2}, grouptest.WEv{K: "b", At: 3, N: 10},
		grouptest.WEv{K: "a", At: 12, N: 4}, grouptest.WEv{K: "a", At: 7, N: 8}) // 7 is out of order, within the grace
	d.Advance()
	r, ok, err := wt.Get(ctx, "a", grouptest.WBase)
	if err != nil || !ok || r.Value.Sum != 11 || r.Final {
		t.Fatalf("a [0,10) = %+v, %v, %v; want Sum 11, open", r, ok, err)
	}
	if got := wOutput(t, d); len(got) != 0 {
		t.Fatalf("finals before any window closed: %+v", got)
	}
	// Stream time 15 closes [0,10) (end 10 + grace 5): for both keys.
	topologytest.Pipe(d, grouptest.WEvents, grouptest.WEv{K: "c", At: 15, N: 100}, grouptest.WEv{K: "a", At: 2, N: 1000}) // 2 is late
	d.Advance()
	if c := wCounters(d); c.LateEvents != 1 || c.WindowsClosed != 2 {
		t.Fatalf("counters %+v, want 1 late event, 2 windows closed", c)
	}
	d.Restart()
	d.Advance()
	got := wOutput(t, d)
	want := map[string]grouptest.WFinal{"a": {K: "a", Start: 0, End: 10, Sum: 11, Count: 3}, "b": {K: "b", Start: 0, End: 10, Sum: 10, Count: 1}}
	if len(got) != 2 {
		t.Fatalf("finals %+v, want %+v", got, want)
	}
	for _, f := range got {
		if want[f.K] != f {
			t.Fatalf("final %+v, want %+v", f, want[f.K])
		}
	}
	r, ok, _ = wt.Get(ctx, "a", grouptest.WBase)
	if !ok || !r.Final || r.Value.Sum != 11 {
		t.Fatalf("a [0,10) after close = %+v, %v; want final Sum 11", r, ok)
	}
	rs, err := wt.Range(ctx, "a", grouptest.WBase, grouptest.WBase.Add(time.Minute))
	if err != nil || len(rs) != 2 || rs[1].Value.Sum != 4 || rs[1].Final {
		t.Fatalf("a's windows = %+v, %v; want [0,10) and open [10,20) Sum 4", rs, err)
	}
}
