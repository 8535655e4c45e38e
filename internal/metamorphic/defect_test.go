package metamorphic

import (
	"testing"

	"github.com/strand-io/strand/planner"
)

// directed builds a case by hand: one event per entry of evs (input, type,
// key), one chunk, batches of batch, everything else off.
func directed(knobs Knobs, inputs []InputDesc, tables []string, nodes []NodeDesc, batch int, evs ...Rec) *Case {
	c := &Case{Knobs: knobs, Fail: map[int]Failure{}}
	c.Parts, c.Workers, c.Attempts = 1, 2, 1000
	if knobs.Isolation {
		c.Attempts = 3
	}
	c.Inputs, c.Tables, c.Nodes = inputs, tables, nodes
	for i, r := range evs {
		r.Kind = RecEvent
		r.Ev.ID = i + 1
		c.Gen = append(c.Gen, r)
	}
	c.Log = c.Gen
	c.Chunks, c.Steps, c.Clock, c.Restart = []int{len(c.Log)}, []int{0}, []bool{false}, []bool{false}
	c.Batches = []int{batch}
	return c
}

// TestDefectSharedTable is issue 23's defect 1 through the harness: a
// table fed by two sources, 200 events of one key from each, batches of
// one record. Before the fix (one writer per row) the engine lost updates
// there: two pipelines wrote one row.
func TestDefectSharedTable(t *testing.T) {
	knobs, _ := testKnobs()
	if !knobs.SharedTables {
		t.Skip("tables shared between inputs are switched off (-meta.shared-tables=false)")
	}
	in := func(name string) InputDesc {
		return InputDesc{Name: name, Types: []TypeDesc{{Tag: 1, Kind: KindFence, Fence: planner.Relaxed}}}
	}
	nodes := []NodeDesc{
		{ID: 0, Input: 0, Parent: -1, Topic: "meta/a", Tables: []int{0}, Child: -1},
		{ID: 1, Input: 1, Parent: -1, Topic: "meta/b", Tables: []int{0}, Child: -1},
	}
	var evs []Rec
	for range 200 {
		evs = append(evs, Rec{Input: 0, Ev: Ev{K: "x"}}, Rec{Input: 1, Ev: Ev{K: "x"}})
	}
	c := directed(knobs, []InputDesc{in("meta/a"), in("meta/b")}, []string{"counts"}, nodes, 1, evs...)
	runCase(t, c, "go test ./internal/metamorphic -run TestDefectSharedTable -meta.shared-tables", false)
}

// TestDefectIsolation is issue 23's defect 2 through the harness: in one
// key, a Permanent failure and a handler that always fails, each between
// healthy events of its run (a plain type and a reduced one), in one batch.
// Only the failing events may be dead-lettered, each with its own error;
// before the fix the engine dead-lettered their whole runs.
func TestDefectIsolation(t *testing.T) {
	knobs, _ := testKnobs()
	if !knobs.Isolation {
		t.Skip("isolated failures are switched off (-meta.isolation=false)")
	}
	inputs := []InputDesc{{Name: "meta/a", Types: []TypeDesc{{Tag: 1, Kind: KindFence, Fence: planner.Relaxed}, {Tag: 2, Kind: KindFold}}}}
	nodes := []NodeDesc{
		{ID: 0, Input: 0, Type: 0, Parent: -1, Topic: "meta/a", Tables: []int{0}, Child: -1},
		{ID: 1, Input: 0, Type: 1, Parent: -1, Topic: "meta/a", Tables: []int{0}, Child: -1},
	}
	var evs []Rec
	for ty := range 2 {
		for range 3 {
			evs = append(evs, Rec{Input: 0, Type: ty, Ev: Ev{K: "x"}})
		}
	}
	c := directed(knobs, inputs, []string{"t0"}, nodes, 1000, evs...)
	c.Fail[2] = Failure{Node: 0, Handler: 0, Mode: FailInPlace, Permanent: true}
	c.Fail[5] = Failure{Node: 1, Handler: 0, Mode: FailError, Always: true}
	runCase(t, c, "go test ./internal/metamorphic -run TestDefectIsolation -meta.isolation", false)
}
