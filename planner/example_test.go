package planner_test

import (
	"fmt"

	"github.com/strand-io/strand/planner"
)

// The seed's bank account: account 42 is opened, gets deposits and a
// withdrawal, is closed and re-opened; account 7 gets one deposit.
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
		{{Key: "a", Tag: 2, Ordering: planner.AcqRel}, {Key: "a", Tag: 1, Ordering: planner.Relaxed}},
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
