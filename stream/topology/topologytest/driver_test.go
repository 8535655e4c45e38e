package topologytest_test

import (
	"context"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

func TestMain(m *testing.M) { testrun.Verify(m) }

// The in-memory topics report their end offsets (what Step handed out), so
// App.WaitCaughtUp and the lag work under the driver as on Iggy.
func TestWaitCaughtUpUnderTheDriver(t *testing.T) {
	visits := stream.DeclareFunc(1, func(v Visit) string { return v.Page })
	topo := topology.New("caught-up")
	src := topology.Source[string](topo, "web/visits")
	counts := topology.NewTable[string, int](topo, "counts", stream.JSON[int]())
	topology.Project(topology.On(src, visits), counts, func(n *int, v Visit) error { *n++; return nil })
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(3), topologytest.WithBatchSize(2))
	for i := range 10 {
		topologytest.Pipe(d, visits, Visit{Page: string(rune('a' + i%4)), N: i})
	}
	d.Step()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.App().WaitCaughtUp(ctx); err != nil {
		t.Fatalf("WaitCaughtUp after a Step: %v", err)
	}
	d.Advance()
	if err := d.App().WaitCaughtUp(ctx); err != nil {
		t.Fatalf("WaitCaughtUp after Advance: %v", err)
	}
	if d.Lag() != 0 {
		t.Fatalf("lag %d", d.Lag())
	}
	total := 0
	for _, p := range []string{"a", "b", "c", "d"} {
		n, _, _ := counts.Get(ctx, p)
		total += n
	}
	if total != 10 {
		t.Fatalf("counted %d visits, want 10", total)
	}
}

// Broker gives the test the in-memory topics: what was piped is there, and
// records a test appends through it are handed out by Step like piped ones.
func TestBrokerIsTheDriversConnector(t *testing.T) {
	visits := stream.DeclareFunc(1, func(v Visit) string { return v.Page })
	topo := topology.New("broker")
	src := topology.Source[string](topo, "web/visits")
	counts := topology.NewTable[string, int](topo, "counts", stream.JSON[int]())
	topology.Project(topology.On(src, visits), counts, func(n *int, v Visit) error { *n++; return nil })
	d := topologytest.NewDriver(t, topo)
	topologytest.Pipe(d, visits, Visit{Page: "a"})
	top := d.Broker().Topic("web/visits")
	if top == nil {
		t.Fatal("Broker has no topic web/visits")
	}
	recs := top.Records(0)
	if len(recs) != 1 {
		t.Fatalf("the broker's topic holds %d records, want the 1 piped", len(recs))
	}
	recs[0].Offset = 0
	if _, err := top.Append(0, recs[0]); err != nil { // the same visit again, through the broker
		t.Fatal(err)
	}
	d.Advance()
	if n, _, err := counts.Get(context.Background(), "a"); err != nil || n != 2 {
		t.Fatalf("count of a = %d, %v; want 2 (one piped, one appended through Broker)", n, err)
	}
}
