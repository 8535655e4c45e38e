package proptest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// Table-table joins: L from source A, R from source B, S from source A
// (another type); inner = L ⋈ R, left = L ⟕ S.

type sideSet struct {
	K   uint64 `json:"k"`
	Add int64  `json:"add"`
	Del bool   `json:"del"` // marks the row "gone": the fold zeroes it
}

type sideRow struct {
	Sum  int64   `json:"sum"`
	Hist []int64 `json:"hist"` // a slice, so the join must copy
}

type pairRow struct {
	L, R  int64
	N     int
	Found bool
}

func pair(l, r sideRow, found bool) pairRow {
	return pairRow{L: l.Sum, R: r.Sum, N: len(l.Hist) + len(r.Hist), Found: found}
}

type tableJoin struct {
	topo        *topology.Topology
	a1, a2, b1  *stream.Event[uint64, sideSet]
	l, r, s     *topology.Table[uint64, sideRow]
	inner, left *topology.Table[uint64, pairRow]
}

func foldSide(v *sideRow, e sideSet) error {
	v.Sum += e.Add
	v.Hist = append(v.Hist, e.Add)
	return nil
}

func newTableJoin() *tableJoin { return newTableJoinDeleting(false) }

// foldSideDeleting is foldSide for a ProjectContext fold: an event with
// Del removes the row (topology.Delete), which the joins must follow.
func foldSideDeleting(ctx context.Context, v *sideRow, e sideSet) error {
	if e.Del {
		return topology.Delete(ctx)
	}
	return foldSide(v, e)
}

// newTableJoinDeleting is newTableJoin whose sides L, R and S are written
// by folds that delete their row on an event with Del when deleting.
func newTableJoinDeleting(deleting bool) *tableJoin {
	j := &tableJoin{topo: topology.New("tj")}
	j.a1 = stream.DeclareFunc[uint64](1, func(e sideSet) uint64 { return e.K })
	j.a2 = stream.DeclareFunc[uint64](2, func(e sideSet) uint64 { return e.K })
	j.b1 = stream.DeclareFunc[uint64](1, func(e sideSet) uint64 { return e.K })
	j.l = topology.NewTable[uint64, sideRow](j.topo, "l", stream.JSON[sideRow]())
	j.r = topology.NewTable[uint64, sideRow](j.topo, "r", stream.JSON[sideRow]())
	j.s = topology.NewTable[uint64, sideRow](j.topo, "s", stream.JSON[sideRow]())
	a := topology.Source[uint64](j.topo, "tj/a")
	b := topology.Source[uint64](j.topo, "tj/b")
	if deleting {
		topology.ProjectContext(topology.On(a, j.a1), j.l, foldSideDeleting)
		topology.ProjectContext(topology.On(a, j.a2), j.s, foldSideDeleting)
		topology.ProjectContext(topology.On(b, j.b1), j.r, foldSideDeleting)
	} else {
		topology.Project(topology.On(a, j.a1), j.l, foldSide)
		topology.Project(topology.On(a, j.a2), j.s, foldSide)
		topology.Project(topology.On(b, j.b1), j.r, foldSide)
	}
	j.inner = topology.JoinTables(j.topo, "inner", j.l, j.r, topology.Inner, stream.JSON[pairRow](), pair)
	j.left = topology.JoinTables(j.topo, "left", j.l, j.s, topology.Left, stream.JSON[pairRow](), pair)
	return j
}

func scanRows[V any](t *testing.T, tab *topology.Table[uint64, V]) map[uint64]V {
	t.Helper()
	out := map[uint64]V{}
	if err := tab.Scan(context.Background(), func(k uint64, v V) bool { out[k] = v; return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkJoined checks, against the committed state, that the join tables
// hold exactly the join of their sides' rows, and the sides the reference.
func (j *tableJoin) check(t *testing.T, want map[string]map[uint64]sideRow) {
	t.Helper()
	l, r, s := scanRows(t, j.l), scanRows(t, j.r), scanRows(t, j.s)
	for name, got := range map[string]map[uint64]sideRow{"l": l, "r": r, "s": s} {
		if len(got) != len(want[name]) {
			t.Errorf("table %s has %d rows, want %d", name, len(got), len(want[name]))
		}
		for k, w := range want[name] {
			if g := got[k]; g.Sum != w.Sum || len(g.Hist) != len(w.Hist) {
				t.Errorf("%s[%d] = %+v, want %+v", name, k, g, w)
			}
		}
	}
	wantInner, wantLeft := map[uint64]pairRow{}, map[uint64]pairRow{}
	for k, lv := range l {
		if rv, ok := r[k]; ok {
			wantInner[k] = pair(lv, rv, true)
		}
		sv, ok := s[k]
		wantLeft[k] = pair(lv, sv, ok)
	}
	for name, c := range map[string][2]map[uint64]pairRow{"inner": {scanRows(t, j.inner), wantInner}, "left": {scanRows(t, j.left), wantLeft}} {
		got, want := c[0], c[1]
		if len(got) != len(want) {
			t.Errorf("join %s has %d rows, want %d: %v vs %v", name, len(got), len(want), got, want)
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || g != w {
				t.Errorf("join %s[%d] = %+v (%v), want %+v", name, k, g, ok, w)
			}
		}
	}
}

// TestPropertyTableJoin: after every step, under random batchings,
// partition counts, interleavings of the two sources and restarts, each
// join table holds exactly the join of its sides.
func TestPropertyTableJoin(t *testing.T) {
	t.Parallel() // see parallel_test.go
	propertyTableJoin(t, false)
}

// TestPropertyTableJoinWithDeletes: the same with sides written by
// ProjectContext folds that delete their rows now and then; a join row
// follows its sides' deletes in the same commit.
func TestPropertyTableJoinWithDeletes(t *testing.T) {
	t.Parallel() // see parallel_test.go
	propertyTableJoin(t, true)
}

func propertyTableJoin(t *testing.T, deleting bool) {
	seeds := uint64(5)
	if os.Getenv("STRAND_SOAK") != "" {
		seeds = 100
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 17))
			j := newTableJoinDeleting(deleting)
			d := topologytest.NewDriver(t, j.topo, topologytest.WithPartitions(uint32(1+r.IntN(3))),
				topologytest.WithBatchSizes(func() int { return 1 + r.IntN(5) }))
			want := map[string]map[uint64]sideRow{"l": {}, "r": {}, "s": {}}
			apply := func(name string, e sideSet) {
				if e.Del {
					delete(want[name], e.K)
					return
				}
				v := want[name][e.K]
				_ = foldSide(&v, e)
				want[name][e.K] = v
			}
			for round := range 6 {
				for range 1 + r.IntN(15) {
					e := sideSet{K: uint64(1 + r.IntN(8)), Add: int64(r.IntN(9)), Del: deleting && r.IntN(5) == 0}
					switch r.IntN(3) {
					case 0:
						topologytest.PipeTo(d, "tj/a", j.a1, e)
						apply("l", e)
					case 1:
						topologytest.PipeTo(d, "tj/a", j.a2, e)
						apply("s", e)
					default:
						topologytest.PipeTo(d, "tj/b", j.b1, e)
						apply("r", e)
					}
				}
				if round%2 == 1 {
					d.Step()
					d.Restart()
				}
				d.Advance()
				j.check(t, want)
			}
		})
	}
}

// Stream-table joins: orders keyed by order, re-keyed by customer (a
// foreign-key join), joined with the customers' tiers (left: spend per
// customer) and sent on enriched (inner) to a topic this topology reads
// back into enriched orders keyed by order.

type custSet struct {
	C    string `json:"c"`
	Tier int64  `json:"tier"`
}

type orderLine struct {
	Order uint64 `json:"order"`
	C     string `json:"c"`
	Amt   int64  `json:"amt"`
	Seq   int    `json:"seq"`
}

type spendRow struct {
	Total   int64 `json:"total"`
	Unknown int   `json:"unknown"` // lines folded before the customer had a tier
}

type enrichedLine struct {
	Order uint64 `json:"order"`
	Seq   int    `json:"seq"`
	Tier  int64  `json:"tier"`
	Amt   int64  `json:"amt"`
}

type enrichedRow struct {
	Lines []int `json:"lines"` // seqs, in applied order
	Value int64 `json:"value"`
}

type streamJoin struct {
	topo     *topology.Topology
	cust     *stream.Event[string, custSet]
	line     *stream.Event[uint64, orderLine]
	enriched *stream.Event[uint64, enrichedLine]
	tiers    *topology.Table[string, int64]
	spend    *topology.Table[string, spendRow]
	orders   *topology.Table[uint64, enrichedRow]
}

func newStreamJoin() *streamJoin {
	j := &streamJoin{topo: topology.New("sj")}
	j.cust = stream.DeclareFunc[string](1, func(e custSet) string { return e.C })
	j.line = stream.DeclareFunc[uint64](2, func(e orderLine) uint64 { return e.Order })
	j.enriched = stream.DeclareFunc[uint64](3, func(e enrichedLine) uint64 { return e.Order })
	j.tiers = topology.NewTable[string, int64](j.topo, "tiers", stream.JSON[int64]())
	j.spend = topology.NewTable[string, spendRow](j.topo, "spend", stream.JSON[spendRow]())
	j.orders = topology.NewTable[uint64, enrichedRow](j.topo, "orders", stream.JSON[enrichedRow]())
	topology.Project(topology.On(topology.Source[string](j.topo, "sj/customers"), j.cust), j.tiers,
		func(v *int64, e custSet) error { *v = e.Tier; return nil })
	lines := topology.On(topology.Source[uint64](j.topo, "sj/orders"), j.line)
	byCustomer := topology.KeyBy(lines, "by-customer", func(e orderLine) (string, error) { return e.C, nil })
	own := func(e orderLine) string { return e.C }
	topology.ProjectJoin(byCustomer, topology.JoinOn(j.tiers, own, topology.Left), j.spend,
		func(v *spendRow, e orderLine, tier int64, found bool) error {
			if !found {
				v.Unknown++
			}
			v.Total += e.Amt * (1 + tier)
			return nil
		})
	topology.ToJoin(byCustomer, topology.JoinOn(j.tiers, own, topology.Inner), "enrich", "sj/enriched", j.enriched,
		func(_ context.Context, _ string, e orderLine, tier int64, _ bool, emit func(enrichedLine)) error {
			emit(enrichedLine{Order: e.Order, Seq: e.Seq, Tier: tier, Amt: e.Amt})
			return nil
		})
	topology.Project(topology.On(topology.Source[uint64](j.topo, "sj/enriched"), j.enriched), j.orders,
		func(v *enrichedRow, e enrichedLine) error {
			v.Lines = append(v.Lines, e.Seq)
			v.Value += e.Amt * (1 + e.Tier)
			return nil
		})
	return j
}

// TestPropertyStreamJoin: chunks of customers and of order lines, under
// random batchings, partition counts and restarts, against a sequential
// reference in which each line sees the tiers of its chunk.
func TestPropertyStreamJoin(t *testing.T) {
	t.Parallel() // see parallel_test.go
	seeds := uint64(4)
	if os.Getenv("STRAND_SOAK") != "" {
		seeds = 60
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			j := newStreamJoin()
			d := topologytest.NewDriver(t, j.topo, topologytest.WithPartitions(uint32(1+r.IntN(3))),
				topologytest.WithBatchSizes(func() int { return 1 + r.IntN(5) }))
			tiers := map[string]int64{}
			spend := map[string]spendRow{}
			orders := map[uint64]enrichedRow{}
			owner := map[uint64]string{}
			seq := 0
			for range 6 {
				if r.IntN(2) == 0 {
					for range 1 + r.IntN(4) {
						e := custSet{C: fmt.Sprintf("c%d", r.IntN(5)), Tier: int64(r.IntN(4))}
						topologytest.PipeTo(d, "sj/customers", j.cust, e)
						tiers[e.C] = e.Tier
					}
				} else {
					for range 1 + r.IntN(10) {
						o := uint64(1 + r.IntN(6))
						if owner[o] == "" || r.IntN(5) == 0 {
							owner[o] = fmt.Sprintf("c%d", r.IntN(5))
						}
						seq++
						e := orderLine{Order: o, C: owner[o], Amt: int64(r.IntN(20)), Seq: seq}
						topologytest.PipeTo(d, "sj/orders", j.line, e)
						tier, found := tiers[e.C]
						sp := spend[e.C]
						if !found {
							sp.Unknown++
						}
						sp.Total += e.Amt * (1 + tier)
						spend[e.C] = sp
						if found {
							row := orders[o]
							row.Lines = append(row.Lines, e.Seq)
							row.Value += e.Amt * (1 + tier)
							orders[o] = row
						}
					}
				}
				if r.IntN(3) == 0 {
					d.Step()
					d.Restart()
				}
				d.Advance()
			}
			if dl := d.DeadLetters(); len(dl) > 0 {
				t.Fatalf("dead letters: %v", dl[0].Err)
			}
			gotSpend := map[string]spendRow{}
			if err := j.spend.Scan(context.Background(), func(k string, v spendRow) bool { gotSpend[k] = v; return true }); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(gotSpend) != fmt.Sprint(spend) {
				t.Errorf("spend = %v, want %v", gotSpend, spend)
			}
			got := scanRows(t, j.orders)
			if len(got) != len(orders) {
				t.Errorf("%d enriched orders, want %d", len(got), len(orders))
			}
			for o, w := range orders {
				// An order's lines may reach the enriched topic through
				// different customers' partitions when it changed hands:
				// compare them as a set, and the value.
				g := got[o]
				if g.Value != w.Value || fmt.Sprint(sortedInts(g.Lines)) != fmt.Sprint(sortedInts(w.Lines)) {
					t.Errorf("enriched order %d = %+v, want %+v", o, g, w)
				}
			}
		})
	}
}

func sortedInts(s []int) []int {
	out := append([]int(nil), s...)
	for i := range out {
		for k := i + 1; k < len(out); k++ {
			if out[k] < out[i] {
				out[i], out[k] = out[k], out[i]
			}
		}
	}
	return out
}

// TestJoinBuildRefuses: join shapes that cannot be kept exact are refused
// at Build.
func TestJoinBuildRefuses(t *testing.T) {
	base := func() (*topology.Topology, *tableJoin) {
		j := newTableJoin()
		return j.topo, j
	}
	cases := []buildRefusal{
		{"projected into", func() *topology.Topology {
			topo, j := base()
			topology.Project(topology.On(topology.Source[uint64](topo, "tj/c"), j.b1), j.inner, func(v *pairRow, e sideSet) error { return nil })
			return topo
		}, "written by its join alone"},
		{"join of joins", func() *topology.Topology {
			topo, j := base()
			topology.JoinTables(topo, "again", j.inner, j.s, topology.Inner, stream.JSON[int](), func(pairRow, sideRow, bool) int { return 0 })
			return topo
		}, "joins of joins"},
		{"one type writes both sides", func() *topology.Topology {
			topo := topology.New("tj")
			a1 := stream.DeclareFunc[uint64](1, func(e sideSet) uint64 { return e.K })
			l := topology.NewTable[uint64, sideRow](topo, "l", stream.JSON[sideRow]())
			r := topology.NewTable[uint64, sideRow](topo, "r", stream.JSON[sideRow]())
			s := topology.On(topology.Source[uint64](topo, "tj/a"), a1)
			topology.Project(s, l, foldSide)
			topology.Project(s, r, foldSide)
			topology.JoinTables(topo, "j", l, r, topology.Inner, stream.JSON[pairRow](), pair)
			return topo
		}, "projects into both"},
		{"bad kind", func() *topology.Topology {
			topo, j := base()
			topology.JoinTables(topo, "k", j.l, j.r, topology.JoinKind(9), stream.JSON[pairRow](), pair)
			return topo
		}, "unknown join kind"},
		{"self join", func() *topology.Topology {
			topo, j := base()
			topology.JoinTables(topo, "k", j.l, j.l, topology.Inner, stream.JSON[pairRow](), pair)
			return topo
		}, "with itself"},
		{"stream join nil key", func() *topology.Topology {
			topo, j := base()
			topology.ProjectJoin(topology.On(topology.Source[uint64](topo, "tj/b"), j.b1), topology.JoinOn[sideSet, uint64, sideRow](j.l, nil, topology.Left), j.r,
				func(*sideRow, sideSet, sideRow, bool) error { return nil })
			return topo
		}, "nil key function"},
	}
	checkBuildRefusals(t, cases)
}
