package topology_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream/topology"
)

// Windows move with their partitions (docs/design.md §18): instance a
// aggregates the first third of a log of rising event times, b joins (a
// partition moves to it, restored from the changelog), the second third
// flows to both, a leaves (its partition moves to b), the last third flows
// to b, and the clock passes the idleness so every window closes on b. At
// the end b's window table equals the reference (each window exact and
// final), and the output topic holds each window's final result exactly
// once, whichever instance closed it.
func TestGroupCarriesWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("group test in -short mode")
	}
	ctx := context.Background()
	cl := broker(t)
	const parts, keys, events = 2, 16, 1200
	for _, topic := range []string{"events", "finals"} {
		if err := cl.EnsureTopic(ctx, "w", topic, parts); err != nil {
			t.Fatal(err)
		}
	}
	clock := &manualClock{now: wBase}
	start := func(name, dir string) (*instance, *topology.WindowTable[string, wAgg]) {
		topo, wt := wTopology(topology.Tumbling(30*time.Second), topology.WithGrace(5*time.Second), topology.WithIdleness(time.Minute))
		app, err := topology.Open(ctx, topo, cl, dir, topology.WithGroup(cl.Group("w", iggy.WithSessionTimeout(2*time.Second))),
			topology.WithClock(clock), topology.WithSnapshotEvery(2), topology.WithLogger(testLogger(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		return runInstance(t, name, dir, app), wt
	}
	pub, err := iggy.NewPublisher(ctx, cl, "w", "events")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close(ctx) }()
	log := make([]wEv, events)
	for i := range log {
		log[i] = wEv{K: fmt.Sprintf("key-%d", (i*7)%keys), At: int64(i / 4), N: int64(1 + i%7), Seq: i}
	}
	publish := func(evs []wEv) {
		for _, e := range evs {
			if err := iggy.Publish(ctx, pub, wEvents, e); err != nil {
				t.Fatal(err)
			}
		}
		if err := pub.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	publish(log[:events/3])
	a, _ := start("a", t.TempDir())
	settled(t, parts, a)
	b, wtB := start("b", t.TempDir())
	defer b.close(t)
	settled(t, parts, a, b) // a partition moved to b
	publish(log[events/3 : 2*events/3])
	settled(t, parts, a, b)
	a.close(t) // its partition moves to b
	publish(log[2*events/3:])
	settled(t, parts, b)
	clock.advance(2 * time.Hour) // idle: every window closes on b

	want := map[string]map[int64]wAgg{}
	nWindows := 0
	for _, e := range log {
		if want[e.K] == nil {
			want[e.K] = map[int64]wAgg{}
		}
		s := e.At / 30 * 30
		a, ok := want[e.K][s]
		if !ok {
			nWindows++
		}
		a.Sum += e.N
		a.Count++
		want[e.K][s] = a
	}
	finals := func() []wFinal {
		var out []wFinal
		for p := range uint32(parts) {
			ms, err := cl.Read(ctx, "w", "finals", p, 0, 10*nWindows)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				var f wFinal
				if err := json.Unmarshal(m.Payload, &f); err != nil {
					t.Fatalf("final result %q: %v", m.Payload, err)
				}
				out = append(out, f)
			}
		}
		return out
	}
	waitFor(t, func() bool { return len(finals()) >= nWindows })
	got := map[[2]any]int{}
	for _, f := range finals() {
		got[[2]any{f.K, f.Start}]++
		if w, ok := want[f.K][f.Start]; !ok || f.Sum != w.Sum || f.Count != w.Count || f.End != f.Start+30 {
			t.Errorf("final result %+v; want %+v for [%d, %d)", f, w, f.Start, f.Start+30)
		}
	}
	for k, ws := range want {
		for s := range ws {
			if n := got[[2]any{k, s}]; n != 1 {
				t.Errorf("%s window at %ds: final result emitted %d times, want once", k, s, n)
			}
		}
		rs, err := wtB.Range(ctx, k, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != len(ws) {
			t.Errorf("%s: %d windows on b, want %d", k, len(rs), len(ws))
		}
		for _, r := range rs {
			if w := ws[wSec(r.Start)]; r.Value != w || !r.Final {
				t.Errorf("%s window at %ds = %+v, final %v; want %+v, final", k, wSec(r.Start), r.Value, r.Final, w)
			}
		}
	}
	if len(got) != nWindows {
		t.Errorf("%d distinct final results, want %d", len(got), nWindows)
	}
}
