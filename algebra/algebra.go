// Package algebra names the laws a run of one event type may promise and
// reduces runs as those laws allow.
//
// A run is every event of one type inside one segment of one key, in log
// order (see package planner). Before the executor hands a run to its
// handler (docs/design.md §3: decode → reduce → apply), it reduces the run with
// the type's Algebra, so that, for example, a hundred deposits to one
// account become one write. What a reduction may do depends on the law the
// event type promises, its Kind:
//
//   - NonAssociative (None): nothing; the run is applied as it is.
//   - Associative (Fold, Sum): the whole run folds into one event with a
//     combine function.
//   - Idempotent (Dedup, DedupFunc): adjacent equal events collapse.
//   - Commutative (Unordered): the run may be applied in any order; nothing
//     is removed.
//   - IdempotentCommutative (Distinct, DistinctBy): duplicates anywhere in
//     the run collapse.
//
// A law is a promise the package cannot verify at run time; a wrong one
// silently corrupts state. Package algebratest checks a user's algebra and
// projection against the law they claim, with property-based tests.
//
// Algebras are plain values, typed with generics and free of reflection.
// They hold no mutable state and are safe for concurrent use.
package algebra

import "fmt"

// Algebra is the law one event type promises, with the reduction it allows.
// The zero value is the NonAssociative algebra: Reduce returns the run
// unchanged.
//
// An Algebra is immutable and safe for concurrent use, as long as the
// functions it was built from are.
type Algebra[E any] struct {
	kind   Kind
	reduce func(run []E, owner []int) []E // nil: no reduction
}

// Kind returns the law the algebra promises; it travels in every message's
// strand-props header.
func (a Algebra[E]) Kind() Kind { return a.kind }

// Reduce reduces one run (events of one key and one type, in log order) as
// a.Kind() allows, and returns the reduced run, which is non-empty when run
// is. The survivors keep their log order. Reduce may overwrite run's
// elements and returns a prefix of it; keep a copy of run if the original
// events are still needed.
//
// If owner is non-nil, Reduce sets owner[i], for every i < len(run), to the
// index in the returned slice of the event that input i was folded into, so
// that the caller can tell which input records each reduced event stands
// for. owner must then be at least as long as run; Reduce panics otherwise,
// as that is a bug in the caller.
//
// Reduce costs one pass over the run plus the algebra's own functions (a
// combine per event for Fold; a map for DistinctBy on long runs). It is safe
// to call concurrently on different runs.
func (a Algebra[E]) Reduce(run []E, owner []int) []E {
	if owner != nil && len(owner) < len(run) {
		panic(fmt.Sprintf("algebra: Reduce of a run of %d events with an owner slice of %d", len(run), len(owner)))
	}
	if a.reduce == nil || len(run) == 0 {
		for i := range run {
			if owner != nil {
				owner[i] = i
			}
		}
		return run
	}
	return a.reduce(run, owner)
}

// Number is the constraint of the amounts Sum adds: integer and
// floating-point types. Integer sums wrap on overflow, which is still
// associative; floating-point addition is not exactly associative, so a
// Sum over floats is only as exact as rounding allows.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// None returns the NonAssociative algebra: it promises nothing and reduces
// nothing. It equals the zero Algebra.
func None[E any]() Algebra[E] { return Algebra[E]{} }

// Fold returns an Associative algebra that folds a whole run into one
// event: combine(combine(run[0], run[1]), run[2])... The caller promises
// that combine is associative and that applying the combined event has the
// same effect as applying its inputs one after another; check both with
// algebratest.Check and algebratest.CheckProjection.
//
// combine may modify and return acc, which is always a value from the run
// being reduced or a previous combine result. A nil combine yields None.
func Fold[E any](combine func(acc, next E) E) Algebra[E] {
	if combine == nil {
		return None[E]()
	}
	return Algebra[E]{kind: Associative, reduce: func(run []E, owner []int) []E {
		acc := run[0]
		for _, e := range run[1:] {
			acc = combine(acc, e)
		}
		run[0] = acc
		fillZero(owner, len(run))
		return run[:1]
	}}
}

// Sum returns an Associative algebra that folds a whole run into its first
// event with its amount, get(e), replaced by the sum of the run's amounts.
// Fields other than the amount come from the first event; use Fold to keep
// others. A nil get or set yields None.
func Sum[E any, N Number](get func(E) N, set func(E, N) E) Algebra[E] {
	if get == nil || set == nil {
		return None[E]()
	}
	return Algebra[E]{kind: Associative, reduce: func(run []E, owner []int) []E {
		var sum N
		for _, e := range run {
			sum += get(e)
		}
		run[0] = set(run[0], sum)
		fillZero(owner, len(run))
		return run[:1]
	}}
}

// Dedup returns an Idempotent algebra that collapses adjacent equal (==)
// events into the first of them. The caller promises that applying an
// event twice in a row has the same effect as applying it once.
func Dedup[E comparable]() Algebra[E] {
	return Algebra[E]{kind: Idempotent, reduce: func(run []E, owner []int) []E {
		n := 1
		if owner != nil {
			owner[0] = 0
		}
		for i := 1; i < len(run); i++ {
			if run[i] != run[n-1] {
				run[n] = run[i]
				n++
			}
			if owner != nil {
				owner[i] = n - 1
			}
		}
		return run[:n]
	}}
}

// DedupFunc returns an Idempotent algebra that collapses each event that
// equals the previous surviving event into it. equal must say true only of
// events that have the same effect, and the caller promises that applying
// such an event right after its equal changes nothing. A nil equal yields
// None.
func DedupFunc[E any](equal func(a, b E) bool) Algebra[E] {
	if equal == nil {
		return None[E]()
	}
	return Algebra[E]{kind: Idempotent, reduce: func(run []E, owner []int) []E {
		n := 1
		if owner != nil {
			owner[0] = 0
		}
		for i := 1; i < len(run); i++ {
			if !equal(run[n-1], run[i]) {
				run[n] = run[i]
				n++
			}
			if owner != nil {
				owner[i] = n - 1
			}
		}
		return run[:n]
	}}
}

// Unordered returns a Commutative algebra: the caller promises that the
// events of a run may be applied in any order. It removes nothing.
func Unordered[E any]() Algebra[E] { return Algebra[E]{kind: Commutative} }

// Distinct returns an IdempotentCommutative algebra that collapses equal
// (==) events anywhere in a run into the first of them. The caller promises
// that the run may be applied in any order and that applying an event again
// changes nothing.
//
// It costs a linear scan of the survivors for short runs and a map for long
// ones.
func Distinct[E comparable]() Algebra[E] {
	return Algebra[E]{kind: IdempotentCommutative, reduce: func(run []E, owner []int) []E {
		return distinct(run, owner, func(e E) E { return e })
	}}
}

// DistinctBy returns an IdempotentCommutative algebra that collapses events
// with equal identities, id(e), anywhere in a run into the first of them.
// The caller promises that the run may be applied in any order and that
// events with equal identities have the same effect, which applying again
// does not change. A nil id yields None.
func DistinctBy[E any, H comparable](id func(E) H) Algebra[E] {
	if id == nil {
		return None[E]()
	}
	return Algebra[E]{kind: IdempotentCommutative, reduce: func(run []E, owner []int) []E {
		return distinct(run, owner, id)
	}}
}

// shortRun is how many distinct identities distinct scans linearly before
// it builds a map.
const shortRun = 16

// distinct keeps the first event of each identity, in log order.
func distinct[E any, H comparable](run []E, owner []int, id func(E) H) []E {
	var (
		buf  [shortRun]H
		ids  = buf[:0] // identities of the survivors while there are few
		seen map[H]int // identity -> survivor, once there are many
		n    int
	)
	for i := range run {
		h := id(run[i])
		j := -1
		if seen == nil {
			for k := range ids {
				if ids[k] == h {
					j = k
					break
				}
			}
		} else if k, ok := seen[h]; ok {
			j = k
		}
		if j < 0 {
			j = n
			run[n] = run[i]
			n++
			switch {
			case seen != nil:
				seen[h] = j
			case len(ids) < shortRun:
				ids = append(ids, h)
			default:
				seen = make(map[H]int, 4*shortRun)
				for k, x := range ids {
					seen[x] = k
				}
				seen[h] = j
			}
		}
		if owner != nil {
			owner[i] = j
		}
	}
	return run[:n]
}

// fillZero sets owner[:n] to 0: every input folded into the one survivor.
func fillZero(owner []int, n int) {
	if owner != nil {
		clear(owner[:n])
	}
}
