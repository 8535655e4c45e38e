package planner_test

import (
	"fmt"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strand-io/strand/planner"
)

// strictest is the ordering the planner promises to plan o as.
func strictest(o planner.Ordering) planner.Ordering {
	if o.Valid() {
		return o
	}
	return planner.AcqRel
}

// mustPrecede is the minimal promise of the ordering rules: it reports
// whether x, before y in the log and of the same key, must be applied
// before y: the same type, or x acquires (Acquire, AcqRel), or y releases
// (Release, AcqRel).
func mustPrecede(x, y planner.Record[int]) bool {
	return x.Tag == y.Tag ||
		strictest(x.Ordering)&planner.Acquire != 0 ||
		strictest(y.Ordering)&planner.Release != 0
}

// keptInOrder is the stronger promise the planner gives: x, before y in the
// log and of the same key, is applied before y unless the two have
// different types and are both Relaxed. A fence is never reordered with an
// event of its key, earlier or later. It implies mustPrecede.
func keptInOrder(x, y planner.Record[int]) bool {
	return x.Tag == y.Tag ||
		strictest(x.Ordering) != planner.Relaxed ||
		strictest(y.Ordering) != planner.Relaxed
}

// checkPlan fails t unless p is a correct plan of batch, both by the
// ordering invariants and by the reference model of the ordering rules.
func checkPlan[K comparable](t testing.TB, batch []planner.Record[K], p *planner.Plan[K]) {
	t.Helper()
	var c checker
	ints, _ := toInts(batch)
	if err := c.invariants(ints, remapPlan(batch, p)); err != nil {
		t.Fatalf("%v\nplan %s", err, describe(p))
	}
	if got, want := c.encode(remapPlan(batch, p)), reference(nil, ints); !slices.Equal(got, want) {
		t.Fatalf("plan differs from the reference model\n got  %s\n want %v", describe(p), want)
	}
}

// toInts maps a batch's keys to small ints (in order of first appearance),
// which the checker works with.
func toInts[K comparable](batch []planner.Record[K]) ([]planner.Record[int], map[K]int) {
	ids := make(map[K]int)
	out := make([]planner.Record[int], len(batch))
	for i, r := range batch {
		id, ok := ids[r.Key]
		if !ok {
			id = len(ids)
			ids[r.Key] = id
		}
		out[i] = planner.Record[int]{Key: id, Tag: r.Tag, Ordering: r.Ordering}
	}
	return out, ids
}

// planView is a plan with int keys, as the checker sees it.
type planView struct {
	keys []int
	segs [][]segView // per key
}

type segView struct {
	hasHead, hasTail bool
	head, tail       runView
	body             []runView
}

type runView struct {
	tag     planner.Tag
	records []int
}

func remapPlan[K comparable](batch []planner.Record[K], p *planner.Plan[K]) planView {
	_, ids := toInts(batch)
	var v planView
	for _, k := range p.Keys() {
		id, ok := ids[k.Key()]
		if !ok {
			id = -1 // a key that is not in the batch
		}
		v.keys = append(v.keys, id)
		var segs []segView
		for _, s := range p.Segments(k) {
			segs = append(segs, viewSegment(p, s, nil))
		}
		v.segs = append(v.segs, segs)
	}
	return v
}

// viewSegment returns the view of s, appending its body runs to body.
func viewSegment[K comparable](p *planner.Plan[K], s planner.Segment, body []runView) segView {
	sv := segView{body: body}
	if r, ok := p.Head(s); ok {
		sv.hasHead, sv.head = true, runView{r.Tag(), p.Records(r)}
	}
	for _, r := range p.Body(s) {
		sv.body = append(sv.body, runView{r.Tag(), p.Records(r)})
	}
	if r, ok := p.Tail(s); ok {
		sv.hasTail, sv.tail = true, runView{r.Tag(), p.Records(r)}
	}
	return sv
}

// checker checks plans against the ordering invariants; its buffers are
// reused across checks.
type checker struct {
	seg, stage, run, pos []int
	seen                 []bool
	enc, ref             []int32
	// fastView's memory
	view planView
	segs []segView
	body []runView
}

const (
	stageHead = iota
	stageBody
	stageTail
)

// invariants returns an error unless plan v of batch (keys 0..k-1 in order
// of first appearance) puts every record in exactly one run, holds one key
// and one tag per run and one run per tag per segment, lists keys in order
// of first appearance and body runs by first record, and applies every pair
// of records in log order that the planner promises to keep in order
// (mustPrecede, and the stronger keptInOrder).
func (c *checker) invariants(batch []planner.Record[int], v planView) error {
	n := len(batch)
	c.seg, c.stage, c.run, c.pos = resize(c.seg, n), resize(c.stage, n), resize(c.run, n), resize(c.pos, n)
	c.seen = resize(c.seen, n)
	clear(c.seen)
	nkeys := 0
	for _, r := range batch {
		nkeys = max(nkeys, r.Key+1)
	}
	if len(v.keys) != nkeys {
		return fmt.Errorf("plan has %d keys, batch has %d", len(v.keys), nkeys)
	}
	gseg, grun := 0, 0
	for ki, key := range v.keys {
		if key != ki {
			return fmt.Errorf("key %d of the plan is batch key %d, want keys in order of first appearance", ki, key)
		}
		if len(v.segs[ki]) == 0 {
			return fmt.Errorf("key %d has no segments", key)
		}
		for si, s := range v.segs[ki] {
			var tags []planner.Tag
			visit := func(r runView, stage int) error {
				if len(r.records) == 0 {
					return fmt.Errorf("key %d segment %d has an empty run of tag %d", key, si, r.tag)
				}
				if slices.Contains(tags, r.tag) {
					return fmt.Errorf("key %d segment %d has two runs of tag %d", key, si, r.tag)
				}
				tags = append(tags, r.tag)
				for j, i := range r.records {
					switch {
					case i < 0 || i >= n:
						return fmt.Errorf("run lists record %d of a batch of %d", i, n)
					case c.seen[i]:
						return fmt.Errorf("record %d appears twice", i)
					case batch[i].Key != key:
						return fmt.Errorf("record %d of key %d is in a run of key %d", i, batch[i].Key, key)
					case batch[i].Tag != r.tag:
						return fmt.Errorf("record %d of tag %d is in a run of tag %d", i, batch[i].Tag, r.tag)
					case j > 0 && r.records[j-1] >= i:
						return fmt.Errorf("run %v is not in log order", r.records)
					}
					c.seen[i] = true
					c.seg[i], c.stage[i], c.run[i], c.pos[i] = gseg, stage, grun, j
				}
				grun++
				return nil
			}
			if !s.hasHead && !s.hasTail && len(s.body) == 0 {
				return fmt.Errorf("key %d segment %d is empty", key, si)
			}
			if s.hasHead {
				if err := visit(s.head, stageHead); err != nil {
					return err
				}
			}
			for bi, r := range s.body {
				if bi > 0 && s.body[bi-1].records[0] > r.records[0] {
					return fmt.Errorf("key %d segment %d: body runs not ordered by first record", key, si)
				}
				if err := visit(r, stageBody); err != nil {
					return err
				}
			}
			if s.hasTail {
				if err := visit(s.tail, stageTail); err != nil {
					return err
				}
			}
			gseg++
		}
	}
	for i := range batch {
		if !c.seen[i] {
			return fmt.Errorf("record %d is in no run", i)
		}
	}
	for y := range batch {
		for x := range y {
			if batch[x].Key != batch[y].Key {
				continue
			}
			before := c.seg[x] < c.seg[y] ||
				c.seg[x] == c.seg[y] && c.stage[x] < c.stage[y] ||
				c.run[x] == c.run[y] && c.pos[x] < c.pos[y]
			if before {
				continue
			}
			switch {
			case mustPrecede(batch[x], batch[y]):
				return fmt.Errorf("record %d (tag %d, %v) must be applied before record %d (tag %d, %v) by the ordering rules, but is not",
					x, batch[x].Tag, batch[x].Ordering, y, batch[y].Tag, batch[y].Ordering)
			case keptInOrder(batch[x], batch[y]):
				return fmt.Errorf("record %d (tag %d, %v) is not applied before record %d (tag %d, %v), but only two Relaxed events of different types may be reordered",
					x, batch[x].Tag, batch[x].Ordering, y, batch[y].Tag, batch[y].Ordering)
			}
		}
	}
	return nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Markers of the plan encoding that encode and reference produce.
const (
	encKey  = -1
	encSeg  = -2
	encHead = -3
	encBody = -4
	encTail = -5
)

// encode flattens v: per key encKey, per segment encSeg, per run a stage
// marker, the tag and the records.
func (c *checker) encode(v planView) []int32 {
	out := c.enc[:0]
	for ki := range v.keys {
		out = append(out, encKey, int32(v.keys[ki]))
		for _, s := range v.segs[ki] {
			out = append(out, encSeg)
			run := func(stage int32, r runView) {
				out = append(out, stage, int32(r.tag))
				for _, i := range r.records {
					out = append(out, int32(i))
				}
			}
			if s.hasHead {
				run(encHead, s.head)
			}
			for _, r := range s.body {
				run(encBody, r)
			}
			if s.hasTail {
				run(encTail, s.tail)
			}
		}
	}
	c.enc = out
	return out
}

// TestExhaustive plans every batch of up to 5 records drawn from 2 keys × 3
// tags × 4 orderings (8,308,825 batches), checks each plan against the
// ordering invariants and compares it with the reference model of the
// ordering rules.
//
// Under the race detector, which adds nothing to this single-goroutine test
// but makes it eight times slower, it checks one batch of each class of
// batches equal up to renaming keys and tags (keys and tags in order of
// first appearance): the planner compares keys and tags only for equality,
// so every class plans alike. In the default run under the race detector
// (or -short) it checks every class of up to 4 records and every second
// class of 5 in the order of enumeration (issue 33 item 7: half the
// time; the classes of 5 are 95% of them); with STRAND_SOAK=1 every class.
func TestExhaustive(t *testing.T) {
	const maxLen = 5
	canonicalOnly := raceEnabled || testing.Short()
	halfOfLongest := canonicalOnly && !crashtest.Soak()
	longest := 0 // classes of maxLen records met
	orderings := []planner.Ordering{planner.Relaxed, planner.Acquire, planner.Release, planner.AcqRel}
	var choices []planner.Record[int]
	for key := range 2 {
		for tag := range 3 {
			for _, o := range orderings {
				choices = append(choices, planner.Record[int]{Key: key + 10, Tag: planner.Tag(tag + 1), Ordering: o})
			}
		}
	}
	var (
		pl      planner.Planner[int]
		c       checker
		canon   = make([]planner.Record[int], maxLen)
		checked int
	)
	check := func(b []planner.Record[int]) {
		if canonicalOnly && !canonical(b) {
			return
		}
		if len(b) == maxLen {
			longest++
			if halfOfLongest && longest%2 == 0 {
				return
			}
		}
		p := pl.Plan(b)
		// Keys 10 and 11 renamed 0 and 1 in order of first appearance.
		first := -1
		for i, r := range b {
			if first < 0 {
				first = r.Key
			}
			canon[i] = r
			canon[i].Key = 0
			if r.Key != first {
				canon[i].Key = 1
			}
		}
		n := len(b)
		v := fastView(n, first, p, &c)
		if err := c.invariants(canon[:n], v); err != nil {
			t.Fatalf("batch %v: %v\nplan %s", b, err, describe(p))
		}
		c.ref = reference(c.ref[:0], canon[:n])
		if got, want := c.encode(v), c.ref; !slices.Equal(got, want) {
			t.Fatalf("batch %v: plan differs from the reference model\n got  %s\n want %v", b, describe(p), want)
		}
		checked++
	}
	// Every batch of length n in lexicographic order of the choices; when
	// only classes are checked, a prefix that is not canonical is not
	// extended (no batch that starts with it is canonical).
	batch := make([]planner.Record[int], maxLen)
	var extend func(n, i int)
	extend = func(n, i int) {
		if i == n {
			check(batch[:n])
			return
		}
		for _, r := range choices {
			batch[i] = r
			if canonicalOnly && !canonical(batch[:i+1]) {
				continue
			}
			extend(n, i+1)
		}
	}
	for n := 0; n <= maxLen; n++ {
		extend(n, 0)
	}
	t.Logf("checked %d batches (%d classes of %d records met)", checked, longest, maxLen)
}

// canonical reports whether b's keys and tags appear in order: key 10
// first, then 11, and tags 1, 2, 3.
func canonical(b []planner.Record[int]) bool {
	nextKey, nextTag := 10, planner.Tag(1)
	for _, r := range b {
		switch {
		case r.Key == nextKey:
			nextKey++
		case r.Key > nextKey:
			return false
		}
		switch {
		case r.Tag == nextTag:
			nextTag++
		case r.Tag > nextTag:
			return false
		}
	}
	return true
}

// fastView is remapPlan for the exhaustive test's two int keys, reusing
// the checker's memory.
func fastView(n, first int, p *planner.Plan[int], c *checker) planView {
	v := &c.view
	v.keys, v.segs = v.keys[:0], v.segs[:0]
	if cap(c.body) < n {
		c.body = make([]runView, 0, n) // a plan has at most n runs
	}
	body := c.body[:0]
	segs := c.segs[:0]
	for _, k := range p.Keys() {
		id := 0
		if k.Key() != first {
			id = 1
		}
		v.keys = append(v.keys, id)
		start := len(segs)
		for _, s := range p.Segments(k) {
			sv := viewSegment(p, s, body[len(body):])
			body = body[:len(body)+len(sv.body)]
			segs = append(segs, sv)
		}
		v.segs = append(v.segs, segs[start:])
	}
	c.body, c.segs = body, segs
	return *v
}

// FuzzPlan plans arbitrary batches, one record per input byte: key (2
// bits), tag (2 bits) and ordering (4 bits, including invalid values), and
// checks the ordering invariants and the reference model.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x20, 0x14, 0x11, 0x18, 0x14, 0x4c, 0x20, 0x14})
	f.Add([]byte{0x14, 0x20, 0x14, 0x10})             // [B, A(Acq), B, A]
	f.Add([]byte{0x10, 0x14, 0x40, 0x14})             // [A, B, A(Rel), B]
	f.Add([]byte{0x20, 0x14, 0x40, 0x14})             // the Release corner case
	f.Add([]byte{0x60, 0x10, 0x14, 0x10})             // [A(AcqRel), A, B, A]
	f.Add([]byte{0x60, 0x14, 0x40, 0x14})             // [A(AcqRel), B, A(Rel), B]
	f.Add([]byte{0x00, 0x35, 0x70, 0xf6, 0x6b, 0x03}) // invalid orderings
	var pl planner.Planner[uint8]
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			data = data[:512]
		}
		batch := make([]planner.Record[uint8], len(data))
		for i, b := range data {
			batch[i] = planner.Record[uint8]{Key: b & 3, Tag: planner.Tag(b >> 2 & 3), Ordering: planner.Ordering(b >> 4)}
		}
		p := pl.Plan(batch)
		checkPlan(t, batch, p)
		if got, want := describe(p), describe(planner.New(batch)); got != want {
			t.Fatalf("reused planner = %s, New = %s", got, want)
		}
	})
}

// TestRandomBatchesMatchReference compares the planner's full plans with the
// reference model's on random batches with about one fence in four
// records, where a batch without AcqRel is rare.
func TestRandomBatchesMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var (
		pl   planner.Planner[uint32]
		c    checker
		ref  []int32
		iter = 20_000
	)
	if testing.Short() || raceEnabled {
		iter = 2_000
	}
	for i := range iter {
		n := 1 + rng.IntN(64)
		batch := randomBatch(rng, n, 1+rng.IntN(4), 1+rng.IntN(5), 0.25)
		p := pl.Plan(batch)
		ints, _ := toInts(batch)
		v := remapPlan(batch, p)
		if err := c.invariants(ints, v); err != nil {
			t.Fatalf("batch %d %v: %v\nplan %s", i, batch, err, describe(p))
		}
		ref = reference(ref, ints)
		if got := c.encode(v); !slices.Equal(got, ref) {
			t.Fatalf("batch %d %v: plan differs from the reference model\n got  %s\n want %v", i, batch, describe(p), ref)
		}
	}
}

// TestCheckerRejects makes sure the invariants catch plans that break the
// ordering rules' minimal promise or the planner's stronger one, so that the
// tests above cannot pass vacuously.
func TestCheckerRejects(t *testing.T) {
	const A, B = 1, 2
	run := func(tag planner.Tag, records ...int) runView { return runView{tag, records} }
	tests := []struct {
		name  string
		batch []planner.Record[int]
		plan  planView
	}{
		{"a later event of another type applied before an acquire",
			[]planner.Record[int]{rec(0, A, planner.Acquire), rec(0, B, planner.Relaxed)},
			planView{[]int{0}, [][]segView{{{body: []runView{run(B, 1)}}, {hasHead: true, head: run(A, 0)}}}}},
		{"an earlier event of another type applied after a release",
			[]planner.Record[int]{rec(0, A, planner.Relaxed), rec(0, B, planner.Release)},
			planView{[]int{0}, [][]segView{{{hasTail: true, tail: run(B, 1)}, {body: []runView{run(A, 0)}}}}}},
		{"an acqrel applied after a later event of another type",
			[]planner.Record[int]{rec(0, A, planner.AcqRel), rec(0, B, planner.Relaxed)},
			planView{[]int{0}, [][]segView{{{hasHead: true, head: run(B, 1), body: []runView{run(A, 0)}}}}}},
		{"a later event applied before a release (the stronger promise)",
			[]planner.Record[int]{rec(0, A, planner.Release), rec(0, B, planner.Relaxed)},
			planView{[]int{0}, [][]segView{{{body: []runView{run(B, 1)}, hasTail: true, tail: run(A, 0)}}}}},
		{"an earlier event applied after an acquire (the stronger promise)",
			[]planner.Record[int]{rec(0, A, planner.Relaxed), rec(0, B, planner.Acquire)},
			planView{[]int{0}, [][]segView{{{hasHead: true, head: run(B, 1), body: []runView{run(A, 0)}}}}}},
		{"events of one type swapped",
			[]planner.Record[int]{rec(0, A, planner.Relaxed), rec(0, A, planner.Relaxed)},
			planView{[]int{0}, [][]segView{{{body: []runView{run(A, 1)}}, {body: []runView{run(A, 0)}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c checker
			if err := c.invariants(tt.batch, tt.plan); err == nil {
				t.Fatalf("invariants accept a plan that breaks the ordering")
			} else {
				t.Log(err)
			}
		})
	}
}
