package topology_test

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

type Registered struct {
	Customer string `json:"customer"`
	Country  string `json:"country"`
}

type Paid struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

type Spend struct {
	Total    int64  `json:"total"`
	Domestic int64  `json:"domestic"`
	Country  string `json:"country"`
}

// ExampleLookup folds payments into spend per customer, reading the
// customer's country from a table another topic feeds (a lookup), and keeps
// a table-table join of the spend with the customers' registrations.
func ExampleLookup() {
	tb := &exampleTB{}
	defer tb.done()
	registered := stream.DeclareFunc[string](1, func(r Registered) string { return r.Customer })
	paid := stream.DeclareFunc[string](1, func(p Paid) string { return p.Customer })

	t := topology.New("payments")
	customers := topology.NewTable[string, Registered](t, "customers", stream.JSON[Registered]())
	spend := topology.NewTable[string, Spend](t, "spend", stream.JSON[Spend]())
	topology.Project(topology.On(topology.Source[string](t, "pay/customers"), registered), customers,
		func(c *Registered, e Registered) error { *c = e; return nil })
	payments := topology.On(topology.Source[string](t, "pay/payments"), paid).Reads(customers)
	topology.ProjectContext(payments, spend, func(ctx context.Context, s *Spend, e Paid) error {
		c, found, err := topology.Lookup(ctx, customers, e.Customer)
		if err != nil {
			return err
		}
		s.Total += e.Amount
		if found && c.Country == "NL" {
			s.Domestic += e.Amount
		}
		return nil
	})
	// Kept in the same commits as its sides: a row while both have one.
	both := topology.JoinTables(t, "spend-by-country", spend, customers, topology.Inner, stream.JSON[Spend](),
		func(s Spend, c Registered, _ bool) Spend { s.Country = c.Country; return s })

	d := topologytest.NewDriver(tb, t, topologytest.WithPartitions(2))
	topologytest.PipeTo(d, "pay/customers", registered, Registered{"ada", "NL"}, Registered{"bob", "BE"})
	d.Advance() // the customers first: nothing orders two inputs
	topologytest.PipeTo(d, "pay/payments", paid, Paid{"ada", 10}, Paid{"bob", 5}, Paid{"ada", 7}, Paid{"cy", 1})
	d.Advance()

	ctx := context.Background()
	ada, _, _ := spend.Get(ctx, "ada")
	bob, _, _ := spend.Get(ctx, "bob")
	j, _, _ := both.Get(ctx, "ada")
	_, cy, _ := both.Get(ctx, "cy")
	fmt.Println("ada:", ada.Total, ada.Domestic, "bob:", bob.Total, bob.Domestic)
	fmt.Println("joined ada:", j.Total, j.Country, "cy joined:", cy)
	// Output:
	// ada: 17 17 bob: 5 0
	// joined ada: 17 NL cy joined: false
}
