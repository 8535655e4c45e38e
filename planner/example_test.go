package planner_test

import (
	"fmt"

	"github.com/strand-io/strand/planner"
)

// A bank account read model: account 42 is opened (Acquire), gets deposits
// and a withdrawal (Relaxed), is closed (Release) and re-opened; account 7
// gets one deposit.
func Example() {
	const (
		opened    planner.Tag = 1
		deposited planner.Tag = 2
		withdrawn planner.Tag = 3
		closed    planner.Tag = 4
	)
	batch := []planner.Record[uint64]{
		{Key: 42, Tag: opened, Ordering: planner.Acquire},    // 0
		{Key: 42, Tag: deposited, Ordering: planner.Relaxed}, // 1
		{Key: 7, Tag: deposited, Ordering: planner.Relaxed},  // 2
		{Key: 42, Tag: withdrawn, Ordering: planner.Relaxed}, // 3
		{Key: 42, Tag: deposited, Ordering: planner.Relaxed}, // 4
		{Key: 42, Tag: closed, Ordering: planner.Release},    // 5
		{Key: 42, Tag: opened, Ordering: planner.Acquire},    // 6
		{Key: 42, Tag: deposited, Ordering: planner.Relaxed}, // 7
	}
	p := planner.New(batch)
	for _, k := range p.Keys() {
		fmt.Printf("account %d\n", k.Key())
		for i, s := range p.Segments(k) {
			fmt.Printf("  segment %d:", i+1)
			if r, ok := p.Head(s); ok {
				fmt.Printf(" head %d%v", r.Tag(), p.Records(r))
			}
			for _, r := range p.Body(s) {
				fmt.Printf(" body %d%v", r.Tag(), p.Records(r))
			}
			if r, ok := p.Tail(s); ok {
				fmt.Printf(" tail %d%v", r.Tag(), p.Records(r))
			}
			fmt.Println()
		}
	}
	// Output:
	// account 42
	//   segment 1: head 1[0] body 2[1 4] body 3[3] tail 4[5]
	//   segment 2: head 1[6] body 2[7]
	// account 7
	//   segment 1: body 2[2]
}

// A Planner reuses its buffers from batch to batch; each plan is valid until
// the next call.
func ExamplePlanner() {
	var pl planner.Planner[string]
	for _, batch := range [][]planner.Record[string]{
		{{Key: "a", Tag: 1, Ordering: planner.Relaxed}, {Key: "b", Tag: 1, Ordering: planner.Relaxed}},
		{{Key: "a", Tag: 2, Ordering: planner.Release}, {Key: "a", Tag: 1, Ordering: planner.Relaxed}},
	} {
		p := pl.Plan(batch)
		for _, k := range p.Keys() {
			fmt.Printf("%s: %d segment(s)\n", k.Key(), len(p.Segments(k)))
		}
	}
	// Output:
	// a: 1 segment(s)
	// b: 1 segment(s)
	// a: 2 segment(s)
}

// Each fence on one account (tags: 1 opened, 2 deposited, 3 withdrawn,
// 4 closed, 5 status changed). Runs print as tag[records]; braces are
// segments, which run one after another; inside one, the head (h) runs
// first, then the body runs (b), then the tail (t).
func Example_fences() {
	const (
		rlx = planner.Relaxed
		acq = planner.Acquire
		rel = planner.Release
		ar  = planner.AcqRel
	)
	show := func(name string, events ...planner.Record[int]) {
		p := planner.New(events)
		fmt.Printf("%-8s", name)
		for _, s := range p.Segments(p.Keys()[0]) {
			fmt.Print(" {")
			sep := ""
			if r, ok := p.Head(s); ok {
				fmt.Printf("%sh%d%v", sep, r.Tag(), p.Records(r))
				sep = " "
			}
			for _, r := range p.Body(s) {
				fmt.Printf("%sb%d%v", sep, r.Tag(), p.Records(r))
				sep = " "
			}
			if r, ok := p.Tail(s); ok {
				fmt.Printf("%st%d%v", sep, r.Tag(), p.Records(r))
			}
			fmt.Print("}")
		}
		fmt.Println()
	}
	ev := func(tag planner.Tag, o planner.Ordering) planner.Record[int] {
		return planner.Record[int]{Key: 42, Tag: tag, Ordering: o}
	}
	// Relaxed: the withdrawal may pass either deposit; the deposits keep
	// their order.
	show("Relaxed", ev(2, rlx), ev(3, rlx), ev(2, rlx))
	// Acquire: nothing after the opening is applied before it, and the
	// deposit before it is applied before it.
	show("Acquire", ev(2, rlx), ev(1, acq), ev(2, rlx), ev(3, rlx))
	// Release: the closing waits for every earlier event, and the deposit
	// after it waits for the closing.
	show("Release", ev(2, rlx), ev(3, rlx), ev(4, rel), ev(2, rlx))
	// AcqRel: the freeze (5) is a full barrier. The later, Relaxed status
	// change (5) joins the freeze's head run and so is applied before the
	// withdrawal: two Relaxed events of different types may swap.
	show("AcqRel", ev(2, rlx), ev(5, ar), ev(3, rlx), ev(5, rlx))
	// Output:
	// Relaxed  {b2[0 2] b3[1]}
	// Acquire  {b2[0]} {h1[1] b2[2] b3[3]}
	// Release  {b2[0] b3[1] t4[2]} {b2[3]}
	// AcqRel   {b2[0]} {h5[1 3] b3[2]}
}
