package metamorphic

import (
	"reflect"
	"testing"
	"time"
)

// rowBefore accepts exactly the rows a fold goes through: lanes that are
// prefixes, sums no larger, observations and lookups kept.
func TestRowBefore(t *testing.T) {
	full := Row{Lanes: map[string][]int{"a": {1, 2, 3}, "b": {4}}, Sums: map[string]int64{"s": 7},
		Obs: map[int]map[string]int64{2: {"a": 1}}, Looks: map[int]int64{3: 9}, XLooks: map[int]int64{1: 5}}
	before := []Row{
		{},
		{Lanes: map[string][]int{"a": {1}}},
		{Lanes: map[string][]int{"a": {1, 2}}, Sums: map[string]int64{"s": 3}, Obs: map[int]map[string]int64{2: {"a": 1}}},
		{XLooks: map[int]int64{1: 0}}, // a cross read's value depends on timing
		full,
	}
	for i, r := range before {
		if !rowBefore(r, full) {
			t.Errorf("row %d %+v: not before %+v", i, r, full)
		}
	}
	notBefore := []Row{
		{Lanes: map[string][]int{"a": {2}}},          // not a prefix
		{Lanes: map[string][]int{"a": {1, 2, 3, 5}}}, // longer
		{Lanes: map[string][]int{"c": {1}}},          // a lane the row does not have
		{Sums: map[string]int64{"s": 8}},
		{Obs: map[int]map[string]int64{2: {"a": 2}}},
		{Obs: map[int]map[string]int64{5: {}}},
		{Looks: map[int]int64{3: 8}},
		{XLooks: map[int]int64{7: 0}},
	}
	for i, r := range notBefore {
		if rowBefore(r, full) {
			t.Errorf("row %d %+v: before %+v", i, r, full)
		}
	}
}

// A stale answer must hold the newest owner answer received before the
// copy was current, and need not hold a later one.
func TestStandbyMissedBy(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r1 := Row{Lanes: map[string][]int{"a": {1}}}
	r2 := Row{Lanes: map[string][]int{"a": {1, 2}}}
	kr := &keyReads{at: []time.Time{t0, t0.Add(time.Second)}, rows: []Row{r1, r2}}
	if i := kr.missedBy(t0.Add(-time.Millisecond), Row{}, false); i != -1 {
		t.Errorf("current before every owner answer: missed %d", i)
	}
	if i := kr.missedBy(t0.Add(500*time.Millisecond), r1, true); i != -1 {
		t.Errorf("current after the first answer, holding it: missed %d", i)
	}
	if i := kr.missedBy(t0.Add(500*time.Millisecond), Row{}, false); i != 0 {
		t.Errorf("current after the first answer, no row: missed %d, want 0", i)
	}
	if i := kr.missedBy(t0.Add(2*time.Second), r1, true); i != 1 {
		t.Errorf("current after both answers, holding the first only: missed %d, want 1", i)
	}
}

// The group knob picks about one seed in eight, from the seed alone:
// every other seed's case is the one it was without the knob.
func TestGroupKeepsOtherSeeds(t *testing.T) {
	on, off := DefaultKnobs(), DefaultKnobs()
	off.Group = false
	groups := 0
	for s := uint64(1); s <= 400; s++ {
		c := Generate(s, on)
		if c.Group != nil {
			groups++
			if len(c.Group.Ops) != len(c.Chunks) || c.Group.Instances < 2 || c.Group.Instances > 3 {
				t.Fatalf("seed %d: plan %+v for %d chunks", s, c.Group, len(c.Chunks))
			}
			continue
		}
		// The whole case, not only its printed form (String takes most
		// of the time under -race): every field but the knob itself.
		want := Generate(s, off)
		want.Knobs.Group = true
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("seed %d: the group knob changed a case that is not a group's:\n%s\nwant\n%s", s, c, want)
		}
	}
	if groups < 25 || groups > 75 {
		t.Errorf("%d group cases in 400 seeds, want about 50", groups)
	}
}
