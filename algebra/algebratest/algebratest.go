// Package algebratest checks that an algebra, and the projection that
// applies its events to state, keep the law the algebra's Kind claims.
//
// The executor trusts a run's algebra: it reduces the run before applying
// it (docs/design.md §3), so a combine that is not associative, or a projection
// that is not idempotent under a Dedup, corrupts state silently. The
// checkers here find such mistakes with property-based tests
// (pgregory.net/rapid): they draw random events and states, reduce, apply,
// and compare, and on failure report a shrunk counterexample.
//
// Use them in a test of every event type that declares an algebra:
//
//	func TestDepositsLaw(t *testing.T) {
//		algebratest.Check(t, deposits, genDeposit, func(x, y Deposited) bool { return x == y })
//		algebratest.CheckProjection(t, deposits, genAccount, genDeposit, applyDeposit, accountsEqual)
//	}
//
// It lives apart from package algebra so that rapid is linked into test
// binaries only.
package algebratest

import (
	"slices"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
)

// maxRun is the longest run the checkers draw before injecting duplicates.
const maxRun = 24

// maxDuplicates is how many duplicates the checkers inject, at most, into a
// run of an Idempotent or IdempotentCommutative algebra.
const maxDuplicates = 4

// Check fails t unless a keeps the law a.Kind() claims on runs of events
// drawn from gen; equal says when two events are the same. It checks, on
// random runs:
//
//   - every algebra: Reduce returns a non-empty run for a non-empty one,
//     maps every input to a survivor through owner, keeps the survivors in
//     log order, and reducing a reduced run changes nothing;
//   - NonAssociative and Commutative: Reduce removes nothing;
//   - Associative: the run folds into one event, and reducing a run whole
//     equals reducing any two halves apart and then together, which holds
//     exactly when the combine is associative;
//   - Idempotent: only events equal to the event before them are dropped,
//     each into that event (runs get adjacent duplicates injected);
//   - IdempotentCommutative: only events equal to an earlier one are
//     dropped, each into it (runs get duplicates injected anywhere).
//
// Check says nothing about how events are applied; CheckProjection does.
// It runs rapid.Check once, so its cost is rapid's number of checks
// (-rapid.checks, 100 by default) times a few reductions of up to 28
// events. t is usually a *testing.T; Check fails it on nil arguments.
func Check[E any](t rapid.TB, a algebra.Algebra[E], gen *rapid.Generator[E], equal func(x, y E) bool) {
	t.Helper()
	if gen == nil || equal == nil {
		t.Fatalf("algebratest: Check of a %v algebra needs a generator and an equal function", a.Kind())
		return
	}
	rapid.Check(t, func(rt *rapid.T) {
		run := drawRun(rt, a.Kind(), gen)
		out, owner := reduce(a, run)
		checkOwners(rt, a.Kind(), run, out, owner)
		checkSurvivors(rt, a.Kind(), run, out, owner, equal)
		if again, _ := reduce(a, out); !slices.EqualFunc(again, out, equal) {
			rt.Fatalf("reducing the reduced run %v again gives %v", out, again)
		}
		if a.Kind() == algebra.Associative && len(run) >= 2 {
			split := rapid.IntRange(1, len(run)-1).Draw(rt, "split")
			left, _ := reduce(a, run[:split])
			right, _ := reduce(a, run[split:])
			both, _ := reduce(a, append(slices.Clip(left), right...))
			if !equal(both[0], out[0]) {
				rt.Fatalf("the combine is not associative: folding %v whole gives %v, folding %v and %v apart gives %v and %v, and those together %v",
					run, out[0], run[:split], run[split:], left[0], right[0], both[0])
			}
		}
	})
}

// CheckProjection fails t unless applying a reduced run to a state has the
// same effect as applying the whole run in log order, for random states
// drawn from state and runs of events drawn from gen; this is the property
// a projection needs for its algebra to be safe. apply applies one event to
// a state and returns the new state; equal says when two states are the
// same.
//
// Runs of Idempotent algebras get adjacent duplicates injected, runs of
// IdempotentCommutative algebras get duplicates injected anywhere, so that
// the reduction has something to remove. For Commutative and
// IdempotentCommutative algebras CheckProjection also checks that applying
// the run in a random order gives the same state, since the executor may
// apply such a run in any order.
//
// apply must not modify the state it is given in place (copy maps and
// slices it changes), because the checker applies runs to the same state
// more than once. CheckProjection also checks Reduce's owner mapping, but
// not the events themselves; use Check for those. It runs rapid.Check once;
// t is usually a *testing.T, and CheckProjection fails it on nil arguments.
func CheckProjection[S, E any](t rapid.TB, a algebra.Algebra[E], state *rapid.Generator[S], gen *rapid.Generator[E], apply func(S, E) S, equal func(x, y S) bool) {
	t.Helper()
	if state == nil || gen == nil || apply == nil || equal == nil {
		t.Fatalf("algebratest: CheckProjection of a %v algebra needs state and event generators, an apply and an equal function", a.Kind())
		return
	}
	applyAll := func(s S, run []E) S {
		for _, e := range run {
			s = apply(s, e)
		}
		return s
	}
	rapid.Check(t, func(rt *rapid.T) {
		s := state.Draw(rt, "state")
		run := drawRun(rt, a.Kind(), gen)
		want := applyAll(s, run)
		out, owner := reduce(a, run)
		checkOwners(rt, a.Kind(), run, out, owner)
		if got := applyAll(s, out); !equal(got, want) {
			rt.Fatalf("the projection does not keep the %v law: applying the run %v gives %v, applying its reduction %v gives %v",
				a.Kind(), run, want, out, got)
		}
		switch a.Kind() {
		case algebra.Commutative, algebra.IdempotentCommutative:
			perm := rapid.Permutation(run).Draw(rt, "permutation")
			if got := applyAll(s, perm); !equal(got, want) {
				rt.Fatalf("the projection does not keep the %v law: applying the run %v gives %v, applying it as %v gives %v",
					a.Kind(), run, want, perm, got)
			}
		}
	})
}

// drawRun draws a run of events and, for the idempotent kinds, injects
// copies of some of its events: right after the original for Idempotent,
// anywhere for IdempotentCommutative.
func drawRun[E any](t *rapid.T, k algebra.Kind, gen *rapid.Generator[E]) []E {
	run := rapid.SliceOfN(gen, 0, maxRun).Draw(t, "run")
	if k != algebra.Idempotent && k != algebra.IdempotentCommutative || len(run) == 0 {
		return run
	}
	n := rapid.IntRange(0, maxDuplicates).Draw(t, "duplicates")
	for range n {
		j := rapid.IntRange(0, len(run)-1).Draw(t, "duplicate of")
		at := j + 1
		if k == algebra.IdempotentCommutative {
			at = rapid.IntRange(0, len(run)).Draw(t, "duplicate at")
		}
		run = slices.Insert(run, at, run[j])
	}
	return run
}

// reduce reduces a copy of run and returns the result and the owners.
func reduce[E any](a algebra.Algebra[E], run []E) ([]E, []int) {
	owner := make([]int, len(run))
	for i := range owner {
		owner[i] = -1 // Reduce must set every owner
	}
	return a.Reduce(slices.Clone(run), owner), owner
}

// checkOwners checks the shape of a reduction: lengths, and an owner
// mapping in which survivors appear in log order (survivor j is first
// owned after survivor j-1) and every survivor stands for some input.
func checkOwners[E any](t *rapid.T, k algebra.Kind, run, out []E, owner []int) {
	switch {
	case len(run) == 0 && len(out) != 0:
		t.Fatalf("reducing an empty run gives %d events", len(out))
	case len(run) > 0 && len(out) == 0:
		t.Fatalf("reducing %v gives an empty run", run)
	case len(out) > len(run):
		t.Fatalf("reducing %d events gives %d", len(run), len(out))
	}
	last := -1
	for i, o := range owner {
		switch {
		case o < 0 || o >= len(out):
			t.Fatalf("owner[%d] = %d, outside the %d reduced events", i, o, len(out))
		case o > last+1:
			t.Fatalf("owner[%d] = %d before any input maps to %d: survivors out of log order (owners %v)", i, o, last+1, owner)
		case o == last+1:
			last++
		case k == algebra.Idempotent && o != last:
			t.Fatalf("owner[%d] = %d after an input mapped to %d: an Idempotent algebra may only collapse adjacent events (owners %v)", i, o, last, owner)
		}
	}
	if last != len(out)-1 {
		t.Fatalf("no input maps to reduced events %d..%d (owners %v)", last+1, len(out)-1, owner)
	}
	switch k {
	case algebra.Associative:
		if len(run) > 0 && len(out) != 1 {
			t.Fatalf("an Associative algebra reduced %d events to %d, want 1", len(run), len(out))
		}
	case algebra.NonAssociative, algebra.Commutative:
		for i, o := range owner {
			if o != i {
				t.Fatalf("a %v algebra folded input %d into reduced event %d; it may remove nothing", k, i, o)
			}
		}
	}
}

// checkSurvivors checks that a reduction kept events the law allows it to
// drop only into events equal to them.
func checkSurvivors[E any](t *rapid.T, k algebra.Kind, run, out []E, owner []int, equal func(x, y E) bool) {
	switch k {
	case algebra.NonAssociative, algebra.Commutative:
		for i := range run {
			if !equal(run[i], out[i]) {
				t.Fatalf("a %v algebra changed event %d from %v to %v", k, i, run[i], out[i])
			}
		}
	case algebra.Idempotent, algebra.IdempotentCommutative:
		for i, o := range owner {
			if !equal(run[i], out[o]) {
				t.Fatalf("a %v algebra collapsed event %d, %v, into a different event %v", k, i, run[i], out[o])
			}
		}
	}
}
