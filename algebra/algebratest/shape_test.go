package algebratest

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
)

// failures is a rapid.TB that only records whether it failed and what was
// logged: the shape checks below must fail on it.
type failures struct {
	failed bool
	log    strings.Builder
}

func (f *failures) Helper()                    {}
func (f *failures) Name() string               { return "failures" }
func (f *failures) Logf(s string, args ...any) { f.log.WriteString(s + "\n") }
func (f *failures) Log(args ...any)            {}
func (f *failures) Skipf(string, ...any)       {}
func (f *failures) Skip(...any)                {}
func (f *failures) SkipNow()                   {}
func (f *failures) Errorf(s string, args ...any) {
	f.failed = true
	f.log.WriteString(s + "\n")
}
func (f *failures) Error(...any)                 { f.failed = true }
func (f *failures) Fatalf(s string, args ...any) { f.Errorf(s, args...) }
func (f *failures) Fatal(...any)                 { f.failed = true }
func (f *failures) FailNow()                     { f.failed = true }
func (f *failures) Fail()                        { f.failed = true }
func (f *failures) Failed() bool                 { return f.failed }

// TestShapeChecksCatchBrokenReductions feeds checkOwners and
// checkSurvivors reductions that no algebra of package algebra produces,
// since the exported API cannot build a wrong one.
func TestShapeChecksCatchBrokenReductions(t *testing.T) {
	eq := func(x, y int) bool { return x == y }
	tests := []struct {
		name  string
		kind  algebra.Kind
		run   []int
		out   []int
		owner []int
		ok    bool
	}{
		{"a lawful dedup", algebra.Idempotent, []int{1, 1, 2}, []int{1, 2}, []int{0, 0, 1}, true},
		{"a lawful distinct", algebra.IdempotentCommutative, []int{1, 2, 1}, []int{1, 2}, []int{0, 1, 0}, true},
		{"a lawful fold", algebra.Associative, []int{1, 2, 3}, []int{6}, []int{0, 0, 0}, true},
		{"an empty reduction of a non-empty run", algebra.Associative, []int{1}, nil, []int{0}, false},
		{"an associative reduction to two events", algebra.Associative, []int{1, 2}, []int{1, 2}, []int{0, 1}, false},
		{"an owner outside the reduction", algebra.Idempotent, []int{1, 1}, []int{1}, []int{0, 1}, false},
		{"survivors out of log order", algebra.IdempotentCommutative, []int{2, 1}, []int{1, 2}, []int{1, 0}, false},
		{"a survivor standing for no input", algebra.Idempotent, []int{1, 1}, []int{1, 1}, []int{0, 0}, false},
		{"an idempotent collapse of non-adjacent events", algebra.Idempotent, []int{1, 2, 1}, []int{1, 2}, []int{0, 1, 0}, false},
		{"a non-associative reduction that drops an event", algebra.NonAssociative, []int{1, 1}, []int{1}, []int{0, 0}, false},
		{"a commutative reduction that changes an event", algebra.Commutative, []int{1, 2}, []int{1, 3}, []int{0, 1}, false},
		{"a collapse into a different event", algebra.IdempotentCommutative, []int{1, 2}, []int{1}, []int{0, 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f failures
			rapid.Check(&f, func(rt *rapid.T) {
				checkOwners(rt, tt.kind, tt.run, tt.out, tt.owner)
				checkSurvivors(rt, tt.kind, tt.run, tt.out, tt.owner, eq)
			})
			if f.failed == tt.ok {
				t.Fatalf("failed = %v, want %v\n%s", f.failed, !tt.ok, f.log.String())
			}
		})
	}
}
