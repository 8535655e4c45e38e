package topology_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// The shop: orders keyed by order, re-keyed by customer.

type orderPlaced struct {
	Order    uint64 `json:"order"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Seq      int    `json:"seq"` // position in the workload, to check order
}

type orderRow struct {
	Customer string `json:"customer"`
	Total    int64  `json:"total"`
	Lines    int    `json:"lines"`
}

type customerRow struct {
	Orders int64 `json:"orders"`
	Total  int64 `json:"total"`
	// Last lists the workload positions of the customer's events as
	// applied (a slice the fold grows in place).
	Seen []int `json:"seen"`
}

type receipt struct {
	Order  uint64 `json:"order"`
	Amount int64  `json:"amount"`
	Seq    int    `json:"seq"`
}

const (
	tagOrderPlaced planner.Tag = 1
	tagReceipt     planner.Tag = 2
)

type shop struct {
	topo      *topology.Topology
	placed    *stream.Event[uint64, orderPlaced]
	receipts  *stream.Event[uint64, receipt]
	orders    *topology.Table[uint64, orderRow]
	customers *topology.Table[string, customerRow]
}

const receiptsTopic = "shop/receipts"

// newShop builds the two-stage topology; keyErr, when set, is the KeyBy
// key function's failure for some events.
func newShop(keyFn func(orderPlaced) (string, error), opts ...topology.Option) *shop {
	return newFlakyShop(keyFn, nil, opts...)
}

// failOnce fails the first try of each event whose Seq it selects.
type failOnce struct {
	mu     sync.Mutex
	pick   func(seq int) bool
	failed map[int]bool
}

func (f *failOnce) fail(seq int) bool {
	if f == nil || !f.pick(seq) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed[seq] {
		return false
	}
	f.failed[seq] = true
	return true
}

// newFlakyShop is newShop whose To function and customers fold fail the
// first try of the events fl picks (the fold after changing the row in
// place).
func newFlakyShop(keyFn func(orderPlaced) (string, error), fl *failOnce, opts ...topology.Option) *shop {
	s := &shop{topo: topology.New("shop", opts...)}
	s.placed = stream.DeclareFunc[uint64](tagOrderPlaced, func(e orderPlaced) uint64 { return e.Order })
	s.receipts = stream.DeclareFunc[uint64](tagReceipt, func(e receipt) uint64 { return e.Order })
	src := topology.Source[uint64](s.topo, "shop/orders")
	s.orders = topology.NewTable[uint64, orderRow](s.topo, "orders", stream.JSON[orderRow]())
	s.customers = topology.NewTable[string, customerRow](s.topo, "customers", stream.JSON[customerRow]())
	placed := topology.On(src, s.placed)
	topology.Project(placed, s.orders, func(v *orderRow, e orderPlaced) error {
		v.Customer, v.Total, v.Lines = e.Customer, v.Total+e.Amount, v.Lines+1
		return nil
	})
	topology.To(placed, "receipts", receiptsTopic, s.receipts, func(_ context.Context, order uint64, e orderPlaced, emit func(receipt)) error {
		if e.Amount > 0 {
			emit(receipt{Order: order, Amount: e.Amount, Seq: e.Seq})
		}
		if e.Seq%2 == 0 && fl.fail(e.Seq) {
			return errors.New("receipt service down")
		}
		return nil
	})
	if keyFn == nil {
		keyFn = func(e orderPlaced) (string, error) { return e.Customer, nil }
	}
	byCustomer := topology.KeyBy(placed, "by-customer", keyFn)
	topology.Project(byCustomer, s.customers, func(v *customerRow, e orderPlaced) error {
		v.Orders++
		v.Total += e.Amount
		v.Seen = append(v.Seen, e.Seq)
		if e.Seq%2 == 1 && fl.fail(e.Seq) {
			return errors.New("customer store down")
		}
		return nil
	})
	return s
}

func shopWorkload(n, orders, customers int, seed uint64) []orderPlaced {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]orderPlaced, n)
	owner := make([]string, orders)
	for i := range owner {
		owner[i] = fmt.Sprintf("c%03d", r.IntN(customers))
	}
	for i := range out {
		o := r.IntN(orders)
		out[i] = orderPlaced{Order: uint64(o + 1), Customer: owner[o], Amount: int64(r.IntN(200) - 20), Seq: i}
		if r.IntN(10) == 0 { // an order changes hands: its events get another new key
			owner[o] = fmt.Sprintf("c%03d", r.IntN(customers))
		}
	}
	return out
}

// shopReference folds the workload sequentially, as the topology must.
func shopReference(events []orderPlaced, skip func(orderPlaced) bool) (map[uint64]orderRow, map[string]customerRow, []receipt) {
	orders := map[uint64]orderRow{}
	customers := map[string]customerRow{}
	var receipts []receipt
	for _, e := range events {
		if skip != nil && skip(e) {
			continue
		}
		o := orders[e.Order]
		o.Customer, o.Total, o.Lines = e.Customer, o.Total+e.Amount, o.Lines+1
		orders[e.Order] = o
		c := customers[e.Customer]
		c.Orders++
		c.Total += e.Amount
		c.Seen = append(c.Seen, e.Seq)
		customers[e.Customer] = c
		if e.Amount > 0 {
			receipts = append(receipts, receipt{Order: e.Order, Amount: e.Amount, Seq: e.Seq})
		}
	}
	return orders, customers, receipts
}

// checkShop compares the tables and the receipts with the reference. The
// customers' Seen lists must hold every event once; the events of one
// order must be in their source order.
func checkShop(t *testing.T, s *shop, events []orderPlaced, skip func(orderPlaced) bool, got []receipt) {
	t.Helper()
	ctx := context.Background()
	wantOrders, wantCustomers, wantReceipts := shopReference(events, skip)
	n := 0
	if err := s.orders.Scan(ctx, func(k uint64, v orderRow) bool {
		n++
		if w := wantOrders[k]; w != v {
			t.Errorf("order %d = %+v, want %+v", k, v, w)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(wantOrders) {
		t.Errorf("%d orders, want %d", n, len(wantOrders))
	}
	n = 0
	orderOf := map[int]uint64{}
	for _, e := range events {
		orderOf[e.Seq] = e.Order
	}
	if err := s.customers.Scan(ctx, func(k string, v customerRow) bool {
		n++
		w := wantCustomers[k]
		if v.Orders != w.Orders || v.Total != w.Total {
			t.Errorf("customer %s = %d orders %d total, want %d, %d", k, v.Orders, v.Total, w.Orders, w.Total)
		}
		if !slices.Equal(slices.Sorted(slices.Values(v.Seen)), w.Seen) {
			t.Errorf("customer %s saw %v, want %v (in some order)", k, v.Seen, w.Seen)
		}
		last := map[uint64]int{}
		for _, seq := range v.Seen {
			o := orderOf[seq]
			if p, ok := last[o]; ok && p > seq {
				t.Errorf("customer %s: order %d's event %d applied after its event %d", k, o, seq, p)
			}
			last[o] = seq
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(wantCustomers) {
		t.Errorf("%d customers, want %d", n, len(wantCustomers))
	}
	if got != nil || wantReceipts != nil {
		sortReceipts := func(rs []receipt) []receipt {
			rs = slices.Clone(rs)
			slices.SortFunc(rs, func(a, b receipt) int { return a.Seq - b.Seq })
			return rs
		}
		if g, w := sortReceipts(got), sortReceipts(wantReceipts); !slices.Equal(g, w) {
			t.Errorf("%d receipts, want %d (each once)", len(g), len(w))
		}
		// Receipts of one order are in source order.
		last := map[uint64]int{}
		for _, r := range got {
			if p, ok := last[r.Order]; ok && p > r.Seq {
				t.Errorf("order %d: receipt %d published after %d", r.Order, r.Seq, p)
			}
			last[r.Order] = r.Seq
		}
	}
}

func TestKeyByAndToEqualSequentialFold(t *testing.T) {
	events := shopWorkload(3000, 200, 30, 1)
	s := newShop(nil)
	d := topologytest.NewDriver(t, s.topo, topologytest.WithPartitions(4), topologytest.WithBatchSize(97))
	topologytest.Pipe(d, s.placed, events...)
	d.Advance()
	checkShop(t, s, events, nil, topologytest.Outputs(d, receiptsTopic, s.receipts))
	if dls := d.DeadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters: %v", dls)
	}
	var st stream.Counters
	for _, s := range d.App().Stats() {
		st.OutboxCommitted += s.Total.OutboxCommitted
		st.OutboxPublished += s.Total.OutboxPublished
	}
	if st.OutboxCommitted == 0 || st.OutboxCommitted != st.OutboxPublished {
		t.Fatalf("outbox: %d committed, %d published", st.OutboxCommitted, st.OutboxPublished)
	}
}

// A property test: random logs, batchings, partition counts, restarts.
func TestPropertyKeyByAndTo(t *testing.T) {
	t.Parallel() // see parallel_test.go
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 9))
			events := shopWorkload(300+r.IntN(1500), 1+r.IntN(80), 1+r.IntN(20), seed)
			s := newShop(nil)
			d := topologytest.NewDriver(t, s.topo, topologytest.WithPartitions(uint32(1+r.IntN(5))),
				topologytest.WithBatchSizes(func() int { return 1 + r.IntN(300) }))
			for i := 0; i < len(events); {
				n := min(1+r.IntN(400), len(events)-i)
				topologytest.Pipe(d, s.placed, events[i:i+n]...)
				i += n
				for range r.IntN(3) {
					d.Step()
				}
				if r.IntN(4) == 0 {
					d.Restart()
				}
			}
			d.Advance()
			checkShop(t, s, events, nil, topologytest.Outputs(d, receiptsTopic, s.receipts))
		})
	}
}

// Transient failures of the To function and of the re-keyed projection
// (after it changed the row in place) are retried: nothing is lost,
// doubled, or half-applied, with restarts in between.
func TestPropertyKeyByAndToWithFailures(t *testing.T) {
	t.Parallel() // see parallel_test.go
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			events := shopWorkload(300+r.IntN(1000), 1+r.IntN(60), 1+r.IntN(15), seed+100)
			fl := &failOnce{pick: func(seq int) bool { return seq%5 < 2 }, failed: map[int]bool{}}
			s := newFlakyShop(nil, fl, topology.WithRetry(3, time.Millisecond, time.Millisecond))
			d := topologytest.NewDriver(t, s.topo, topologytest.WithPartitions(uint32(1+r.IntN(4))),
				topologytest.WithBatchSizes(func() int { return 1 + r.IntN(200) }))
			for i := 0; i < len(events); {
				n := min(1+r.IntN(300), len(events)-i)
				topologytest.Pipe(d, s.placed, events[i:i+n]...)
				i += n
				d.Step()
				d.AdvanceClock(time.Second)
				if r.IntN(4) == 0 {
					d.Restart()
				}
			}
			for range 50 {
				d.Advance()
				if k, _ := d.Parked(); k == 0 {
					break
				}
				d.AdvanceClock(time.Second)
			}
			checkShop(t, s, events, nil, topologytest.Outputs(d, receiptsTopic, s.receipts))
			if dls := d.DeadLetters(); len(dls) != 0 {
				t.Fatalf("%d dead letters: %v", len(dls), dls[0])
			}
		})
	}
}

// A KeyBy key function that errors, panics or gives an unusable key
// dead-letters its record with ReasonKeyBy; the others are exact.
func TestKeyByBadKeysAreDeadLetters(t *testing.T) {
	long := string(make([]byte, 300))
	bad := func(e orderPlaced) bool { return e.Seq%17 == 3 || e.Seq%29 == 5 || e.Seq%31 == 7 }
	s := newShop(func(e orderPlaced) (string, error) {
		switch {
		case e.Seq%17 == 3:
			return "", errors.New("no customer")
		case e.Seq%29 == 5:
			panic("key function panicked")
		case e.Seq%31 == 7:
			return long, nil
		}
		return e.Customer, nil
	})
	events := shopWorkload(1000, 50, 10, 3)
	d := topologytest.NewDriver(t, s.topo, topologytest.WithPartitions(3), topologytest.WithBatchSize(64))
	topologytest.Pipe(d, s.placed, events...)
	d.Advance()
	checkShop(t, s, events, bad, topologytest.Outputs(d, receiptsTopic, s.receipts))
	dls := d.DeadLetters()
	want := 0
	for _, e := range events {
		if bad(e) {
			want++
		}
	}
	if len(dls) != want {
		t.Fatalf("%d dead letters, want %d", len(dls), want)
	}
	for _, dl := range dls {
		if dl.Reason != deadletter.ReasonKeyBy {
			t.Fatalf("dead letter %v, want reason %s", dl, deadletter.ReasonKeyBy)
		}
	}
}

func TestKeyByBuildErrors(t *testing.T) {
	topo := topology.New("t")
	decl := stream.DeclareFunc[uint64](1, func(e orderPlaced) uint64 { return e.Order })
	src := topology.Source[uint64](topo, "s/orders")
	st := topology.On(src, decl)
	topology.KeyBy[uint64, orderPlaced, string](st, "k", nil)
	topology.To[uint64, orderPlaced, uint64, receipt](st, "r", "", nil, nil)
	_, err := topo.Build()
	if err == nil || !errors.Is(err, topology.ErrBuild) {
		t.Fatalf("Build = %v, want ErrBuild", err)
	}
	for _, want := range []string{`KeyBy "k" has a nil key function`, `To "r" has a nil function`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A record carrying the strand-origin of an outbox message applied before
// (a message published twice) is dropped, counted as redelivered; one of
// another origin stream, or a later one, is applied.
func TestOriginDuplicatesAreDroppedOnce(t *testing.T) {
	topo := topology.New("dedupe")
	decl := stream.DeclareFunc[uint64](tagOrderPlaced, func(e orderPlaced) uint64 { return e.Order })
	src := topology.Source[uint64](topo, "in")
	tab := topology.NewTable[uint64, orderRow](topo, "orders", stream.JSON[orderRow]())
	topology.Project(topology.On(src, decl), tab, func(v *orderRow, e orderPlaced) error {
		v.Total += e.Amount
		v.Lines++
		return nil
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(2))
	origin := func(stream byte, seq uint64) []byte {
		o := make([]byte, 16)
		o[0] = stream
		for i := range 8 {
			o[15-i] = byte(seq >> (8 * i))
		}
		return o
	}
	pipe := func(o []byte, amount int64) {
		rec, err := decl.Record(0, 0, orderPlaced{Order: 1, Amount: amount})
		if err != nil {
			t.Fatal(err)
		}
		rec.Headers.Origin = o
		d.PipeRecord("in", rec)
	}
	pipe(origin(1, 1), 1)
	pipe(origin(1, 2), 10)
	pipe(origin(1, 2), 100)  // a repeat of seq 2
	pipe(origin(1, 1), 1000) // a late repeat of seq 1
	pipe(origin(2, 1), 10000)
	pipe(nil, 100000) // no origin: always applied
	d.Advance()
	d.Restart() // the origins survive a restart
	pipe(origin(1, 2), 1_000_000)
	pipe(origin(1, 3), 10_000_000)
	d.Advance()
	v, _, err := tab.Get(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Total != 10_110_011 || v.Lines != 5 {
		t.Fatalf("row %+v, want total 10110011 over 5 lines", v)
	}
	if got := d.App().Stats()[0].Total.Redelivered; got != 1 {
		t.Fatalf("Redelivered = %d after the restart, want 1", got)
	}
}

// Under BlockPoisonedKey, an event KeyBy cannot key holds its source key's
// later events (all its handlers' too) until the key is released; the
// other keys go on.
func TestKeyByPoisonHoldsItsKey(t *testing.T) {
	s := newShop(func(e orderPlaced) (string, error) {
		if e.Seq == 5 {
			return "", errors.New("no customer")
		}
		return e.Customer, nil
	}, topology.WithPoisonPolicy(stream.BlockPoisonedKey))
	events := shopWorkload(200, 10, 4, 8)
	d := topologytest.NewDriver(t, s.topo, topologytest.WithBatchSize(30))
	topologytest.Pipe(d, s.placed, events...)
	d.Advance()
	poisoned := events[5].Order
	held := func(e orderPlaced) bool { return e.Order == poisoned && e.Seq >= 5 }
	checkShop(t, s, events, held, topologytest.Outputs(d, receiptsTopic, s.receipts))
	if dls := d.DeadLetters(); len(dls) != 1 || dls[0].Reason != deadletter.ReasonKeyBy {
		t.Fatalf("dead letters %v, want the one KeyBy could not key", dls)
	}
	if k, _ := d.Parked(); k != 1 {
		t.Fatalf("%d keys parked, want the poisoned order's", k)
	}
}
