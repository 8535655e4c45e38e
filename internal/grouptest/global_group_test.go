package grouptest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// gInstance is one App of a group with a global rates table.
type gInstance struct {
	*instance
	rates  *topology.Table[string, int64]
	totals *topology.Table[string, int64]
}

var (
	gRateDecl = stream.DeclareFunc[string](1, func(r RateSet) string { return r.Currency })
	gPayDecl  = stream.DeclareFunc[string](1, func(p Payment) string { return p.Account })
)

// globalGroupTopology: payments (4 partitions, shared by the group) are
// converted with the rate their currency has in the global rates table
// (3 partitions, read whole by every instance). A payment whose rate is
// missing counts a miss and fails (retried).
func globalGroupTopology(misses *atomic.Int64) (*topology.Topology, *topology.Table[string, int64], *topology.Table[string, int64]) {
	topo := topology.New("ggrp", topology.WithRetry(1000, 5*time.Millisecond, 50*time.Millisecond))
	rates := topology.NewTable[string, int64](topo, "rates", stream.JSON[int64]())
	totals := topology.NewTable[string, int64](topo, "totals", stream.JSON[int64]())
	topology.ProjectContext(topology.On(topology.Source[string](topo, "g/payments"), gPayDecl).Reads(rates), totals,
		func(ctx context.Context, v *int64, e Payment) error {
			r, ok, err := topology.Lookup(ctx, rates, e.Currency)
			if err != nil {
				return err
			}
			if !ok {
				misses.Add(1)
				return fmt.Errorf("no rate for %s yet", e.Currency)
			}
			*v += e.Amount * r
			return nil
		})
	topology.Project(topology.On(topology.Source[string](topo, "g/rates").Global(), gRateDecl), rates,
		func(v *int64, e RateSet) error { *v = e.Rate; return nil })
	return topo, rates, totals
}

func startGlobalInstance(t *testing.T, cl *iggy.Client, misses *atomic.Int64, name, dir string) *gInstance {
	t.Helper()
	topo, rates, totals := globalGroupTopology(misses)
	g := cl.Group("g", iggy.WithSessionTimeout(2*time.Second))
	app, err := topology.Open(context.Background(), topo, cl, dir, topology.WithGroup(g),
		topology.WithQueryAddr("instance-"+name), topology.WithSnapshotEvery(5), topology.WithLogger(testLogger(t, name)))
	if err != nil {
		t.Fatal(err)
	}
	return &gInstance{instance: runInstance(t, name, dir, app), rates: rates, totals: totals}
}

// gSettled waits until every payments partition is served by exactly one
// instance, evenly, and every instance caught up (its global source
// included).
func gSettled(t *testing.T, ins ...*gInstance) map[uint32]*gInstance {
	t.Helper()
	of := map[*instance]*gInstance{}
	base := make([]*instance, 0, len(ins))
	for _, in := range ins {
		of[in.instance] = in
		base = append(base, in.instance)
	}
	owner := map[uint32]*gInstance{}
	for p, in := range settled(t, 4, base...) {
		owner[p] = of[in]
	}
	return owner
}

func publishAll[E any](t *testing.T, cl *iggy.Client, topic string, decl *stream.Event[string, E], es ...E) {
	t.Helper()
	ctx := context.Background()
	pub, err := iggy.NewPublisher(ctx, cl, "g", topic)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close(ctx) }()
	for _, e := range es {
		if err := iggy.Publish(ctx, pub, decl, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestGlobalTableInAGroup: two instances of a group each keep the whole
// global rates table (its 3 partitions, whatever of the 4 payments
// partitions they own), in a store of their own that ownership moves and
// restarts leave alone; a restarted instance resumes the global source
// from its checkpoints (no replay); and no fold ever misses a rate that
// was in the topic when its partitions were assigned (the folds start once
// the global table caught up). Totals are checked against a reference on
// the instance serving each key, rates on every instance.
func TestGlobalTableInAGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := Broker(t)
	if err := cl.EnsureTopic(ctx, "g", "payments", 4); err != nil {
		t.Fatal(err)
	}
	if err := cl.EnsureTopic(ctx, "g", "rates", 3); err != nil {
		t.Fatal(err)
	}
	var misses atomic.Int64
	rates := map[string]int64{}
	setRates := func(from, to int, mult int64) {
		var es []RateSet
		for i := from; i < to; i++ {
			c := fmt.Sprintf("cur%d", i)
			rates[c] = int64(i+1) * mult
			es = append(es, RateSet{Currency: c, Rate: rates[c]})
		}
		publishAll(t, cl, "rates", gRateDecl, es...)
	}
	totals := map[string]int64{}
	pay := func(from, m, currencies int) {
		var es []Payment
		for i := from; i < from+m; i++ {
			p := Payment{Account: fmt.Sprintf("acct%d", i%40), Currency: fmt.Sprintf("cur%d", i%currencies), Amount: int64(i%7 + 1)}
			totals[p.Account] += p.Amount * rates[p.Currency]
			es = append(es, p)
		}
		publishAll(t, cl, "payments", gPayDecl, es...)
	}
	check := func(owner map[uint32]*gInstance, ins ...*gInstance) {
		t.Helper()
		for k, w := range totals {
			in := owner[connector.PartitionOf([]byte(k), 4)]
			if got, ok, err := in.totals.Get(ctx, k); err != nil || !ok || got != w {
				t.Errorf("totals[%s] on %s = %d, %v, %v; want %d", k, in.name, got, ok, err, w)
			}
		}
		for _, in := range ins {
			for c, w := range rates {
				if got, ok, err := in.rates.Get(ctx, c); err != nil || !ok || got != w {
					t.Errorf("rates[%s] on %s = %d, %v, %v; want %d", c, in.name, got, ok, err, w)
				}
			}
		}
	}

	setRates(0, 8, 1)
	pay(0, 300, 8)
	a := startGlobalInstance(t, cl, &misses, "a", t.TempDir())
	check(gSettled(t, a), a)

	// b joins: partitions move to it; it reads the whole rates topic itself.
	b := startGlobalInstance(t, cl, &misses, "b", t.TempDir())
	pay(300, 300, 8)
	owner := gSettled(t, a, b)
	check(owner, a, b)
	if _, err := os.Stat(filepath.Join(b.dir, topology.GlobalStoreDir)); err != nil {
		t.Errorf("b has no store of global tables: %v", err)
	}

	// a leaves (b takes everything), new currencies arrive, a comes back
	// with its store: its global source applies only what it missed.
	adir := a.dir
	a.close(t)
	pay(600, 200, 8)
	check(gSettled(t, b), b)
	setRates(8, 10, 1)
	a = startGlobalInstance(t, cl, &misses, "a", adir)
	owner = gSettled(t, a, b)
	pay(800, 300, 10)
	owner = gSettled(t, a, b)
	check(owner, a, b)
	for _, st := range a.app.Stats() {
		if st.Source == "g/rates" && st.Total.Applied != 2 {
			t.Errorf("a's global source applied %d records after its restart, want the 2 new ones (no replay)", st.Total.Applied)
		}
	}
	if n := misses.Load(); n != 0 {
		t.Errorf("folds missed a rate %d times, want none: they start once the global table caught up", n)
	}
	a.close(t)
	b.close(t)
}

// A group whose sources are all global is refused: nothing to share.
func TestGroupOfGlobalSourcesOnly(t *testing.T) {
	ctx := context.Background()
	cl := Broker(t)
	if err := cl.EnsureTopic(ctx, "g", "rates", 2); err != nil {
		t.Fatal(err)
	}
	topo := topology.New("onlyglobal")
	rates := topology.NewTable[string, int64](topo, "rates", stream.JSON[int64]())
	topology.Project(topology.On(topology.Source[string](topo, "g/rates").Global(), gRateDecl), rates,
		func(v *int64, e RateSet) error { *v = e.Rate; return nil })
	_, err := topology.Open(ctx, topo, cl, t.TempDir(), topology.WithGroup(cl.Group("g")))
	if err == nil || !strings.Contains(err.Error(), "every source is global") {
		t.Fatalf("Open = %v, want a refusal: every source is global", err)
	}
}
