package topology_test

import (
	"context"
	"fmt"
	"time"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

type Parcel struct {
	Where string
	Stuck bool
}

type ParcelScanned struct {
	ID    string
	Where string
	At    time.Time
}

type ParcelDelivered struct{ ID string }

type StuckAlert struct {
	ID    string
	Where string
}

var (
	Scanned = stream.DeclareFunc(1, func(e ParcelScanned) string { return e.ID })
	// A delivery is applied after every earlier scan of its parcel.
	Delivered = stream.DeclareFunc(2, func(e ParcelDelivered) string { return e.ID }, stream.WithFence(planner.Release))
	Alerts    = stream.DeclareFunc(1, func(a StuckAlert) string { return a.ID })
)

// Example_deletesAndTimers tracks parcels: a scan moves a parcel and sets
// its timer 48 hours later, a delivery deletes it (and its timer), and a
// timer that fires marks the parcel stuck and publishes an alert, exactly
// once. Rows not written for 30 days expire.
func Example_deletesAndTimers() {
	tb := &exampleTB{}
	defer tb.done()
	t := topology.New("parcels")
	src := topology.Source[string](t, "post/parcels")
	parcels := topology.NewTable[string, Parcel](t, "parcels", stream.JSON[Parcel](), topology.WithTTL(30*24*time.Hour))
	topology.ProjectContext(topology.On(src, Scanned), parcels, func(ctx context.Context, p *Parcel, e ParcelScanned) error {
		p.Where = e.Where
		return topology.Schedule(ctx, e.At.Add(48*time.Hour))
	})
	topology.ProjectContext(topology.On(src, Delivered), parcels, func(ctx context.Context, _ *Parcel, _ ParcelDelivered) error {
		return topology.Delete(ctx)
	})
	topology.OnTimerTo(src, parcels, "post/alerts", Alerts,
		func(_ context.Context, id string, p *Parcel, _ time.Time, emit func(StuckAlert)) error {
			p.Stuck = true
			emit(StuckAlert{ID: id, Where: p.Where})
			return nil
		})

	d := topologytest.NewDriver(tb, t, topologytest.WithPartitions(2))
	now := d.Now()
	topologytest.Pipe(d, Scanned, ParcelScanned{"p1", "depot", now}, ParcelScanned{"p2", "depot", now})
	topologytest.Pipe(d, Delivered, ParcelDelivered{"p2"})
	d.Advance()
	d.AdvanceClock(49 * time.Hour) // p1's timer fires
	d.Advance()

	ctx := context.Background()
	p1, _, _ := parcels.Get(ctx, "p1")
	_, found, _ := parcels.Get(ctx, "p2")
	fmt.Printf("p1 at %s, stuck %v; p2 found %v\n", p1.Where, p1.Stuck, found)
	fmt.Println("alerts", topologytest.Outputs(d, "post/alerts", Alerts))
	d.AdvanceClock(31 * 24 * time.Hour) // p1 expires
	d.Advance()
	_, found, _ = parcels.Get(ctx, "p1")
	fmt.Println("p1 found after 31 days:", found)
	// Output:
	// p1 at depot, stuck true; p2 found false
	// alerts [{p1 depot}]
	// p1 found after 31 days: false
}
