package workload

import (
	"fmt"
	"math/rand/v2"
	"unsafe"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// Config describes a workload.
type Config struct {
	// Events is how many events to generate.
	Events int
	// Accounts is how many accounts exist (ids 1..Accounts).
	Accounts int
	// Skew is the Zipf exponent s (> 1) of the account chosen per event;
	// account ranks are shuffled over ids, so hot accounts spread over
	// partitions.
	Skew float64
	// Lifecycle is the share of events that open or close an account (the
	// rest are deposits and withdrawals, half each).
	Lifecycle float64
	// Partitions is the topic's partition count; keys go to XXH32(key) % n.
	Partitions uint32
	// Seed makes the workload reproducible.
	Seed uint64
	// Cover makes every one of the Accounts accounts appear at least once
	// (it needs Events >= Accounts): Accounts of the events, evenly spaced,
	// go to the most popular account not touched yet instead of a Zipf
	// draw, so that the number of keys touched is Accounts whatever the
	// skew. The other events are drawn as without Cover. The scale scenario
	// uses it; the others leave it off.
	Cover bool
}

// Default is the workload of issues 5 and 6: 1,000,000 events over 10,000
// accounts with Zipf skew 1.1, 10% opens and closes, 8 partitions.
func Default() Config {
	return Config{Events: 1_000_000, Accounts: 10_000, Skew: 1.1, Lifecycle: 0.1, Partitions: 8, Seed: 1}
}

// Generator produces the workload's events in log (publish) order. The first event of an
// account always opens it; a lifecycle event closes an open account and
// re-opens a closed one. First opens count towards the lifecycle share, so
// deposits and withdrawals stay at 1 - Lifecycle of the events.
type Generator struct {
	cfg     Config
	rng     *rand.Rand
	zipf    *rand.Zipf
	perm    []uint32 // popularity rank → account id
	seen    bitset   // by account id: touched by an event so far
	open    bitset   // by account id: currently open
	touched int
	sweep   int // Cover: ranks below it are all touched
	counts  [5]int
	emitted int
}

// bitset is a set of account ids, one bit each (ids are 1..Accounts).
type bitset []uint64

func newBitset(n int) bitset       { return make(bitset, n/64+1) }
func (b bitset) has(i uint32) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) set(i uint32, v bool) {
	if v {
		b[i/64] |= 1 << (i % 64)
	} else {
		b[i/64] &^= 1 << (i % 64)
	}
}

// NewGenerator returns a generator for cfg.
func NewGenerator(cfg Config) (*Generator, error) {
	if cfg.Accounts < 1 || cfg.Accounts >= 1<<32-1 || cfg.Events < 0 || cfg.Skew <= 1 || cfg.Partitions < 1 || cfg.Lifecycle < 0 || cfg.Lifecycle > 1 {
		return nil, fmt.Errorf("workload: bad config %+v (need 1 ≤ accounts < 2^32-1, skew > 1, partitions ≥ 1, 0 ≤ lifecycle ≤ 1)", cfg)
	}
	if cfg.Cover && cfg.Events < cfg.Accounts {
		return nil, fmt.Errorf("workload: bad config %+v: touching every account needs at least as many events as accounts", cfg)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	g := &Generator{
		cfg:  cfg,
		rng:  rng,
		zipf: rand.NewZipf(rng, cfg.Skew, 1, uint64(cfg.Accounts-1)),
		perm: make([]uint32, cfg.Accounts),
		seen: newBitset(cfg.Accounts + 1),
		open: newBitset(cfg.Accounts + 1),
	}
	// rng.Perm(n), shuffled in place (the same permutation, without an
	// []int of n).
	for i := range g.perm {
		g.perm[i] = uint32(i + 1)
	}
	rng.Shuffle(len(g.perm), func(i, j int) { g.perm[i], g.perm[j] = g.perm[j], g.perm[i] })
	return g, nil
}

// Next returns the next event and folds it into the reference.
func (g *Generator) Next() Event {
	var id uint32
	if g.cfg.Cover && g.sweepSlot() {
		for g.sweep < len(g.perm) && g.seen.has(g.perm[g.sweep]) {
			g.sweep++
		}
		if g.sweep < len(g.perm) {
			id = g.perm[g.sweep]
		}
	}
	if id == 0 {
		id = g.perm[g.zipf.Uint64()]
	}
	seen, isOpen := g.seen.has(id), g.open.has(id)
	if !seen {
		g.seen.set(id, true)
		g.touched++
	}
	var e Event
	u := g.rng.Float64()
	// First opens are lifecycle events too: draw lifecycle events only
	// while their share is below cfg.Lifecycle, so the mix stays there.
	life := g.cfg.Lifecycle
	if float64(g.counts[KindOpened]+g.counts[KindClosed]) >= g.cfg.Lifecycle*float64(g.emitted+1) {
		life = 0
	}
	acct := AccountID(id)
	switch {
	case !seen:
		e = Event{Kind: KindOpened, Account: acct}
	case u < life:
		if isOpen {
			e = Event{Kind: KindClosed, Account: acct}
		} else {
			e = Event{Kind: KindOpened, Account: acct}
		}
	case u < life+(1-life)/2:
		e = Event{Kind: KindDeposited, Account: acct, Amount: 1 + g.rng.Int64N(1000)}
	default:
		e = Event{Kind: KindWithdrawn, Account: acct, Amount: 1 + g.rng.Int64N(100)}
	}
	switch e.Kind {
	case KindOpened:
		g.open.set(id, true)
	case KindClosed:
		g.open.set(id, false)
	}
	g.counts[e.Kind]++
	g.emitted++
	return e
}

// Accounts returns how many accounts the events so far touched.
func (g *Generator) Accounts() int { return g.touched }

// sweepSlot reports whether the event about to be emitted is one of the
// Accounts evenly spaced first-touch slots of Cover.
func (g *Generator) sweepSlot() bool {
	a, e, i := uint64(g.cfg.Accounts), uint64(g.cfg.Events), uint64(g.emitted)
	return (i+1)*a/e > i*a/e
}

// Mix returns how many events of each kind were generated.
func (g *Generator) Mix() Mix {
	return Mix{Opened: g.counts[KindOpened], Deposited: g.counts[KindDeposited],
		Withdrawn: g.counts[KindWithdrawn], Closed: g.counts[KindClosed]}
}

// Mix counts events per kind.
type Mix struct{ Opened, Deposited, Withdrawn, Closed int }

func (m *Mix) add(k Kind) {
	switch k {
	case KindOpened:
		m.Opened++
	case KindDeposited:
		m.Deposited++
	case KindWithdrawn:
		m.Withdrawn++
	case KindClosed:
		m.Closed++
	}
}

// String gives the shares in percent.
func (m Mix) String() string {
	n := float64(m.Opened + m.Deposited + m.Withdrawn + m.Closed)
	if n == 0 {
		return "empty"
	}
	return fmt.Sprintf("%.1f%% deposits, %.1f%% withdrawals, %.1f%% opens, %.1f%% closes",
		100*float64(m.Deposited)/n, 100*float64(m.Withdrawn)/n, 100*float64(m.Opened)/n, 100*float64(m.Closed)/n)
}

// entry locates one encoded event in a Log's arena.
type entry struct {
	off       uint32 // key bytes start here, the payload follows
	payLen    uint16
	keyLen    uint8
	tag       uint8
	ordering  planner.Ordering
	kind      algebra.Kind
	partition uint16
}

// Log is a workload encoded once, in publish order, in one arena: what a
// broker would hold. Per partition it keeps the indexes of its events, so a
// partition's batches can be cut without copying.
type Log struct {
	Config     Config
	Decls      Decls
	arena      []byte
	entries    []entry
	partitions [][]uint32 // partition → indexes into entries, in offset order
	reference  map[AccountID]Account
	mix        Mix
}

// Encode generates cfg's events and encodes them with decls.
func Encode(cfg Config, decls Decls) (*Log, error) {
	g, err := NewGenerator(cfg)
	if err != nil {
		return nil, err
	}
	return EncodeEvents(cfg, decls, func(int) Event { return g.Next() })
}

// EncodeEvents encodes cfg.Events events, event i being next(i), with
// decls, partitioned over cfg.Partitions, and folds them into the
// sequential reference.
func EncodeEvents(cfg Config, decls Decls, next func(i int) Event) (*Log, error) {
	if cfg.Partitions < 1 || cfg.Events < 0 {
		return nil, fmt.Errorf("workload: bad config %+v", cfg)
	}
	l := &Log{
		Config:     cfg,
		Decls:      decls,
		arena:      make([]byte, 0, cfg.Events*bytesPerEvent(decls.Codec)),
		entries:    make([]entry, 0, cfg.Events),
		partitions: make([][]uint32, cfg.Partitions),
		reference:  map[AccountID]Account{},
	}
	for p := range l.partitions {
		l.partitions[p] = make([]uint32, 0, cfg.Events/int(cfg.Partitions)*5/4+16)
	}
	var err error
	for i := range cfg.Events {
		e := next(i)
		off := len(l.arena)
		var h connector.Headers
		var keyLen int
		if l.arena, h, keyLen, err = decls.appendEvent(l.arena, e); err != nil {
			return nil, fmt.Errorf("workload: event %d: %w", i, err)
		}
		payLen := len(l.arena) - off - keyLen
		if len(l.arena) > 1<<32-1 || keyLen > connector.MaxKeyLen || keyLen == 0 || payLen > 1<<16-1 {
			return nil, fmt.Errorf("workload: event %d does not fit the log (key %d bytes, payload %d, arena %d)", i, keyLen, payLen, len(l.arena))
		}
		p := xxh32.Partition(l.arena[off:off+keyLen], cfg.Partitions)
		l.entries = append(l.entries, entry{
			off: uint32(off), payLen: uint16(payLen), keyLen: uint8(keyLen),
			tag: uint8(h.Tag), ordering: h.Ordering, kind: h.Algebra, partition: uint16(p),
		})
		l.partitions[p] = append(l.partitions[p], uint32(i))
		be, err := e.Bank()
		if err != nil {
			return nil, err
		}
		a := l.reference[e.Account]
		if err := bank.Apply(&a, be); err != nil {
			return nil, fmt.Errorf("workload: event %d: reference: %w", i, err)
		}
		l.mix.add(e.Kind)
		l.reference[e.Account] = a
	}
	return l, nil
}

// bytesPerEvent estimates key plus payload bytes of an average event, so
// the arena is allocated once.
func bytesPerEvent(c Codec) int {
	if c == JSON {
		return 8 + 40
	}
	return 8 + 16
}

// Index returns the publish-order index of the event at offset off of
// partition p.
func (l *Log) Index(p uint32, off int) int { return int(l.partitions[p][off]) }

// Key returns the key bytes of event i (publish order); they alias the log.
func (l *Log) Key(i int) []byte {
	e := &l.entries[i]
	return l.arena[e.off : e.off+uint32(e.keyLen) : e.off+uint32(e.keyLen)]
}

// Len returns the number of events.
func (l *Log) Len() int { return len(l.entries) }

// Bytes returns the memory the log holds: the arena of keys and payloads
// and its indexes.
func (l *Log) Bytes() int {
	n := cap(l.arena) + cap(l.entries)*int(unsafe.Sizeof(entry{}))
	for _, p := range l.partitions {
		n += cap(p) * 4
	}
	return n
}

// PayloadBytes returns the average payload size.
func (l *Log) PayloadBytes() float64 {
	if len(l.entries) == 0 {
		return 0
	}
	n := 0
	for _, e := range l.entries {
		n += int(e.payLen)
	}
	return float64(n) / float64(len(l.entries))
}

// Mix returns the event mix.
func (l *Log) Mix() Mix { return l.mix }

// Reference returns the sequential fold of the whole log.
func (l *Log) Reference() map[AccountID]Account { return l.reference }

// PartitionLen returns how many events partition p holds.
func (l *Log) PartitionLen(p uint32) int { return len(l.partitions[p]) }

// Partitions returns the partition count.
func (l *Log) Partitions() uint32 { return uint32(len(l.partitions)) }

func (l *Log) envelope(e *entry) stream.Envelope {
	k := l.arena[e.off : e.off+uint32(e.keyLen) : e.off+uint32(e.keyLen)]
	pEnd := e.off + uint32(e.keyLen) + uint32(e.payLen)
	return stream.Envelope{
		Headers: connector.Headers{Key: k, Tag: planner.Tag(e.tag), Ordering: e.ordering, Algebra: e.kind},
		Payload: l.arena[e.off+uint32(e.keyLen) : pEnd : pEnd],
	}
}

// Envelope returns event i (in publish order) ready to publish; its bytes
// alias the log.
func (l *Log) Envelope(i int) stream.Envelope { return l.envelope(&l.entries[i]) }

// Records appends to dst the records of partition p at offsets
// [from, from+n) (fewer at the end of the partition), as a source would
// deliver them; their bytes alias the log.
func (l *Log) Records(dst []connector.Record, p uint32, from, n int) []connector.Record {
	idx := l.partitions[p]
	end := min(from+n, len(idx))
	for off := from; off < end; off++ {
		env := l.envelope(&l.entries[idx[off]])
		dst = append(dst, connector.Record{Partition: p, Offset: uint64(off), Headers: env.Headers, Payload: env.Payload})
	}
	return dst
}

// Verify compares got (account → value, as read back from a store) with
// the reference and names the first differences.
func (l *Log) Verify(got map[AccountID]Account) error {
	return Compare(l.reference, got)
}

// Compare compares want and got and names up to five differences.
func Compare(want, got map[AccountID]Account) error {
	var diffs []string
	for id, w := range want {
		if g, ok := got[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("account %d missing (want %+v)", id, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("account %d: got %+v, want %+v", id, g, w))
		}
		if len(diffs) >= 5 {
			break
		}
	}
	for id, g := range got {
		if len(diffs) >= 5 {
			break
		}
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("account %d not in the reference (got %+v)", id, g))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("workload: %d accounts in the store, %d in the reference; differences: %v", len(got), len(want), diffs)
	}
	return nil
}
