package planner_test

import "github.com/strand-io/strand/planner"

// This file is a second, independent implementation of the ordering rules:
// the reference model the tests compare every plan with, record for record.
// It is transcribed from the rules' text, as plainly as possible, and shares
// no code and no data structure with the planner. The rules, for the events
// of one key walked in log order:
//
//   - An Acquire or AcqRel event starts a new segment, and the run of its
//     type becomes that segment's head.
//   - A Release event ends the current segment, and the run of its type
//     becomes that segment's tail.
//   - Relaxed events join the current segment.
//   - If a Release event's type is already the head of the current segment
//     and the segment also holds other types, the Release event gets a
//     segment of its own, because one run cannot be both first and last.
//     (If the segment holds only that type, there is no other run to come
//     between them: the Release event is in the head run, and ends the
//     segment.)
//   - A run holds every event of one type in that segment, in log order.
//   - An ordering value that is not valid is read as AcqRel.
//
// Only a Release ends a segment. An AcqRel event is cut like an Acquire:
// its release half (everything before it is applied before it) is already
// kept by the cut before it.

// refSegment is a segment of the reference model: its events in log order
// and which type heads and which tails it.
type refSegment struct {
	events           []int // indices into the batch
	headTag, tailTag planner.Tag
	hasHead, hasTail bool
}

// refOrdering is how the reference model reads an ordering value.
func refOrdering(o planner.Ordering) planner.Ordering {
	switch o {
	case planner.Relaxed, planner.Acquire, planner.Release, planner.AcqRel:
		return o
	}
	return planner.AcqRel
}

// refSegments cuts the events of key, in log order, into segments.
func refSegments(batch []planner.Record[int], key int) []refSegment {
	var (
		segs []refSegment
		cur  refSegment
		open bool // cur has at least one event
	)
	endSegment := func() {
		if open {
			segs = append(segs, cur)
		}
		cur, open = refSegment{}, false
	}
	join := func(i int) {
		cur.events = append(cur.events, i)
		open = true
	}
	holdsOtherTypes := func(tag planner.Tag) bool {
		for _, i := range cur.events {
			if batch[i].Tag != tag {
				return true
			}
		}
		return false
	}
	for i, e := range batch {
		if e.Key != key {
			continue
		}
		switch refOrdering(e.Ordering) {
		case planner.Acquire, planner.AcqRel:
			// Starts a new segment; the run of its type is the head.
			endSegment()
			cur.hasHead, cur.headTag = true, e.Tag
			join(i)
		case planner.Release:
			if cur.hasHead && cur.headTag == e.Tag && holdsOtherTypes(e.Tag) {
				// The corner case: a segment of its own.
				endSegment()
			}
			join(i)
			if !(cur.hasHead && cur.headTag == e.Tag) {
				cur.hasTail, cur.tailTag = true, e.Tag
			}
			endSegment() // a Release ends the current segment
		default: // Relaxed
			join(i)
		}
	}
	endSegment()
	return segs
}

// refRuns groups the events of s into runs: one per type, in log order,
// listed by their first event.
func refRuns(batch []planner.Record[int], s refSegment) []runView {
	var runs []runView
next:
	for _, i := range s.events {
		for j := range runs {
			if runs[j].tag == batch[i].Tag {
				runs[j].records = append(runs[j].records, i)
				continue next
			}
		}
		runs = append(runs, runView{tag: batch[i].Tag, records: []int{i}})
	}
	return runs
}

// referencePlan plans batch (keys 0..k-1 in order of first appearance) by
// the ordering rules.
func referencePlan(batch []planner.Record[int]) planView {
	var v planView
	nkeys := 0
	for _, r := range batch {
		nkeys = max(nkeys, r.Key+1)
	}
	for key := range nkeys {
		v.keys = append(v.keys, key)
		var segs []segView
		for _, s := range refSegments(batch, key) {
			var sv segView
			for _, r := range refRuns(batch, s) {
				switch {
				case s.hasHead && r.tag == s.headTag:
					sv.hasHead, sv.head = true, r
				case s.hasTail && r.tag == s.tailTag:
					sv.hasTail, sv.tail = true, r
				default:
					sv.body = append(sv.body, r) // ordered by first event
				}
			}
			segs = append(segs, sv)
		}
		v.segs = append(v.segs, segs)
	}
	return v
}

// reference returns the encoding (see checker.encode) of the reference
// model's plan of batch, reusing out's memory.
func reference(out []int32, batch []planner.Record[int]) []int32 {
	c := checker{enc: out}
	return c.encode(referencePlan(batch))
}
