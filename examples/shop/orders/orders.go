// Package orders is the domain of strand's shop example: orders keyed by
// order id, and two read models of them built by one topology
// (NewTopology):
//
//   - "orders" (keyed by OrderID): each order's customer, total and lines,
//     projected straight from the source topic;
//
//   - "customers" (keyed by CustomerID): each customer's order lines and
//     total spend, fed through topology.KeyBy, which re-keys the order
//     events by customer through a repartition topic the topology owns;
//
//   - "enriched-orders" (keyed by OrderID): each order with its customer's
//     profile (name, region), a foreign-key join: the lines re-keyed by
//     customer are joined with the "profiles" table (fed by the
//     customer-profiles topic) by topology.ToJoin, which publishes each
//     line enriched to the orders-enriched topic, read back by the same
//     topology and folded by order;
//
// and one output topic, "receipts", that topology.To publishes a Receipt
// to, exactly once, for every positive order line. Workload generates a
// seeded stream of order lines in which some orders change customer half
// way; Reference folds it sequentially, which is what every row and the
// receipts must equal.
package orders

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// Names of the example's Iggy stream and topics.
const (
	Stream        = "shop"
	Topic         = "orders"
	ReceiptsTopic = "receipts"
	DLQTopic      = "orders.dlq"
	// ProfilesTopic carries the customers' profiles, keyed by customer.
	ProfilesTopic = "customer-profiles"
	// EnrichedTopic carries the order lines joined with their customer's
	// profile, keyed by order: the ToJoin step publishes them, and the
	// topology reads them back into the enriched-orders table.
	EnrichedTopic = "orders-enriched"
)

// OrderID and CustomerID are the two keys.
type (
	OrderID    uint64
	CustomerID string
)

// Line is one order line: the event of the source topic, keyed by Order.
type Line struct {
	Order    OrderID    `json:"order"`
	Customer CustomerID `json:"customer"`
	Amount   int64      `json:"amount"`
	// N is the line's position in the workload (1-based), which the
	// checks use to see every line applied once and in order.
	N int `json:"n"`
}

// Receipt is what the receipts topic gets for a line of positive amount.
type Receipt struct {
	Order  OrderID `json:"order"`
	Amount int64   `json:"amount"`
	N      int     `json:"n"`
}

// Order is a row of the orders table.
type Order struct {
	Customer CustomerID `json:"customer"`
	Total    int64      `json:"total"`
	Lines    int        `json:"lines"`
}

// Customer is a row of the customers table.
type Customer struct {
	Lines int   `json:"lines"`
	Total int64 `json:"total"`
	// Sum is the sum of the positions of the customer's lines: with Lines,
	// it shows that every line arrived once.
	Sum int64 `json:"sum"`
}

// Profile is a customer's profile: the event of the profiles topic, keyed
// by customer.
type Profile struct {
	Customer CustomerID `json:"customer"`
	Name     string     `json:"name"`
	Region   string     `json:"region"`
}

// EnrichedLine is an order line joined with its customer's profile: the
// event of the orders-enriched topic, keyed by order.
type EnrichedLine struct {
	Order    OrderID    `json:"order"`
	Customer CustomerID `json:"customer"`
	Name     string     `json:"name"`
	Region   string     `json:"region"`
	Amount   int64      `json:"amount"`
	N        int        `json:"n"`
}

// EnrichedOrder is a row of the enriched-orders table: an order's total
// and lines, with the customer of its latest line (the highest N: an
// order's lines reach the table through their customers' partitions, in
// no order between customers) and that customer's profile.
type EnrichedOrder struct {
	Customer CustomerID `json:"customer"`
	Name     string     `json:"name"`
	Region   string     `json:"region"`
	Total    int64      `json:"total"`
	Lines    int        `json:"lines"`
	LastN    int        `json:"last_n"`
}

// Declarations of the event types.
var (
	Lines    = stream.DeclareFunc[OrderID](1, func(l Line) OrderID { return l.Order })
	Receipts = stream.DeclareFunc[OrderID](2, func(r Receipt) OrderID { return r.Order })
	Profiles = stream.DeclareFunc[CustomerID](3, func(p Profile) CustomerID { return p.Customer })
	Enriched = stream.DeclareFunc[OrderID](4, func(e EnrichedLine) OrderID { return e.Order })
)

// ErrNoProfile fails a line whose customer has no profile yet: the line is
// parked and retried (topology.WithRetry) until the profile is there.
var ErrNoProfile = errors.New("shop: the customer has no profile yet")

// TagLine is the type tag of Line.
const TagLine planner.Tag = 1

// Shop is the built topology and its tables.
type Shop struct {
	Topology  *topology.Topology
	Orders    *topology.Table[OrderID, Order]
	Customers *topology.Table[CustomerID, Customer]
	// Profiles and EnrichedOrders are nil in the single-stage and
	// no-receipts variants.
	Profiles       *topology.Table[CustomerID, Profile]
	EnrichedOrders *topology.Table[OrderID, EnrichedOrder]

	byCustomer *topology.Stream[CustomerID, Line]
}

// NewTopology returns the shop topology over the stream's topics.
func NewTopology(streamName string) *Shop {
	s := newTopology(streamName, true, true)
	s.enrich(streamName)
	return s
}

// NewWithoutEnrichment returns the shop topology without its enriched
// orders (the topology before lookups and joins): the baseline of the
// lookup benchmark.
func NewWithoutEnrichment(streamName string) *Shop { return newTopology(streamName, true, true) }

// enrich adds the enriched orders: a foreign-key join of the lines,
// re-keyed by customer, with the customers' profiles.
func (s *Shop) enrich(streamName string) {
	t := s.Topology
	s.Profiles = topology.NewTable[CustomerID, Profile](t, "profiles", stream.JSON[Profile]())
	s.EnrichedOrders = topology.NewTable[OrderID, EnrichedOrder](t, "enriched-orders", stream.JSON[EnrichedOrder]())
	profiles := topology.Source[CustomerID](t, streamName+"/"+ProfilesTopic)
	topology.Project(topology.On(profiles, Profiles), s.Profiles, func(p *Profile, e Profile) error { *p = e; return nil })
	customerOf := func(l Line) CustomerID { return l.Customer }
	topology.ToJoin(s.byCustomer, topology.JoinOn(s.Profiles, customerOf, topology.Left), "enrich", streamName+"/"+EnrichedTopic, Enriched,
		func(_ context.Context, c CustomerID, l Line, p Profile, found bool, emit func(EnrichedLine)) error {
			if !found {
				// The profiles come from another topic: nothing orders
				// them before the lines. Wait for the profile.
				return fmt.Errorf("%w: customer %s, line %d", ErrNoProfile, c, l.N)
			}
			emit(EnrichedLine{Order: l.Order, Customer: c, Name: p.Name, Region: p.Region, Amount: l.Amount, N: l.N})
			return nil
		})
	enriched := topology.Source[OrderID](t, streamName+"/"+EnrichedTopic)
	topology.Project(topology.On(enriched, Enriched), s.EnrichedOrders, FoldEnriched)
}

// FoldEnriched folds an enriched line into its order's row.
func FoldEnriched(o *EnrichedOrder, e EnrichedLine) error {
	o.Total += e.Amount
	o.Lines++
	if e.N > o.LastN {
		o.Customer, o.Name, o.Region, o.LastN = e.Customer, e.Name, e.Region, e.N
	}
	return nil
}

// NewSingleStage returns the shop topology without its KeyBy and To steps
// (the orders table alone): the baseline of the two-stage benchmark.
func NewSingleStage(streamName string) *Shop { return newTopology(streamName, false, false) }

// NewWithoutReceipts returns the shop topology without its To step: the
// orders table and the customers table fed through KeyBy.
func NewWithoutReceipts(streamName string) *Shop { return newTopology(streamName, true, false) }

func newTopology(streamName string, twoStage, receipts bool) *Shop {
	t := topology.New("shop")
	src := topology.Source[OrderID](t, streamName+"/"+Topic)
	s := &Shop{
		Topology:  t,
		Orders:    topology.NewTable[OrderID, Order](t, "orders", stream.JSON[Order]()),
		Customers: topology.NewTable[CustomerID, Customer](t, "customers", stream.JSON[Customer]()),
	}
	lines := topology.On(src, Lines)
	topology.Project(lines, s.Orders, func(o *Order, l Line) error {
		o.Customer, o.Total, o.Lines = l.Customer, o.Total+l.Amount, o.Lines+1
		return nil
	})
	if !twoStage {
		return s
	}
	if receipts {
		topology.To(lines, "receipts", streamName+"/"+ReceiptsTopic, Receipts,
			func(_ context.Context, order OrderID, l Line, emit func(Receipt)) error {
				if l.Amount > 0 {
					emit(Receipt{Order: order, Amount: l.Amount, N: l.N})
				}
				return nil
			})
	}
	byCustomer := topology.KeyBy(lines, "by-customer", func(l Line) (CustomerID, error) {
		if l.Customer == "" {
			return "", fmt.Errorf("order %d line %d has no customer", l.Order, l.N)
		}
		return l.Customer, nil
	})
	s.byCustomer = byCustomer
	topology.Project(byCustomer, s.Customers, func(c *Customer, l Line) error {
		c.Lines++
		c.Total += l.Amount
		c.Sum += int64(l.N)
		return nil
	})
	return s
}

// Workload returns n order lines over the given numbers of orders and
// customers; one line in ten moves its order to another customer, so an
// order's lines go to several customers, in order.
func Workload(n, orders, customers int, seed uint64) []Line {
	r := rand.New(rand.NewPCG(seed, 1))
	owner := make([]CustomerID, orders)
	for i := range owner {
		owner[i] = CustomerID(fmt.Sprintf("customer-%04d", r.IntN(customers)))
	}
	out := make([]Line, n)
	for i := range out {
		o := r.IntN(orders)
		out[i] = Line{Order: OrderID(o + 1), Customer: owner[o], Amount: int64(r.IntN(250) - 50), N: i + 1}
		if r.IntN(10) == 0 {
			owner[o] = CustomerID(fmt.Sprintf("customer-%04d", r.IntN(customers)))
		}
	}
	return out
}

// Reference folds lines sequentially: the tables and receipts the
// topology must produce.
func Reference(lines []Line) (map[OrderID]Order, map[CustomerID]Customer, []Receipt) {
	orders := map[OrderID]Order{}
	customers := map[CustomerID]Customer{}
	var receipts []Receipt
	for _, l := range lines {
		o := orders[l.Order]
		o.Customer, o.Total, o.Lines = l.Customer, o.Total+l.Amount, o.Lines+1
		orders[l.Order] = o
		c := customers[l.Customer]
		c.Lines++
		c.Total += l.Amount
		c.Sum += int64(l.N)
		customers[l.Customer] = c
		if l.Amount > 0 {
			receipts = append(receipts, Receipt{Order: l.Order, Amount: l.Amount, N: l.N})
		}
	}
	return orders, customers, receipts
}

// CustomerProfiles returns the profile of each of the workload's customers
// (customer-0000 to customers-1).
func CustomerProfiles(customers int, seed uint64) []Profile {
	r := rand.New(rand.NewPCG(seed, 2))
	regions := []string{"north", "south", "east", "west"}
	out := make([]Profile, customers)
	for i := range out {
		out[i] = Profile{Customer: CustomerID(fmt.Sprintf("customer-%04d", i)), Name: fmt.Sprintf("Customer %d", i),
			Region: regions[r.IntN(len(regions))]}
	}
	return out
}

// EnrichedReference is the enriched-orders table the topology must
// produce from lines and the profiles.
func EnrichedReference(lines []Line, profiles []Profile) map[OrderID]EnrichedOrder {
	byID := map[CustomerID]Profile{}
	for _, p := range profiles {
		byID[p.Customer] = p
	}
	out := map[OrderID]EnrichedOrder{}
	for _, l := range lines {
		p := byID[l.Customer]
		o := out[l.Order]
		_ = FoldEnriched(&o, EnrichedLine{Order: l.Order, Customer: l.Customer, Name: p.Name, Region: p.Region, Amount: l.Amount, N: l.N})
		out[l.Order] = o
	}
	return out
}
