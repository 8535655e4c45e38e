// Package planner turns one polled batch into an execution plan: keys, then
// segments, then runs, built from the records' headers alone (key, type tag,
// ordering). It is the step between reading a batch's headers and executing
// it; it does no I/O, decodes no payloads and is deterministic.
//
// # The ordering rules
//
// Ordering is always scoped to a key. For the events of one batch (and, as
// the executor handles one batch after another, across batches):
//
//  1. Events of different keys are never ordered against each other, even
//     when they share a partition; their keys may run concurrently.
//  2. Events of the same key and the same type always keep their log order,
//     whatever ordering they declare.
//  3. Events of the same key but different types keep the order their
//     orderings ask for. Relaxed asks for nothing. Acquire says "this event
//     opens something": later events depend on it. Release says "this event
//     closes something": it depends on everything before it. AcqRel is both.
//
// # Model
//
// Keys are independent: a plan lists them in order of first appearance and
// the executor may run them concurrently. Each key's events are cut into
// segments at the fences its events declare, walking them in log order:
//
//   - An Acquire or AcqRel event starts a new segment, and the run of its
//     type becomes that segment's head. The segment stays open: only a
//     Release ends a segment. (An AcqRel's release half, that everything
//     before it is applied before it, is kept by the cut before it.)
//   - A Release event ends the current segment, and the run of its type
//     becomes that segment's tail.
//   - A Relaxed event joins the current segment (starting one if there is
//     none open).
//   - Corner case: if a Release event's type already heads the current
//     segment and the segment also holds other types, the Release event gets
//     a segment of its own, because one run cannot be both first and last.
//     If the segment holds only that type, the Release event joins the head
//     run and ends the segment.
//
// A run is every event of one type in one segment, in log order. So a
// Relaxed event joins the head or tail run of its type when its type heads
// or tails the segment: in [B, A(Acquire), B, A] the second A is applied
// before the second B, in [A, B, A(Release), B] the first A is applied
// after the first B, and in [A(AcqRel), A, B, A] the last A joins the head
// run and is applied before B. All are allowed: a Relaxed event may
// move past Relaxed events of other types, and events of one type never
// swap.
//
// The executor runs a key's segments strictly one after another and, inside
// a segment, the head run, then every body run (in any order, concurrently
// if it likes), then the tail run.
//
// # What you can rely on
//
// For two events x before y in the log, of one key:
//
// The minimal promise, what the ordering rules ask for: x is applied before
// y if they share a type, or x is Acquire or AcqRel, or y is Release or
// AcqRel. Declare fences by this promise; it says what each ordering means.
//
// The conservative promise, what this planner actually gives and what you
// may rely on: x is applied before y unless they have different types and
// are both Relaxed. A fence holds back earlier and later events alike:
// nothing before an Acquire is applied after it, and nothing after a
// Release is applied before it, although the minimal promise would allow
// both. Only two Relaxed events of different types are ever reordered.
//
// The package's tests check both promises, and compare every plan with an
// independent implementation of the rules, on every batch of up to five
// records over two keys, three types and the four orderings, and on random
// batches.
//
// Examples on one account (deposits D and withdrawals W are Relaxed):
//
//   - Relaxed, [D1, W, D2]: one segment, runs D[D1 D2] and W[W] in any
//     order; W may pass either deposit, the deposits keep their order.
//   - Acquire, opening O in [D1, O, D2, W]: segments {D1} {head O; D2, W}.
//     Nothing after O is applied before it; D1 is applied before it too.
//   - Release, closing C in [D1, W, C, D2]: segments {D1, W; tail C} {D2}.
//     C waits for every earlier event; D2 waits for C.
//   - AcqRel, a freeze F in [D1, F, W, S], where S is a Relaxed event of
//     F's type: segments {D1} {head F S; W}. F is a full barrier: D1 before
//     it, W after it. S joins F's head run and so is applied before W, which
//     it may pass since both are Relaxed.
//
// # Invalid orderings
//
// An ordering value that is not one of Relaxed, Acquire, Release and AcqRel
// is never ignored: New and Planner.Plan treat it as AcqRel, the strictest
// reading, so such an event is a full barrier for its key (it plans exactly
// as AcqRel does: it cuts before itself and heads the new segment). Code that reads
// orderings from the wire should still validate them (connector.Headers does)
// and report bad input; the planner's rule only makes sure that a bad value
// can cost throughput but never order.
//
// # Cost
//
// Planning is O(n) in the batch size: one hash-map lookup per record to
// group keys, and a short scan per record to find its run. Planner reuses
// its buffers, so planning a batch allocates nothing once it is warm.
package planner

import (
	"fmt"
	"math"
)

// Record is what the planner needs to know about one event: its key, its
// type tag and its ordering. The planner never looks at payloads.
type Record[K comparable] struct {
	// Key is the key the event belongs to. Records with equal keys (==) are
	// ordered against each other; records with different keys never are.
	// Keys are compared as map keys are: a float NaN equals no key, not even
	// itself, and an interface key holding an incomparable value panics.
	Key K
	// Tag names the event's type.
	Tag Tag
	// Ordering is the fence the event declares. A value that is not valid
	// is treated as AcqRel.
	Ordering Ordering
}

// Plan is the execution plan of one batch: keys, each with segments, each
// with an optional head run, body runs and an optional tail run. Runs list
// indices into the records the plan was built from.
//
// A Plan is immutable once built and safe for concurrent reads. A plan
// returned by Planner.Plan is valid only until that Planner's next Plan
// call. The slices a Plan's methods return share its memory and must not be
// modified. Segments, runs and key plans are small values that are only
// meaningful with the plan that returned them.
type Plan[K comparable] struct {
	keys []KeyPlan[K]
	segs []Segment
	runs []Run
	idx  []int
}

// KeyPlan is one key of a plan: the key and where its segments are.
type KeyPlan[K comparable] struct {
	key        K
	first, end int32 // p.segs[first:end]
}

// Key returns the key.
func (k KeyPlan[K]) Key() K { return k.key }

// Segment is a slice of one key's events between fences: an optional head
// run, any number of body runs and an optional tail run. Every segment
// holds at least one run, and at most one run per type. A segment headed
// by an Acquire or AcqRel event holds only a head run when nothing of
// another type joins it before the next cut; a Release event with nothing
// before it in its segment, or one that gets a segment of its own, makes a
// segment of only a tail run.
type Segment struct {
	first, end int32 // p.runs[first:end]: head (if any), body runs, tail (if any)
	head, tail bool
}

// Run is every event of one type inside one segment of one key, in log
// order: the unit that is reduced and handed to a handler.
type Run struct {
	tag        Tag
	first, end int32 // p.idx[first:end]
}

// Tag returns the type tag of the run's events.
func (r Run) Tag() Tag { return r.tag }

// New builds the plan of records. It allocates a new plan; to plan batch
// after batch without allocating, use a Planner.
//
// An ordering value that is not valid is treated as AcqRel (see the package
// documentation). New panics only if len(records) exceeds math.MaxInt32,
// which no real batch does.
func New[K comparable](records []Record[K]) *Plan[K] {
	var pl Planner[K]
	return pl.Plan(records)
}

// Keys returns the plan's keys in order of first appearance in the batch.
// Keys are independent: their plans may be executed concurrently.
func (p *Plan[K]) Keys() []KeyPlan[K] { return p.keys[:len(p.keys):len(p.keys)] }

// Segments returns the segments of k in execution order: each must finish
// before the next starts. k must come from p.Keys.
func (p *Plan[K]) Segments(k KeyPlan[K]) []Segment { return p.segs[k.first:k.end:k.end] }

// Head returns the head run of s, which runs before every other run of s,
// and whether s has one.
func (p *Plan[K]) Head(s Segment) (Run, bool) {
	if !s.head {
		return Run{}, false
	}
	return p.runs[s.first], true
}

// Body returns the body runs of s, ordered by each run's first record. They
// run after the head and before the tail, in any order or concurrently.
func (p *Plan[K]) Body(s Segment) []Run {
	first, end := s.first, s.end
	if s.head {
		first++
	}
	if s.tail {
		end--
	}
	return p.runs[first:end:end]
}

// Tail returns the tail run of s, which runs after every other run of s,
// and whether s has one.
func (p *Plan[K]) Tail(s Segment) (Run, bool) {
	if !s.tail {
		return Run{}, false
	}
	return p.runs[s.end-1], true
}

// Records returns the indices, into the records the plan was built from,
// of r's events in log order.
func (p *Plan[K]) Records(r Run) []int { return p.idx[r.first:r.end:r.end] }

// Planner builds plans batch after batch, reusing its buffers, for the hot
// path where every polled batch is planned. The zero value is ready to use.
//
// A Planner keeps buffers as large as the largest batch it has planned. It
// is not safe for concurrent use; use one per partition pipeline.
type Planner[K comparable] struct {
	plan *Plan[K]

	keyIndex map[K]int32     // key -> index into plan.keys
	chains   []chain         // per key: its records, linked through next
	next     []int32         // per record: the next record of its key, later of its run
	cur      []openRun       // runs of the segment being built
	tags     map[Tag]tagSlot // tag -> run of a segment with many runs
	segGen   uint64          // serial number of the segment being built, across calls
}

// chain is a singly linked list of record indices through Planner.next.
type chain struct{ first, last int32 }

// openRun is a run of the segment being built.
type openRun struct {
	tag Tag
	chain
}

// tagSlot locates the run of a tag in the segment with serial number gen.
type tagSlot struct {
	gen uint64
	run int32
}

// linearRuns is how many runs of one segment the planner scans linearly to
// find a tag's run before it switches to the tags map.
const linearRuns = 8

// maxIdleKeys is the key count above which a Planner drops, rather than
// clears, a key map much larger than the batch at hand.
const maxIdleKeys = 4096

// maxIdleTags bounds the tags map a Planner keeps between batches.
const maxIdleTags = 4096

// Plan builds the plan of records, reusing the buffers of the previous call.
// The returned plan, and every slice it hands out, is valid only until the
// next Plan call on pl; planning the next batch overwrites it. Once pl has
// planned a batch at least as large (in records, keys, segments and runs),
// Plan allocates nothing.
//
// An ordering value that is not valid is treated as AcqRel (see the package
// documentation). Plan panics only if len(records) exceeds math.MaxInt32,
// which no real batch does.
func (pl *Planner[K]) Plan(records []Record[K]) *Plan[K] {
	if len(records) > math.MaxInt32 {
		panic(fmt.Sprintf("planner: batch of %d records exceeds %d", len(records), math.MaxInt32))
	}
	if pl.plan == nil {
		pl.plan = new(Plan[K])
	}
	p := pl.plan
	p.keys, p.segs, p.runs = p.keys[:0], p.segs[:0], p.runs[:0]
	if cap(p.idx) < len(records) {
		p.idx = make([]int, 0, len(records))
	}
	p.idx = p.idx[:0]
	if len(records) == 0 {
		return p
	}
	if len(pl.tags) > maxIdleTags {
		pl.tags = nil // its entries are all stale; do not keep a huge map
	}
	pl.groupKeys(records)
	for ki := range p.keys {
		pl.planKey(records, ki)
	}
	return p
}

// groupKeys lists the keys in order of first appearance and links each
// key's records, in log order, through pl.next.
func (pl *Planner[K]) groupKeys(records []Record[K]) {
	p := pl.plan
	if cap(pl.next) < len(records) {
		pl.next = make([]int32, len(records))
	}
	next := pl.next[:len(records)]
	switch n := len(pl.keyIndex); {
	case pl.keyIndex == nil || n > maxIdleKeys && n > 4*len(records):
		// Clearing costs the map's capacity: after a batch with far more
		// keys than this one, start afresh rather than clear a huge map.
		pl.keyIndex = make(map[K]int32)
	default:
		clear(pl.keyIndex)
	}
	chains := pl.chains[:0]
	index := pl.keyIndex
	// Batches often hold a few events of one key in a row; remembering the
	// last key skips the map for them.
	lastKey, lastKi := records[0].Key, int32(-1)
	for i := range records {
		k := records[i].Key
		ki := lastKi
		if ki < 0 || k != lastKey {
			var ok bool
			ki, ok = index[k]
			if !ok {
				ki = int32(len(chains))
				index[k] = ki
				p.keys = append(p.keys, KeyPlan[K]{key: k})
				chains = append(chains, chain{first: int32(i), last: int32(i)})
				next[i] = -1
				lastKey, lastKi = k, ki
				continue
			}
			lastKey, lastKi = k, ki
		}
		next[chains[ki].last] = int32(i)
		chains[ki].last = int32(i)
		next[i] = -1
	}
	pl.chains = chains
}

// planKey cuts the records of key ki into segments and runs.
func (pl *Planner[K]) planKey(records []Record[K], ki int) {
	p := pl.plan
	next := pl.next
	p.keys[ki].first = int32(len(p.segs))
	b := segmentBuilder[K]{pl: pl, tail: -1}
	for i := pl.chains[ki].first; i >= 0; {
		nx := next[i] // read before run linking reuses next[i]
		r := &records[i]
		switch o := r.Ordering; {
		case o == Relaxed:
			b.add(i, r.Tag)
		case o == Release:
			if b.head && pl.cur[0].tag == r.Tag && len(pl.cur) > 1 {
				// One run cannot be both first and last: the Release event
				// gets a segment of its own.
				b.flush()
			}
			ri := b.add(i, r.Tag)
			if !(b.head && ri == 0) {
				b.tail = ri
			}
			b.flush()
		default:
			// Acquire and AcqRel, and every invalid value, read as AcqRel:
			// cut before the event and head the new segment, which stays
			// open. Only a Release ends a segment; the release half of an
			// AcqRel is already kept by the cut before it.
			b.flush()
			b.head = true
			b.add(i, r.Tag)
		}
		i = nx
	}
	b.flush()
	p.keys[ki].end = int32(len(p.segs))
}

// segmentBuilder collects the runs of the segment being built in pl.cur.
type segmentBuilder[K comparable] struct {
	pl   *Planner[K]
	head bool  // pl.cur[0] is the head run
	tail int32 // index in pl.cur of the tail run, or -1
	last int32 // index in pl.cur of the run the previous record joined
}

// add appends record i to the run of tag in the current segment, creating
// the run if the segment has none, and returns the run's index in pl.cur.
func (b *segmentBuilder[K]) add(i int32, tag Tag) int32 {
	pl := b.pl
	next := pl.next
	next[i] = -1
	cur := pl.cur
	ri := b.find(tag)
	if ri < 0 {
		ri = int32(len(cur))
		pl.cur = append(cur, openRun{tag: tag, chain: chain{first: i, last: i}})
		if len(pl.cur) > linearRuns {
			b.index(ri)
		}
	} else {
		run := &cur[ri]
		next[run.last] = i
		run.last = i
	}
	b.last = ri
	return ri
}

// find returns the index in pl.cur of the run of tag, or -1.
func (b *segmentBuilder[K]) find(tag Tag) int32 {
	cur := b.pl.cur
	if len(cur) == 0 {
		return -1
	}
	if cur[b.last].tag == tag {
		return b.last
	}
	if len(cur) <= linearRuns {
		for j := range cur {
			if cur[j].tag == tag {
				return int32(j)
			}
		}
		return -1
	}
	if s, ok := b.pl.tags[tag]; ok && s.gen == b.pl.segGen {
		return s.run
	}
	return -1
}

// index records run ri in the tags map; when the segment has just outgrown
// the linear scan it records every run of the segment.
func (b *segmentBuilder[K]) index(ri int32) {
	pl := b.pl
	if pl.tags == nil {
		pl.tags = make(map[Tag]tagSlot)
	}
	if ri == linearRuns {
		for j := range pl.cur[:ri] {
			pl.tags[pl.cur[j].tag] = tagSlot{gen: pl.segGen, run: int32(j)}
		}
	}
	pl.tags[pl.cur[ri].tag] = tagSlot{gen: pl.segGen, run: ri}
}

// flush closes the current segment, if it holds any run: it writes the
// runs' records to the plan in stage order (head, body runs by first
// record, tail) and starts an empty segment.
func (b *segmentBuilder[K]) flush() {
	pl := b.pl
	cur := pl.cur
	if len(cur) == 0 {
		return
	}
	p := pl.plan
	seg := Segment{first: int32(len(p.runs)), head: b.head, tail: b.tail >= 0}
	start := 0
	if b.head {
		pl.emit(cur[0])
		start = 1
	}
	for j := start; j < len(cur); j++ {
		if int32(j) != b.tail {
			pl.emit(cur[j])
		}
	}
	if b.tail >= 0 {
		pl.emit(cur[b.tail])
	}
	seg.end = int32(len(p.runs))
	p.segs = append(p.segs, seg)
	pl.cur = cur[:0]
	pl.segGen++ // entries of the tags map now belong to a closed segment
	b.head, b.tail, b.last = false, -1, 0
}

// emit appends one run, with its records in log order, to the plan.
func (pl *Planner[K]) emit(r openRun) {
	p := pl.plan
	next := pl.next
	first := int32(len(p.idx))
	for i := r.first; i >= 0; i = next[i] {
		p.idx = append(p.idx, int(i))
	}
	p.runs = append(p.runs, Run{tag: r.tag, first: first, end: int32(len(p.idx))})
}
