package proptest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// The lookup topology: customers' tiers come from a source of their own;
// orders read them (another input: any key of the partition) and read the
// limit their own source sets (same input: the own key only, ordered by the
// limit's Acquire fence).

type tierSet struct {
	K    uint64 `json:"k"`
	Tier int64  `json:"tier"`
}

type limitSet struct {
	K     uint64 `json:"k"`
	Limit int64  `json:"limit"`
}

type orderMade struct {
	K   uint64 `json:"k"`
	Ref uint64 `json:"ref"` // another key of the same partition
	Amt int64  `json:"amt"`
	Seq int    `json:"seq"`
}

type tierRow struct {
	Tier int64 `json:"tier"`
}

type limitRow struct {
	Limit int64 `json:"limit"`
}

type totalRow struct {
	Sum    int64 `json:"sum"`
	Capped int64 `json:"capped"`
	N      int   `json:"n"`
}

type enrichedOrder struct {
	K       uint64 `json:"k"`
	Seq     int    `json:"seq"`
	Tier    int64  `json:"tier"`
	RefTier int64  `json:"ref_tier"`
	Limit   int64  `json:"limit"`
	Found   bool   `json:"found"`
}

const (
	tiersTopic    = "lk/tiers"
	ordersTopic   = "lk/orders"
	enrichedTopic = "lk/enriched"
)

type lookupTopo struct {
	topo     *topology.Topology
	tierSet  *stream.Event[uint64, tierSet]
	limitSet *stream.Event[uint64, limitSet]
	order    *stream.Event[uint64, orderMade]
	enriched *stream.Event[uint64, enrichedOrder]
	tiers    *topology.Table[uint64, tierRow]
	limits   *topology.Table[uint64, limitRow]
	totals   *topology.Table[uint64, totalRow]
}

func newLookupTopo() *lookupTopo {
	l := &lookupTopo{topo: topology.New("lk")}
	l.tierSet = stream.DeclareFunc[uint64](1, func(e tierSet) uint64 { return e.K })
	l.limitSet = stream.DeclareFunc[uint64](1, func(e limitSet) uint64 { return e.K }, stream.WithFence(planner.Acquire))
	l.order = stream.DeclareFunc[uint64](2, func(e orderMade) uint64 { return e.K })
	l.enriched = stream.DeclareFunc[uint64](3, func(e enrichedOrder) uint64 { return e.K })
	l.tiers = topology.NewTable[uint64, tierRow](l.topo, "tiers", stream.JSON[tierRow]())
	l.limits = topology.NewTable[uint64, limitRow](l.topo, "limits", stream.JSON[limitRow]())
	l.totals = topology.NewTable[uint64, totalRow](l.topo, "totals", stream.JSON[totalRow]())

	cust := topology.Source[uint64](l.topo, tiersTopic)
	topology.Project(topology.On(cust, l.tierSet), l.tiers, func(v *tierRow, e tierSet) error { v.Tier = e.Tier; return nil })
	ord := topology.Source[uint64](l.topo, ordersTopic)
	topology.Project(topology.On(ord, l.limitSet), l.limits, func(v *limitRow, e limitSet) error { v.Limit = e.Limit; return nil })
	orders := topology.On(ord, l.order).Reads(l.tiers, l.limits)
	see := func(ctx context.Context, e orderMade) (enrichedOrder, error) {
		own, found, err := topology.Lookup(ctx, l.tiers, e.K)
		if err != nil {
			return enrichedOrder{}, err
		}
		ref, _, err := topology.Lookup(ctx, l.tiers, e.Ref)
		if err != nil {
			return enrichedOrder{}, err
		}
		lim, _, err := topology.Lookup(ctx, l.limits, e.K)
		if err != nil {
			return enrichedOrder{}, err
		}
		return enrichedOrder{K: e.K, Seq: e.Seq, Tier: own.Tier, RefTier: ref.Tier, Limit: lim.Limit, Found: found}, nil
	}
	topology.ProjectContext(orders, l.totals, func(ctx context.Context, v *totalRow, e orderMade) error {
		en, err := see(ctx, e)
		if err != nil {
			return err
		}
		foldTotal(v, e, en)
		return nil
	})
	topology.To(orders, "enrich", enrichedTopic, l.enriched, func(ctx context.Context, _ uint64, e orderMade, emit func(enrichedOrder)) error {
		en, err := see(ctx, e)
		if err != nil {
			return err
		}
		emit(en)
		return nil
	})
	return l
}

func foldTotal(v *totalRow, e orderMade, en enrichedOrder) {
	v.Sum += e.Amt*(1+en.Tier) + en.RefTier
	v.Capped += min(e.Amt, en.Limit)
	v.N++
}

// lookupChunk is a run of events of one source, piped and committed before
// the next chunk is piped: the order in which the sources' batches take
// their writer turns.
type lookupChunk struct {
	tiers  []tierSet
	orders []any // limitSet or orderMade
}

// lookupWorkload draws chunks; refs of an order are keys of its partition.
func lookupWorkload(r *rand.Rand, d *topologytest.Driver, keys int) []lookupChunk {
	codec, _ := stream.DefaultKeyCodec[uint64]()
	part := func(k uint64) uint32 {
		b, _ := codec.Append(nil, k)
		return d.PartitionOf(b)
	}
	var chunks []lookupChunk
	seq := 0
	for range 4 + r.IntN(6) {
		var c lookupChunk
		n := 1 + r.IntN(12)
		if r.IntN(2) == 0 {
			for range n {
				c.tiers = append(c.tiers, tierSet{K: uint64(1 + r.IntN(keys)), Tier: int64(r.IntN(5))})
			}
		} else {
			for range n {
				k := uint64(1 + r.IntN(keys))
				if r.IntN(4) == 0 {
					c.orders = append(c.orders, limitSet{K: k, Limit: int64(r.IntN(100))})
					continue
				}
				var same []uint64
				for j := uint64(1); j <= uint64(keys)+3; j++ {
					if part(j) == part(k) {
						same = append(same, j)
					}
				}
				seq++
				c.orders = append(c.orders, orderMade{K: k, Ref: same[r.IntN(len(same))], Amt: int64(r.IntN(50)), Seq: seq})
			}
		}
		chunks = append(chunks, c)
	}
	return chunks
}

// lookupReference folds the chunks in order, each lookup seeing the tables
// as the sequential fold has them at its event.
func lookupReference(chunks []lookupChunk) (map[uint64]totalRow, []enrichedOrder) {
	tiers, limits, totals := map[uint64]int64{}, map[uint64]int64{}, map[uint64]totalRow{}
	var out []enrichedOrder
	for _, c := range chunks {
		for _, e := range c.tiers {
			tiers[e.K] = e.Tier
		}
		for _, x := range c.orders {
			switch e := x.(type) {
			case limitSet:
				limits[e.K] = e.Limit
			case orderMade:
				_, found := tiers[e.K]
				en := enrichedOrder{K: e.K, Seq: e.Seq, Tier: tiers[e.K], RefTier: tiers[e.Ref], Limit: limits[e.K], Found: found}
				v := totals[e.K]
				foldTotal(&v, e, en)
				totals[e.K] = v
				out = append(out, en)
			}
		}
	}
	return totals, out
}

// TestPropertyLookups runs random chunks of both sources under random
// batchings, partition counts and restarts, and compares the folded table
// and what To published with the sequential reference.
func TestPropertyLookups(t *testing.T) {
	t.Parallel() // see parallel_test.go
	seeds := uint64(6)
	if os.Getenv("STRAND_SOAK") != "" {
		seeds = 100
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 32))
			l := newLookupTopo()
			d := topologytest.NewDriver(t, l.topo, topologytest.WithPartitions(uint32(1+r.IntN(3))),
				topologytest.WithBatchSizes(func() int { return 1 + r.IntN(6) }))
			chunks := lookupWorkload(r, d, 6)
			for _, c := range chunks {
				topologytest.PipeTo(d, tiersTopic, l.tierSet, c.tiers...)
				for _, x := range c.orders {
					switch e := x.(type) {
					case limitSet:
						topologytest.PipeTo(d, ordersTopic, l.limitSet, e)
					case orderMade:
						topologytest.PipeTo(d, ordersTopic, l.order, e)
					}
				}
				if r.IntN(3) == 0 {
					d.Step()
					d.Restart()
				}
				d.Advance()
			}
			want, wantOut := lookupReference(chunks)
			checkTotals(t, l, want)
			if dl := d.DeadLetters(); len(dl) > 0 {
				t.Fatalf("dead letters: %v", dl[0].Err)
			}
			got := topologytest.Outputs(d, enrichedTopic, l.enriched)
			bySeq := map[int]enrichedOrder{}
			for _, g := range got {
				if prev, dup := bySeq[g.Seq]; dup && prev != g {
					t.Errorf("order %d published twice, differently: %+v and %+v", g.Seq, prev, g)
				}
				bySeq[g.Seq] = g
			}
			if len(bySeq) != len(wantOut) {
				t.Errorf("%d enriched orders published, want %d", len(bySeq), len(wantOut))
			}
			for _, w := range wantOut {
				if g := bySeq[w.Seq]; g != w {
					t.Errorf("enriched order %d = %+v, want %+v", w.Seq, g, w)
				}
			}
		})
	}
}

func checkTotals(t *testing.T, l *lookupTopo, want map[uint64]totalRow) {
	t.Helper()
	n := 0
	if err := l.totals.Scan(context.Background(), func(k uint64, v totalRow) bool {
		n++
		if w := want[k]; v != w {
			t.Errorf("totals[%d] = %+v, want %+v", k, v, w)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("%d totals, want %d", n, len(want))
	}
}

// TestLookupMisuseIsDeadLettered: a key of another partition, another key
// of a table the reader's own input writes, and an undeclared table fail
// their event for good, with an error that names the problem.
func TestLookupMisuseIsDeadLettered(t *testing.T) {
	l := &lookupTopo{topo: topology.New("lk")}
	l.tierSet = stream.DeclareFunc[uint64](1, func(e tierSet) uint64 { return e.K })
	l.limitSet = stream.DeclareFunc[uint64](1, func(e limitSet) uint64 { return e.K }, stream.WithFence(planner.Acquire))
	l.order = stream.DeclareFunc[uint64](2, func(e orderMade) uint64 { return e.K })
	l.tiers = topology.NewTable[uint64, tierRow](l.topo, "tiers", stream.JSON[tierRow]())
	l.limits = topology.NewTable[uint64, limitRow](l.topo, "limits", stream.JSON[limitRow]())
	l.totals = topology.NewTable[uint64, totalRow](l.topo, "totals", stream.JSON[totalRow]())
	undeclared := topology.NewTable[uint64, totalRow](l.topo, "undeclared", stream.JSON[totalRow]())
	cust := topology.Source[uint64](l.topo, tiersTopic)
	topology.Project(topology.On(cust, l.tierSet), l.tiers, func(v *tierRow, e tierSet) error { v.Tier = e.Tier; return nil })
	topology.Project(topology.On(cust, l.tierSet), undeclared, func(v *totalRow, e tierSet) error { v.N++; return nil })
	ord := topology.Source[uint64](l.topo, ordersTopic)
	topology.Project(topology.On(ord, l.limitSet), l.limits, func(v *limitRow, e limitSet) error { v.Limit = e.Limit; return nil })
	topology.ProjectContext(topology.On(ord, l.order).Reads(l.tiers, l.limits), l.totals, func(ctx context.Context, v *totalRow, e orderMade) error {
		var err error
		switch e.Seq {
		case 1: // another partition
			_, _, err = topology.Lookup(ctx, l.tiers, e.Ref)
		case 2: // another key of a table the own input writes
			_, _, err = topology.Lookup(ctx, l.limits, e.Ref)
		case 3:
			_, _, err = topology.Lookup(ctx, undeclared, e.K)
		case 4:
			_, _, err = topology.Lookup(context.Background(), l.tiers, e.K)
		}
		if err != nil {
			return err
		}
		v.N++
		return nil
	})
	d := topologytest.NewDriver(t, l.topo, topologytest.WithPartitions(4))
	codec, _ := stream.DefaultKeyCodec[uint64]()
	part := func(k uint64) uint32 { b, _ := codec.Append(nil, k); return d.PartitionOf(b) }
	other := uint64(2)
	for part(other) == part(1) {
		other++
	}
	same := uint64(2)
	for part(same) != part(1) || same == 1 {
		same++
	}
	topologytest.PipeTo(d, ordersTopic, l.order,
		orderMade{K: 1, Ref: other, Seq: 1}, orderMade{K: 1, Ref: same, Seq: 2},
		orderMade{K: 1, Seq: 3}, orderMade{K: 1, Seq: 4}, orderMade{K: 1, Ref: same, Seq: 5})
	d.Advance()
	dl := d.DeadLetters()
	if len(dl) != 4 {
		t.Fatalf("%d dead letters, want 4", len(dl))
	}
	wants := []struct {
		err  error
		text string
	}{
		{topology.ErrLookupKey, "partition"},
		{topology.ErrLookupKey, "own key"},
		{topology.ErrLookupUndeclared, "Reads"},
		{topology.ErrLookupContext, "context"},
	}
	for i, w := range wants {
		if dl[i].Reason != deadletter.ReasonPermanent || dl[i].Err == nil || !strings.Contains(dl[i].Err.Error(), w.text) || !strings.Contains(dl[i].Err.Error(), w.err.Error()) {
			t.Errorf("dead letter %d: %v %q, want permanent naming %q (%v)", i, dl[i].Reason, dl[i].Err, w.text, w.err)
		}
	}
	if v, _, _ := l.totals.Get(context.Background(), 1); v.N != 1 {
		t.Errorf("totals[1].N = %d, want 1 (the good order)", v.N)
	}
}

// TestLookupBuildRefuses: the shapes a lookup cannot make exact are
// refused at Build, naming the problem.
func TestLookupBuildRefuses(t *testing.T) {
	relaxed := func() (*topology.Topology, *topology.Stream[uint64, orderMade], *topology.Table[uint64, limitRow], *topology.Table[uint64, totalRow]) {
		topo := topology.New("lk")
		lim := stream.DeclareFunc[uint64](1, func(e limitSet) uint64 { return e.K })
		ord := stream.DeclareFunc[uint64](2, func(e orderMade) uint64 { return e.K })
		limits := topology.NewTable[uint64, limitRow](topo, "limits", stream.JSON[limitRow]())
		totals := topology.NewTable[uint64, totalRow](topo, "totals", stream.JSON[totalRow]())
		src := topology.Source[uint64](topo, ordersTopic)
		topology.Project(topology.On(src, lim), limits, func(v *limitRow, e limitSet) error { return nil })
		return topo, topology.On(src, ord), limits, totals
	}
	fold := func(ctx context.Context, v *totalRow, e orderMade) error { return nil }
	cases := []buildRefusal{
		{"both relaxed", func() *topology.Topology {
			topo, s, limits, totals := relaxed()
			topology.ProjectContext(s.Reads(limits), totals, fold)
			return topo
		}, "both may be Relaxed"},
		{"own table", func() *topology.Topology {
			topo, s, _, totals := relaxed()
			topology.ProjectContext(s.Reads(totals), totals, fold)
			return topo
		}, "projects into it"},
		{"nothing writes it", func() *topology.Topology {
			topo, s, _, totals := relaxed()
			empty := topology.NewTable[uint64, limitRow](topo, "empty", stream.JSON[limitRow]())
			topology.ProjectContext(s.Reads(empty), totals, fold)
			return topo
		}, "no projection of the topology writes"},
		{"another topology's table", func() *topology.Topology {
			topo, s, _, totals := relaxed()
			foreign := topology.NewTable[uint64, limitRow](topology.New("other"), "x", stream.JSON[limitRow]())
			topology.ProjectContext(s.Reads(foreign), totals, fold)
			return topo
		}, "not made with topology.NewTable on this topology"},
	}
	checkBuildRefusals(t, cases)
}
