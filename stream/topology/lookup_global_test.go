package topology_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// TestGlobalTable: an instance that processes partition 0 of its payments
// reads all partitions of the global rates topic and looks rates up at any
// key; a restart resumes the global source from its checkpoints, without
// replay.
func TestGlobalTable(t *testing.T) {
	topo := topology.New("global")
	rateDecl := stream.DeclareFunc[string](1, func(r grouptest.RateSet) string { return r.Currency })
	payDecl := stream.DeclareFunc[string](1, func(p grouptest.Payment) string { return p.Account })
	rates := topology.NewTable[string, int64](topo, "rates", stream.JSON[int64]())
	totals := topology.NewTable[string, int64](topo, "totals", stream.JSON[int64]())
	topology.Project(topology.On(topology.Source[string](topo, "g/rates").Global(), rateDecl), rates,
		func(v *int64, e grouptest.RateSet) error { *v = e.Rate; return nil })
	topology.ProjectContext(topology.On(topology.Source[string](topo, "g/payments"), payDecl).Reads(rates), totals,
		func(ctx context.Context, v *int64, e grouptest.Payment) error {
			r, ok, err := topology.Lookup(ctx, rates, e.Currency)
			if err != nil {
				return err
			}
			if !ok {
				return stream.Permanent(fmt.Errorf("no rate for %s", e.Currency))
			}
			*v += e.Amount * r
			return nil
		})
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2), topologytest.WithBatchSize(3),
		topologytest.WithOpenOptions(topology.WithPartitions(0)))
	codec, _ := stream.DefaultKeyCodec[string]()
	part := func(k string) uint32 { b, _ := codec.Append(nil, k); return d.PartitionOf(b) }
	var currencies []string
	seen := map[uint32]bool{}
	for i := 0; len(currencies) < 6; i++ {
		c := fmt.Sprintf("cur%d", i)
		currencies = append(currencies, c)
		seen[part(c)] = true
		topologytest.PipeTo(d, "g/rates", rateDecl, grouptest.RateSet{Currency: c, Rate: int64(i + 1)})
	}
	if !seen[1] {
		t.Fatal("no currency in partition 1; pick others")
	}
	d.Advance()
	var accounts []string
	for i := 0; len(accounts) < 4; i++ {
		if a := fmt.Sprintf("acct%d", i); part(a) == 0 {
			accounts = append(accounts, a)
		}
	}
	want := map[string]int64{}
	for i, a := range accounts {
		for j, c := range currencies {
			topologytest.PipeTo(d, "g/payments", payDecl, grouptest.Payment{Account: a, Currency: c, Amount: int64(i + j)})
			want[a] += int64(i+j) * int64(j+1)
		}
	}
	d.Advance()
	check := func() {
		t.Helper()
		for a, w := range want {
			if got, _, err := totals.Get(context.Background(), a); err != nil || got != w {
				t.Errorf("totals[%s] = %d (%v), want %d", a, got, err, w)
			}
		}
		if dl := d.DeadLetters(); len(dl) > 0 {
			t.Fatalf("dead letters: %v", dl[0].Err)
		}
	}
	check()
	d.Restart()
	d.Advance()
	for _, st := range d.App().Stats() {
		if st.Source == "g/rates" && st.Total.Applied != 0 {
			t.Errorf("the global source applied %d records again after a restart, want none (no replay)", st.Total.Applied)
		}
	}
	topologytest.PipeTo(d, "g/payments", payDecl, grouptest.Payment{Account: accounts[0], Currency: currencies[5], Amount: 1})
	want[accounts[0]] += 6
	d.Advance()
	check()
}

// TestGlobalBuildRefuses: a global source only feeds global tables.
func TestGlobalBuildRefuses(t *testing.T) {
	rateDecl := stream.DeclareFunc[string](1, func(r grouptest.RateSet) string { return r.Currency })
	for _, c := range []struct {
		name string
		make func(*topology.Topology)
		want string
	}{
		{"side effect", func(topo *topology.Topology) {
			topology.On(topology.Source[string](topo, "g/rates").Global(), rateDecl).ForEach("x", func(context.Context, string, []grouptest.RateSet) error { return nil })
		}, "once per instance"},
		{"mixed table", func(topo *topology.Topology) {
			tab := topology.NewTable[string, int64](topo, "rates", stream.JSON[int64]())
			fold := func(v *int64, e grouptest.RateSet) error { return nil }
			topology.Project(topology.On(topology.Source[string](topo, "g/rates").Global(), rateDecl), tab, fold)
			topology.Project(topology.On(topology.Source[string](topo, "g/local"), rateDecl), tab, fold)
		}, "global and non-global"},
	} {
		t.Run(c.name, func(t *testing.T) {
			topo := topology.New("global")
			c.make(topo)
			_, err := topo.Build()
			if err == nil || !errors.Is(err, topology.ErrBuild) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Build = %v, want a refusal naming %q", err, c.want)
			}
		})
	}
}
