package proptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// PEv is the property test's event. Count is how many log events a
// (reduced) event stands for.
type PEv struct {
	K     string
	N     int
	Amt   int64
	Count int64
	Fence planner.Ordering // for the FenceBy type
}

// PState is the key's value. Each field is order-sensitive exactly where
// strand promises an order: per-type chains are sensitive to the order of
// one type's events, and Obs records, at every fence event, how many events
// of the key were applied before it, which only depends on the planner
// keeping fences in place.
type PState struct {
	Applied int64
	Balance int64
	Flag    int64
	Chain3  uint64
	Chain5  uint64
	Obs     uint64
}

func mix(h uint64, xs ...int64) uint64 {
	f := fnv.New64a()
	fmt.Fprint(f, h)
	for _, x := range xs {
		fmt.Fprint(f, ",", x)
	}
	return f.Sum64()
}

func pkey(e PEv) string { return e.K }

var (
	pAcquire = stream.DeclareFunc(1, pkey, stream.WithFence(planner.Acquire))
	pSum     = stream.DeclareFunc(2, pkey, stream.WithReduce(algebra.Fold(func(a, b PEv) PEv {
		a.Amt += b.Amt
		a.Count += b.Count
		return a
	})))
	PPlain   = stream.DeclareFunc(3, pkey) // PPlain: relaxed, no reduction
	pRelease = stream.DeclareFunc(4, pkey, stream.WithFence(planner.Release))
	// PFenceBy fences each event by its Fence field.
	PFenceBy = stream.DeclareFunc(5, pkey, stream.WithFenceBy(func(e PEv) planner.Ordering { return e.Fence }))
	pFlag    = stream.DeclareFunc(6, pkey, stream.WithReduce(algebra.DedupFunc(func(a, b PEv) bool { return a.Amt == b.Amt })))
	pAcqRel  = stream.DeclareFunc(7, pkey, stream.WithFence(planner.AcqRel))
)

// The folds, shared by the topology and the sequential reference.
func foldAcquire(s *PState, e PEv) { s.Obs = mix(s.Obs, 1, int64(e.N), s.Applied); s.Applied++ }

func foldSum(s *PState, e PEv) { s.Balance += e.Amt; s.Applied += e.Count }

// FoldPlain is PPlain's fold: it chains the event's id into Chain3.
func FoldPlain(s *PState, e PEv) { s.Chain3 = mix(s.Chain3, int64(e.N)); s.Applied++ }

func foldRelease(s *PState, e PEv) { s.Obs = mix(s.Obs, 4, int64(e.N), s.Applied); s.Applied++ }

func foldFenceBy(s *PState, e PEv) {
	s.Chain5 = mix(s.Chain5, int64(e.N))
	if e.Fence != planner.Relaxed {
		s.Obs = mix(s.Obs, 5, int64(e.N), s.Applied)
	}
	s.Applied++
}

func foldFlag(s *PState, e PEv) { s.Flag = e.Amt }

func foldAcqRel(s *PState, e PEv) { s.Obs = mix(s.Obs, 7, int64(e.N), s.Applied); s.Applied++ }

// PType is one of the property tests' event types: its declaration and
// its fold.
type PType struct {
	Decl *stream.Event[string, PEv]
	Fold func(*PState, PEv)
}

// PTypes are the event types of the property tests, every fence and
// reduction among them.
var PTypes = []PType{
	{pAcquire, foldAcquire}, {pSum, foldSum}, {PPlain, FoldPlain}, {pRelease, foldRelease},
	{PFenceBy, foldFenceBy}, {pFlag, foldFlag}, {pAcqRel, foldAcqRel},
}

// DrawPEv draws the type (an index into PTypes) and the event of log
// position i, key k, for the property tests: an amount in -3..3, counting
// for one log event, and for PFenceBy any of the four fences.
func DrawPEv(rt *rapid.T, k string, i int) (ty int, ev PEv) {
	ty = rapid.IntRange(0, len(PTypes)-1).Draw(rt, "type")
	ev = PEv{K: k, N: i, Amt: int64(rapid.IntRange(-3, 3).Draw(rt, "amt")), Count: 1, Fence: planner.Relaxed}
	if PTypes[ty].Decl == PFenceBy {
		ev.Fence = rapid.SampledFrom([]planner.Ordering{planner.Relaxed, planner.Acquire, planner.Release, planner.AcqRel}).Draw(rt, "fence")
	}
	return ty, ev
}

// Flaky makes a fold fail the first time it sees chosen events, so that
// parking and retries are part of every property run.
type Flaky struct {
	mu     sync.Mutex
	FailOn map[int]bool
	Failed map[int]bool
}

var errFlaky = errors.New("flaky")

func (f *Flaky) check(e PEv) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.FailOn[e.N] && !f.Failed[e.N] {
		f.Failed[e.N] = true
		return errFlaky
	}
	return nil
}

// PropertyTopology projects every type into two tables: "state", whose
// alias-free value fails before folding, and "rows", whose value (pointer,
// map, slices) is changed in place and fails after folding, the failures
// chosen by fl (each event fails once per table, at most).
func PropertyTopology(fl *Flaky) (*topology.Topology, func() map[string]PState, func() map[string]MState) {
	topo := topology.New("property", topology.WithWorkers(3), topology.WithRetry(1000, time.Second, time.Second))
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, PState](topo, "state", stream.JSON[PState]())
	rows := topology.NewTable[string, MState](topo, "rows", stream.JSON[MState]())
	after := &Flaky{FailOn: fl.FailOn, Failed: map[int]bool{}}
	for ty, pt := range PTypes {
		fold := pt.Fold
		s := topology.On(src, pt.Decl)
		topology.Project(s, table, func(s *PState, e PEv) error {
			if err := fl.check(e); err != nil {
				return err
			}
			fold(s, e)
			return nil
		})
		topology.Project(s, rows, func(m *MState, e PEv) error {
			m.fold(ty, e)
			return after.check(e)
		})
	}
	st := &stateTable{table: table}
	return topo, st.all, func() map[string]MState {
		out := map[string]MState{}
		if err := rows.Scan(context.Background(), func(k string, v MState) bool { out[k] = v; return true }); err != nil {
			panic(err)
		}
		return out
	}
}

// FoldRows is the sequential reference of the "rows" table.
func FoldRows(want map[string]MState, ty int, e PEv) {
	m := want[e.K]
	m.fold(ty, e)
	want[e.K] = m
}

// CheckRows compares the "rows" table with its reference.
func CheckRows(tb interface{ Fatalf(string, ...any) }, got, want map[string]MState) {
	if len(got) != len(want) {
		tb.Fatalf("rows has %d keys, the fold %d", len(got), len(want))
	}
	for k, w := range want {
		if g := got[k]; !equalMState(g, w) {
			tb.Fatalf("rows key %s:\n got  %s\n want %s", k, show(g), show(w))
		}
	}
}

type stateTable struct {
	table interface {
		Scan(ctx context.Context, fn func(k string, v PState) bool) error
	}
}

func (s *stateTable) all() map[string]PState {
	out := map[string]PState{}
	err := s.table.Scan(context.Background(), func(k string, v PState) bool {
		out[k] = v
		return true
	})
	if err != nil {
		panic(err)
	}
	return out
}

// Parked is the number of records the driver holds parked.
func Parked(d *topologytest.Driver, _ uint32) int {
	_, n := d.Parked()
	return n
}

// PartitionOf is the partition of key k among n, as strand partitions.
func PartitionOf(k string, n uint32) uint32 { return xxh32.Partition([]byte(k), n) }

// SoakLen is the most events a property test's log holds: normal in the
// default run, soak with STRAND_SOAK set (crashtest.Soak), where
// internal/testrun also tries ten times the cases. The default run's logs
// are shorter so that the newcomer's suite stays within 8 minutes (issue
// 33 item 7, docs/design.md §17): the time of a case grows with its log
// (more steps, restarts and store openings), while every shape a case can
// take (batchings, partitions, restarts, each kind of fault) is drawn as
// often as before.
func SoakLen(normal, soak int) int {
	if crashtest.Soak() {
		return soak
	}
	return normal
}

// MState is a row that real projections keep: a pointer, a map and
// slices, all changed in place by the folds below.
type MState struct {
	P   *PState          // the order-sensitive fold of every event (see PState)
	Log map[int][]int    // per unreduced type: the events' numbers, in the order applied
	Sum map[string]int64 // per type: amounts (sums are what reduction keeps)
}

func (s *MState) fold(ty int, e PEv) {
	if s.P == nil {
		s.P = &PState{}
	}
	if s.Log == nil {
		s.Log = map[int][]int{}
	}
	if s.Sum == nil {
		s.Sum = map[string]int64{}
	}
	PTypes[ty].Fold(s.P, e)
	if d := PTypes[ty].Decl; d != pSum && d != pFlag { // reduced types see fewer events
		s.Log[ty] = append(s.Log[ty], e.N)
	}
	if PTypes[ty].Decl != pFlag { // deduplicated: fewer events, same flag
		s.Sum[fmt.Sprint(ty)] += e.Amt
	}
}

func equalMState(a, b MState) bool {
	var pa, pb PState
	if a.P != nil {
		pa = *a.P
	}
	if b.P != nil {
		pb = *b.P
	}
	return pa == pb &&
		maps.EqualFunc(nonNil(a.Log), nonNil(b.Log), slices.Equal) &&
		maps.Equal(nonNil(a.Sum), nonNil(b.Sum))
}

func nonNil[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return m
}

// faults says, per event number, how the folds fail: transient failures
// (an error or a panic, after the fold changed the value in place) the
// first times they see the event, or a permanent one every time. It counts
// what really happened.
type faults struct {
	mu        sync.Mutex
	transient map[int]int // failures to inject for the event
	panics    map[int]bool
	permanent map[int]bool
	seen      map[int]int // failures injected so far
	sinkFail  map[int]bool
}

func (f *faults) after(e PEv) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.permanent[e.N] {
		f.seen[e.N]++
		return stream.Permanent(fmt.Errorf("event %d is invalid", e.N))
	}
	if f.seen[e.N] < f.transient[e.N] {
		f.seen[e.N]++
		if f.panics[e.N] {
			panic(fmt.Sprintf("fold of event %d", e.N))
		}
		return fmt.Errorf("event %d: %w", e.N, errFlaky)
	}
	return nil
}

func (f *faults) sink(e PEv) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sinkFail[e.N] {
		delete(f.sinkFail, e.N)
		return errors.New("sink down")
	}
	return nil
}

const failMaxAttempts = 3

type stateScan struct {
	table interface {
		Scan(ctx context.Context, fn func(k string, v MState) bool) error
	}
}

func (s *stateScan) all(rt *rapid.T) map[string]MState {
	out := map[string]MState{}
	if err := s.table.Scan(context.Background(), func(k string, v MState) bool { out[k] = v; return true }); err != nil {
		rt.Fatal(err)
	}
	return out
}

func show(m MState) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// SEv is the re-sequencer tests' event: Seq is its number within its key,
// N a unique id (the Flaky fold fails on chosen ids).
type SEv struct {
	K     string
	Seq   uint64
	N     int
	Amt   int64
	Count int64
}

// SevKey is an SEv's key.
func SevKey(e SEv) string { return e.K }

// SevSeq is an SEv's sequence number.
func SevSeq(e SEv) uint64 { return e.Seq }

// SevPEv is the PEv an SEv folds as.
func SevPEv(e SEv) PEv { return PEv{K: e.K, N: int(e.Seq), Amt: e.Amt, Count: e.Count} }

func sevFold(f func(*PState, PEv)) func(*PState, SEv) {
	return func(s *PState, e SEv) { f(s, SevPEv(e)) }
}

var (
	sAcquire = stream.DeclareFunc(1, SevKey, stream.WithSequence(SevSeq), stream.WithFence(planner.Acquire))
	sSum     = stream.DeclareFunc(2, SevKey, stream.WithSequence(SevSeq), stream.WithReduce(algebra.Fold(func(a, b SEv) SEv {
		a.Amt += b.Amt
		a.Count += b.Count
		return a
	})))
	SPlain   = stream.DeclareFunc(3, SevKey, stream.WithSequence(SevSeq)) // SPlain: sequenced, relaxed
	sRelease = stream.DeclareFunc(4, SevKey, stream.WithSequence(SevSeq), stream.WithFence(planner.Release))
	sAcqRel  = stream.DeclareFunc(7, SevKey, stream.WithSequence(SevSeq), stream.WithFence(planner.AcqRel))
	// SFree is unsequenced: it passes through the re-sequencer.
	SFree = stream.DeclareFunc(9, SevKey)
)

// SType is one of the re-sequencer tests' event types: its declaration
// and its fold.
type SType struct {
	Decl *stream.Event[string, SEv]
	Fold func(*PState, SEv)
}

// STypes are the sequenced event types of the re-sequencer tests.
var STypes = []SType{
	{sAcquire, sevFold(foldAcquire)}, {sSum, sevFold(foldSum)}, {SPlain, sevFold(FoldPlain)},
	{sRelease, sevFold(foldRelease)}, {sAcqRel, sevFold(foldAcqRel)},
}

// ReseqTopology projects every sequenced type into "state" (failing once
// on the ids fl chooses) and counts the unsequenced ones in "free".
func ReseqTopology(fl *Flaky, opts ...topology.ResequenceOption) (*topology.Topology, *topology.Table[string, PState], *topology.Table[string, int64]) {
	topo := topology.New("reseq", topology.WithWorkers(3), topology.WithRetry(1000, time.Millisecond, time.Millisecond))
	src := topology.Source[string](topo, "log").Resequence(opts...)
	table := topology.NewTable[string, PState](topo, "state", stream.JSON[PState]())
	free := topology.NewTable[string, int64](topo, "free", stream.JSON[int64]())
	for _, st := range STypes {
		fold := st.Fold
		topology.Project(topology.On(src, st.Decl), table, func(s *PState, e SEv) error {
			if fl != nil {
				if err := fl.check(PEv{N: e.N}); err != nil {
					return err
				}
			}
			fold(s, e)
			return nil
		})
	}
	topology.Project(topology.On(src, SFree), free, func(n *int64, e SEv) error { *n += e.Amt; return nil })
	return topo, table, free
}

type gapRange struct{ from, to uint64 }

// The shop of the KeyBy tests: orders keyed by order, re-keyed by customer.

// OrderPlaced is the KeyBy tests' event: an order line of a customer.
type OrderPlaced struct {
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

// CustomerRow is a row of the KeyBy tests' customers table.
type CustomerRow struct {
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
	placed    *stream.Event[uint64, OrderPlaced]
	receipts  *stream.Event[uint64, receipt]
	orders    *topology.Table[uint64, orderRow]
	customers *topology.Table[string, CustomerRow]
}

const receiptsTopic = "shop/receipts"

// newShop builds the two-stage topology; keyErr, when set, is the KeyBy
// key function's failure for some events.
func newShop(keyFn func(OrderPlaced) (string, error), opts ...topology.Option) *shop {
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
func newFlakyShop(keyFn func(OrderPlaced) (string, error), fl *failOnce, opts ...topology.Option) *shop {
	s := &shop{topo: topology.New("shop", opts...)}
	s.placed = stream.DeclareFunc[uint64](tagOrderPlaced, func(e OrderPlaced) uint64 { return e.Order })
	s.receipts = stream.DeclareFunc[uint64](tagReceipt, func(e receipt) uint64 { return e.Order })
	src := topology.Source[uint64](s.topo, "shop/orders")
	s.orders = topology.NewTable[uint64, orderRow](s.topo, "orders", stream.JSON[orderRow]())
	s.customers = topology.NewTable[string, CustomerRow](s.topo, "customers", stream.JSON[CustomerRow]())
	placed := topology.On(src, s.placed)
	topology.Project(placed, s.orders, func(v *orderRow, e OrderPlaced) error {
		v.Customer, v.Total, v.Lines = e.Customer, v.Total+e.Amount, v.Lines+1
		return nil
	})
	topology.To(placed, "receipts", receiptsTopic, s.receipts, func(_ context.Context, order uint64, e OrderPlaced, emit func(receipt)) error {
		if e.Amount > 0 {
			emit(receipt{Order: order, Amount: e.Amount, Seq: e.Seq})
		}
		if e.Seq%2 == 0 && fl.fail(e.Seq) {
			return errors.New("receipt service down")
		}
		return nil
	})
	if keyFn == nil {
		keyFn = func(e OrderPlaced) (string, error) { return e.Customer, nil }
	}
	byCustomer := topology.KeyBy(placed, "by-customer", keyFn)
	topology.Project(byCustomer, s.customers, func(v *CustomerRow, e OrderPlaced) error {
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

// ShopWorkload is n random order lines of the given numbers of orders and
// customers, the same for the same seed.
func ShopWorkload(n, orders, customers int, seed uint64) []OrderPlaced {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]OrderPlaced, n)
	owner := make([]string, orders)
	for i := range owner {
		owner[i] = fmt.Sprintf("c%03d", r.IntN(customers))
	}
	for i := range out {
		o := r.IntN(orders)
		out[i] = OrderPlaced{Order: uint64(o + 1), Customer: owner[o], Amount: int64(r.IntN(200) - 20), Seq: i}
		if r.IntN(10) == 0 { // an order changes hands: its events get another new key
			owner[o] = fmt.Sprintf("c%03d", r.IntN(customers))
		}
	}
	return out
}

// shopReference folds the workload sequentially, as the topology must.
func shopReference(events []OrderPlaced, skip func(OrderPlaced) bool) (map[uint64]orderRow, map[string]CustomerRow, []receipt) {
	orders := map[uint64]orderRow{}
	customers := map[string]CustomerRow{}
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
func checkShop(t *testing.T, s *shop, events []OrderPlaced, skip func(OrderPlaced) bool, got []receipt) {
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
	if err := s.customers.Scan(ctx, func(k string, v CustomerRow) bool {
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
