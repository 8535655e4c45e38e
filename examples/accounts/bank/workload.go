package bank

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// Workload describes a stream of bank events. The zero value is invalid;
// DefaultWorkload is the example's default.
type Workload struct {
	// Events is how many events to generate; 0 means no end.
	Events int
	// Accounts is how many accounts the events spread over (ids
	// 1..Accounts).
	Accounts int
	// Skew is the exponent s of a Zipf distribution over accounts
	// (account 1 is the hottest); s <= 1 means uniform.
	Skew float64
	// Seed makes the stream reproducible: equal workloads generate equal
	// streams.
	Seed uint64
}

// DefaultWorkload is the example's default: 200,000 events over 10,000
// accounts with Zipf skew 1.1 (the hottest account gets about 1 event in
// 7), seed 1.
var DefaultWorkload = Workload{Events: 200_000, Accounts: 10_000, Skew: 1.1, Seed: 1}

// Validate reports a workload that cannot be generated.
func (w Workload) Validate() error {
	switch {
	case w.Events < 0:
		return fmt.Errorf("bank: workload: %d events, want >= 0", w.Events)
	case w.Accounts < 1:
		return fmt.Errorf("bank: workload: %d accounts, want >= 1", w.Accounts)
	}
	return nil
}

// Generator produces the events of a Workload: a valid history per account
// (opened before anything else, withdrawals never above the balance the
// generator tracks, closed now and then and re-opened later). It is
// deterministic for a given Workload and not safe for concurrent use.
type Generator struct {
	w       Workload
	rng     *rand.Rand
	zipf    *rand.Zipf
	open    []bool
	balance []int64
	n       int
}

// Per mille chances of an open account's next event.
const (
	closePerMille   = 5   // 0.5% closings
	depositPerMille = 600 // then deposits up to 60%, the rest withdrawals
	maxAmount       = 10_000
)

// NewGenerator returns a generator of w. It fails on an invalid workload.
func NewGenerator(w Workload) (*Generator, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x5eed_ba4c))
	g := &Generator{w: w, rng: rng, open: make([]bool, w.Accounts), balance: make([]int64, w.Accounts)}
	if w.Skew > 1 && w.Accounts > 1 {
		g.zipf = rand.NewZipf(rng, w.Skew, 1, uint64(w.Accounts-1))
	}
	return g, nil
}

// Generated returns how many events Next has returned.
func (g *Generator) Generated() int { return g.n }

// Next returns the next event, and false when the workload's Events are
// all generated.
func (g *Generator) Next() (Event, bool) {
	if g.w.Events > 0 && g.n >= g.w.Events {
		return nil, false
	}
	g.n++
	var i int
	if g.zipf != nil {
		i = int(g.zipf.Uint64())
	} else {
		i = g.rng.IntN(g.w.Accounts)
	}
	id := AccountID(i + 1)
	if !g.open[i] {
		g.open[i] = true
		return AccountOpened{Account: id, Owner: "owner-" + strconv.Itoa(i+1)}, true
	}
	r := g.rng.IntN(1000)
	switch {
	case r < closePerMille:
		g.open[i], g.balance[i] = false, 0
		return AccountClosed{Account: id}, true
	case r < depositPerMille || g.balance[i] == 0:
		amt := 1 + g.rng.Int64N(maxAmount)
		g.balance[i] += amt
		return Deposited{Account: id, Amount: amt}, true
	default:
		amt := 1 + g.rng.Int64N(min(g.balance[i], maxAmount))
		g.balance[i] -= amt
		return Withdrawn{Account: id, Amount: amt}, true
	}
}

// PoisonKind names the kinds of poison record Poison makes.
var PoisonKind = [...]string{"bad-headers", "undecodable", "unknown-type", "no-headers"}

// TagUnknown is the type tag of Poison's unknown-type records.
const TagUnknown = 99

// Poison returns the i-th poison message: a raw message that a strand
// publisher would never write, to be published with a raw sink (such as
// iggy.Sink) into the events topic. The kinds rotate with i: strand-props
// of an unknown version (bad headers), a Deposited whose payload decodes
// with neither codec (undecodable), valid headers with type tag 99 (unknown
// type), and no strand headers at all. Every one must end in the
// dead-letter topic, exactly once. Its key is one of the workload's
// accounts, so it sits among real events.
func Poison(i int, accounts int) connector.Message {
	key := binary.BigEndian.AppendUint64(nil, uint64(i%max(accounts, 1))+1)
	var tag [4]byte
	payload := []byte("\xffpoison-" + strconv.Itoa(i) + "\xff")
	m := connector.Message{Key: key, Payload: payload}
	switch i % len(PoisonKind) {
	case 0:
		binary.LittleEndian.PutUint32(tag[:], uint32(TagDeposited))
		m.Headers = []connector.Field{
			{Name: connector.HeaderKey, Value: key},
			{Name: connector.HeaderType, Value: tag[:]},
			{Name: connector.HeaderProps, Value: []byte{9, 1, 0}},
		}
	case 1:
		h := connector.Headers{Key: key, Tag: TagDeposited, Ordering: planner.Relaxed, Algebra: algebra.Associative}
		m.Headers, _ = h.AppendFields(nil)
	case 2:
		h := connector.Headers{Key: key, Tag: TagUnknown, Ordering: planner.Relaxed}
		m.Headers, _ = h.AppendFields(nil)
	case 3:
		// no headers
	}
	return m
}
