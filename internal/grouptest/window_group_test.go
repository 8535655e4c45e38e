package grouptest

import (
	"context"
	"fmt"
	"math"
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
	const parts, keys, events = 2, 16, 1200
	_, cl, pub := WindowBroker(t, parts)
	clock := &manualClock{now: WBase}
	start := func(name, dir string) (*instance, *topology.WindowTable[string, WAgg]) {
		topo, wt := WTopology(topology.Tumbling(30*time.Second), topology.WithGrace(5*time.Second), topology.WithIdleness(time.Minute))
		app, err := topology.Open(ctx, topo, cl, dir, topology.WithGroup(cl.Group("w", iggy.WithSessionTimeout(2*time.Second))),
			topology.WithClock(clock), topology.WithSnapshotEvery(2), topology.WithLogger(testLogger(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		return runInstance(t, name, dir, app), wt
	}
	log := make([]WEv, events)
	for i := range log {
		log[i] = WEv{K: fmt.Sprintf("key-%d", (i*7)%keys), At: int64(i / 4), N: int64(1 + i%7), Seq: i}
	}

	PublishWindows(t, pub, log[:events/3])
	a, _ := start("a", t.TempDir())
	settled(t, parts, a)
	b, wtB := start("b", t.TempDir())
	defer b.close(t)
	settled(t, parts, a, b) // a partition moved to b
	PublishWindows(t, pub, log[events/3:2*events/3])
	settled(t, parts, a, b)
	a.close(t) // its partition moves to b
	PublishWindows(t, pub, log[2*events/3:])
	settled(t, parts, b)
	clock.advance(2 * time.Hour) // idle: every window closes on b

	want, nWindows := WindowReference(log, math.MaxInt64)
	waitUntil(t, "every window's final result", 30*time.Second, func() bool { return len(readFinals(t, cl, parts, 10*nWindows)) >= nWindows })
	CheckFinalsOnce(t, cl, parts, want, nWindows)
	for k, ws := range want {
		rs, err := wtB.Range(ctx, k, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != len(ws) {
			t.Errorf("%s: %d windows on b, want %d", k, len(rs), len(ws))
		}
		for _, r := range rs {
			if w := ws[WSec(r.Start)]; r.Value != w || !r.Final {
				t.Errorf("%s window at %ds = %+v, final %v; want %+v, final", k, WSec(r.Start), r.Value, r.Final, w)
			}
		}
	}
}
