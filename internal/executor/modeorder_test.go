package executor

import (
	"slices"
	"testing"
)

// A runner's emitting handlers go KeyBy steps first, each mode's in the
// order they were declared (modeOrder is a stable sort, descending).
func TestModeOrderPutsKeyByFirstAndKeepsDeclarationOrder(t *testing.T) {
	for _, c := range []struct {
		modes []EmitMode
		want  []int
	}{
		{nil, []int{}},
		{[]EmitMode{EmitTo}, []int{0}},
		{[]EmitMode{EmitTo, EmitKeyBy}, []int{1, 0}},
		{[]EmitMode{EmitTo, EmitKeyBy, EmitTo, EmitKeyBy}, []int{1, 3, 0, 2}},
		{[]EmitMode{EmitKeyBy, EmitKeyBy, EmitTo}, []int{0, 1, 2}},
	} {
		if got := modeOrder(c.modes); !slices.Equal(got, c.want) {
			t.Errorf("modeOrder(%v) = %v, want %v", c.modes, got, c.want)
		}
	}
}
