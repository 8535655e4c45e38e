package topology_test

import (
	"context"
	"fmt"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

type Payment struct {
	Account string
	Amount  int64
	At      time.Time
}

type HourlyTotal struct {
	Account string
	Hour    string
	Sum     int64
}

var (
	Payments = stream.DeclareFunc(1, func(p Payment) string { return p.Account })
	Hourly   = stream.DeclareFunc(1, func(h HourlyTotal) string { return h.Account })
)

// Example_windows sums payments per account and hour of event time. An
// hour stays open for 10 minutes of grace; a payment after that is late
// and counted; each hour's final total is published once, when it closes.
// The partition is quiet after the last payment: WithIdleness lets its
// time move with the clock, so the last hour closes too.
func Example_windows() {
	tb := &exampleTB{}
	defer tb.done()
	t := topology.New("payments")
	src := topology.Source[string](t, "bank/payments")
	hourly := topology.NewWindowTable[string, int64](t, "hourly", topology.Tumbling(time.Hour), stream.JSON[int64](),
		topology.WithGrace(10*time.Minute), topology.WithIdleness(30*time.Minute))
	topology.Aggregate(topology.On(src, Payments), hourly,
		topology.EventTimeOf(func(p Payment) time.Time { return p.At }),
		func(sum *int64, p Payment) error { *sum += p.Amount; return nil })
	topology.EmitFinal(hourly, "bank/hourly", Hourly, func(acct string, w topology.Window, sum int64) HourlyTotal {
		return HourlyTotal{Account: acct, Hour: w.Start.UTC().Format("15:04"), Sum: sum}
	})

	d := topologytest.NewDriver(tb, t, topologytest.WithPartitions(1))
	h := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	topologytest.Pipe(d, Payments,
		Payment{"a", 10, h.Add(5 * time.Minute)},
		Payment{"a", 20, h.Add(50 * time.Minute)},
		Payment{"a", 5, h.Add(65 * time.Minute)},
		Payment{"a", 1, h.Add(55 * time.Minute)},  // out of order, within the grace
		Payment{"a", 7, h.Add(75 * time.Minute)},  // closes 09:00 (10:00 + 10 minutes)
		Payment{"a", 99, h.Add(30 * time.Minute)}) // late: 09:00 is closed
	d.Advance()
	ctx := context.Background()
	r, _, _ := hourly.Get(ctx, "a", h)
	fmt.Printf("09:00: %d, final %v\n", r.Value, r.Final)
	d.AdvanceClock(3 * time.Hour) // nothing comes: time moves on with the clock
	d.Advance()
	fmt.Println("finals", topologytest.Outputs(d, "bank/hourly", Hourly))
	var late uint64
	for _, st := range d.App().Stats() {
		late += st.Total.LateEvents
	}
	fmt.Println("late events:", late)
	// Output:
	// 09:00: 31, final true
	// finals [{a 09:00 31} {a 10:00 12}]
	// late events: 1
}
