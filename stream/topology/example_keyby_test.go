package topology_test

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

type Sale struct {
	Order    uint64 `json:"order"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

type Receipt struct {
	Order  uint64 `json:"order"`
	Amount int64  `json:"amount"`
}

// ExampleKeyBy keeps two read models of one topic of sales keyed by order:
// totals per order, straight from the topic, and totals per customer, fed
// through KeyBy (a repartition topic the topology owns); To publishes a
// receipt per sale, exactly once.
func ExampleKeyBy() {
	tb := &exampleTB{}
	defer tb.done()
	sales := stream.DeclareFunc[uint64](1, func(s Sale) uint64 { return s.Order })
	receipts := stream.DeclareFunc[uint64](2, func(r Receipt) uint64 { return r.Order })

	t := topology.New("shop")
	src := topology.Source[uint64](t, "shop/sales")
	byOrder := topology.NewTable[uint64, int64](t, "orders", stream.JSON[int64]())
	byCustomer := topology.NewTable[string, int64](t, "customers", stream.JSON[int64]())

	s := topology.On(src, sales)
	topology.Project(s, byOrder, func(total *int64, e Sale) error { *total += e.Amount; return nil })
	topology.To(s, "receipts", "shop/receipts", receipts, func(_ context.Context, order uint64, e Sale, emit func(Receipt)) error {
		emit(Receipt{Order: order, Amount: e.Amount})
		return nil
	})
	customers := topology.KeyBy(s, "by-customer", func(e Sale) (string, error) { return e.Customer, nil })
	topology.Project(customers, byCustomer, func(total *int64, e Sale) error { *total += e.Amount; return nil })

	d := topologytest.NewDriver(tb, t, topologytest.WithPartitions(2))
	topologytest.Pipe(d, sales, Sale{1, "ada", 10}, Sale{2, "bob", 5}, Sale{1, "ada", 7}, Sale{3, "ada", 1})
	d.Advance()

	ctx := context.Background()
	order1, _, _ := byOrder.Get(ctx, 1)
	ada, _, _ := byCustomer.Get(ctx, "ada")
	bob, _, _ := byCustomer.Get(ctx, "bob")
	fmt.Println("order 1:", order1, "ada:", ada, "bob:", bob)
	fmt.Println("receipts:", len(topologytest.Outputs(d, "shop/receipts", receipts)))
	fmt.Println("repartition topic:", d.App().Stats()[1].Source)
	// Output:
	// order 1: 17 ada: 18 bob: 5
	// receipts: 4
	// repartition topic: shop/shop-by-customer-repartition
}
