package topology_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// TestGlobalLookupSeesEachCommit: lookups of a global table (served from
// the value cache of committed rows) see each commit of the global source
// at once, and a rate record whose fold fails (dead-lettered, never
// committed) changes nothing they see.
func TestGlobalLookupSeesEachCommit(t *testing.T) {
	topo := topology.New("global-cache")
	rateDecl := stream.DeclareFunc[string](1, func(r grouptest.RateSet) string { return r.Currency })
	payDecl := stream.DeclareFunc[string](1, func(p grouptest.Payment) string { return p.Account })
	rates := topology.NewTable[string, int64](topo, "rates", stream.JSON[int64]())
	totals := topology.NewTable[string, int64](topo, "totals", stream.JSON[int64]())
	errBadRate := errors.New("negative rate")
	topology.Project(topology.On(topology.Source[string](topo, "gc/rates").Global(), rateDecl), rates,
		func(v *int64, e grouptest.RateSet) error {
			if e.Rate < 0 {
				*v = e.Rate // changed in place, then refused: must not be seen
				return stream.Permanent(errBadRate)
			}
			*v = e.Rate
			return nil
		})
	topology.ProjectContext(topology.On(topology.Source[string](topo, "gc/payments"), payDecl).Reads(rates), totals,
		func(ctx context.Context, v *int64, e grouptest.Payment) error {
			r, ok, err := topology.Lookup(ctx, rates, e.Currency)
			if err != nil {
				return err
			}
			if !ok {
				r = 100 // no rate yet
			}
			*v += e.Amount * r
			return nil
		})
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2))
	var want int64
	pay := func(rate int64) {
		t.Helper()
		topologytest.PipeTo(d, "gc/payments", payDecl, grouptest.Payment{Account: "a", Currency: "eur", Amount: 1})
		d.Advance()
		want += rate
		if got, _, err := totals.Get(context.Background(), "a"); err != nil || got != want {
			t.Fatalf("total after a payment at rate %d = %d (%v), want %d", rate, got, err, want)
		}
	}
	setRate := func(rate int64) {
		topologytest.PipeTo(d, "gc/rates", rateDecl, grouptest.RateSet{Currency: "eur", Rate: rate})
		d.Advance()
	}
	pay(100)
	for _, r := range []int64{1, 2, 2, 5} {
		setRate(r)
		pay(r)
		pay(r) // the second lookup of the row, from the cache
	}
	setRate(-1)
	if dl := d.DeadLetters(); len(dl) != 1 || !strings.Contains(dl[0].Err.Error(), errBadRate.Error()) {
		t.Fatalf("dead letters after a bad rate: %v, want the one bad rate", dl)
	}
	pay(5)
	setRate(7)
	pay(7)
	d.Restart()
	pay(7)
	setRate(8)
	pay(8)
}
