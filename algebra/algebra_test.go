package algebra_test

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
)

type deposit struct {
	Account uint64
	Amount  int64
}

type item struct {
	ID   int
	Note string
}

// reduceBoth reduces a copy of run with and without an owner slice, checks
// both agree, and returns the result and the owners.
func reduceBoth[E any](t *rapid.T, a algebra.Algebra[E], run []E, eq func(x, y E) bool) ([]E, []int) {
	owner := make([]int, len(run))
	for i := range owner {
		owner[i] = -7 // Reduce must overwrite every owner
	}
	got := a.Reduce(slices.Clone(run), owner)
	again := a.Reduce(slices.Clone(run), nil)
	if !slices.EqualFunc(got, again, eq) {
		t.Fatalf("Reduce with owner = %v, without = %v", got, again)
	}
	if len(run) > 0 && len(got) == 0 {
		t.Fatalf("Reduce of %d events returned none", len(run))
	}
	return got, owner
}

// naiveFold is the reference for Associative algebras: one event standing
// for every input.
func naiveFold[E any](run []E, combine func(acc, next E) E) ([]E, []int) {
	if len(run) == 0 {
		return nil, []int{}
	}
	acc := run[0]
	for _, e := range run[1:] {
		acc = combine(acc, e)
	}
	return []E{acc}, make([]int, len(run))
}

// naiveDedup is the reference for Idempotent algebras: an event that
// equals the last kept one is dropped into it.
func naiveDedup[E any](run []E, equal func(a, b E) bool) ([]E, []int) {
	var out []E
	owner := []int{}
	for _, e := range run {
		if len(out) == 0 || !equal(out[len(out)-1], e) {
			out = append(out, e)
		}
		owner = append(owner, len(out)-1)
	}
	return out, owner
}

// naiveDistinct is the reference for IdempotentCommutative algebras: an
// event equal to any kept one is dropped into the first such.
func naiveDistinct[E any](run []E, equal func(a, b E) bool) ([]E, []int) {
	var out []E
	owner := []int{}
	for _, e := range run {
		j := slices.IndexFunc(out, func(x E) bool { return equal(x, e) })
		if j < 0 {
			j = len(out)
			out = append(out, e)
		}
		owner = append(owner, j)
	}
	return out, owner
}

func identity(n int) []int {
	owner := make([]int, n)
	for i := range owner {
		owner[i] = i
	}
	return owner
}

func eq[E comparable](x, y E) bool { return x == y }

func check[E any](t *rapid.T, name string, got []E, gotOwner []int, want []E, wantOwner []int, equal func(x, y E) bool) {
	t.Helper()
	if !slices.EqualFunc(got, want, equal) {
		t.Fatalf("%s: reduced run = %v, want %v", name, got, want)
	}
	if !slices.Equal(gotOwner, wantOwner) {
		t.Fatalf("%s: owner = %v, want %v", name, gotOwner, wantOwner)
	}
}

func TestReduceMatchesNaiveReference(t *testing.T) {
	deposits := rapid.Custom(func(t *rapid.T) deposit {
		return deposit{Account: 7, Amount: rapid.Int64Range(-1000, 1000).Draw(t, "amount")}
	})
	// Few identities so that runs hold many duplicates; long runs so that
	// Distinct goes past its linear scan.
	small := rapid.IntRange(0, 40)
	items := rapid.Custom(func(t *rapid.T) item {
		return item{ID: rapid.IntRange(0, 30).Draw(t, "id"), Note: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "note")}
	})
	words := rapid.StringMatching(`[a-c]{0,3}`)

	t.Run("None", rapid.MakeCheck(func(t *rapid.T) {
		run := rapid.SliceOfN(small, 0, 50).Draw(t, "run")
		for _, a := range []algebra.Algebra[int]{algebra.None[int](), {}} {
			got, owner := reduceBoth(t, a, run, eq)
			check(t, "None", got, owner, run, identity(len(run)), eq)
		}
	}))
	t.Run("Unordered", rapid.MakeCheck(func(t *rapid.T) {
		run := rapid.SliceOfN(small, 0, 50).Draw(t, "run")
		got, owner := reduceBoth(t, algebra.Unordered[int](), run, eq)
		check(t, "Unordered", got, owner, run, identity(len(run)), eq)
	}))
	t.Run("Fold keeps log order", rapid.MakeCheck(func(t *rapid.T) {
		// Concatenation is associative but not commutative: a fold that
		// reorders its inputs fails here.
		run := rapid.SliceOfN(words, 0, 30).Draw(t, "run")
		concat := func(a, b string) string { return a + "|" + b }
		got, owner := reduceBoth(t, algebra.Fold(concat), run, eq)
		want, wantOwner := naiveFold(run, concat)
		check(t, "Fold", got, owner, want, wantOwner, eq)
	}))
	t.Run("Sum", rapid.MakeCheck(func(t *rapid.T) {
		run := rapid.SliceOfN(deposits, 0, 50).Draw(t, "run")
		a := algebra.Sum(func(d deposit) int64 { return d.Amount }, func(d deposit, n int64) deposit { d.Amount = n; return d })
		got, owner := reduceBoth(t, a, run, eq)
		want, wantOwner := naiveFold(run, func(acc, next deposit) deposit { acc.Amount += next.Amount; return acc })
		check(t, "Sum", got, owner, want, wantOwner, eq)
	}))
	t.Run("Dedup", rapid.MakeCheck(func(t *rapid.T) {
		run := rapid.SliceOfN(rapid.IntRange(0, 3), 0, 50).Draw(t, "run")
		got, owner := reduceBoth(t, algebra.Dedup[int](), run, eq)
		want, wantOwner := naiveDedup(run, eq)
		check(t, "Dedup", got, owner, want, wantOwner, eq)
	}))
	t.Run("DedupFunc", rapid.MakeCheck(func(t *rapid.T) {
		run := rapid.SliceOfN(items, 0, 50).Draw(t, "run")
		sameID := func(a, b item) bool { return a.ID%3 == b.ID%3 }
		got, owner := reduceBoth(t, algebra.DedupFunc(sameID), run, eq)
		want, wantOwner := naiveDedup(run, sameID)
		check(t, "DedupFunc", got, owner, want, wantOwner, eq)
	}))
	t.Run("Distinct", rapid.MakeCheck(func(t *rapid.T) {
		run := rapid.SliceOfN(small, 0, 120).Draw(t, "run")
		got, owner := reduceBoth(t, algebra.Distinct[int](), run, eq)
		want, wantOwner := naiveDistinct(run, eq)
		check(t, "Distinct", got, owner, want, wantOwner, eq)
	}))
	t.Run("DistinctBy", rapid.MakeCheck(func(t *rapid.T) {
		run := rapid.SliceOfN(items, 0, 120).Draw(t, "run")
		got, owner := reduceBoth(t, algebra.DistinctBy(func(i item) int { return i.ID }), run, eq)
		want, wantOwner := naiveDistinct(run, func(a, b item) bool { return a.ID == b.ID })
		check(t, "DistinctBy", got, owner, want, wantOwner, eq)
	}))
}

func TestKinds(t *testing.T) {
	get := func(d deposit) int64 { return d.Amount }
	set := func(d deposit, n int64) deposit { d.Amount = n; return d }
	tests := []struct {
		name string
		a    algebra.Algebra[deposit]
		want algebra.Kind
	}{
		{"the zero algebra is NonAssociative", algebra.Algebra[deposit]{}, algebra.NonAssociative},
		{"None is NonAssociative", algebra.None[deposit](), algebra.NonAssociative},
		{"Fold is Associative", algebra.Fold(func(a, b deposit) deposit { return a }), algebra.Associative},
		{"Sum is Associative", algebra.Sum(get, set), algebra.Associative},
		{"Dedup is Idempotent", algebra.Dedup[deposit](), algebra.Idempotent},
		{"DedupFunc is Idempotent", algebra.DedupFunc(func(a, b deposit) bool { return a == b }), algebra.Idempotent},
		{"Unordered is Commutative", algebra.Unordered[deposit](), algebra.Commutative},
		{"Distinct is IdempotentCommutative", algebra.Distinct[deposit](), algebra.IdempotentCommutative},
		{"DistinctBy is IdempotentCommutative", algebra.DistinctBy(func(d deposit) uint64 { return d.Account }), algebra.IdempotentCommutative},
		{"Fold of nil is None", algebra.Fold[deposit](nil), algebra.NonAssociative},
		{"Sum of nil get is None", algebra.Sum[deposit, int64](nil, set), algebra.NonAssociative},
		{"Sum of nil set is None", algebra.Sum[deposit](get, nil), algebra.NonAssociative},
		{"DedupFunc of nil is None", algebra.DedupFunc[deposit](nil), algebra.NonAssociative},
		{"DistinctBy of nil is None", algebra.DistinctBy[deposit, int](nil), algebra.NonAssociative},
	}
	run := []deposit{{1, 10}, {1, 10}, {2, 5}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Kind(); got != tt.want {
				t.Fatalf("Kind() = %v, want %v", got, tt.want)
			}
			if got := tt.a.Reduce(nil, nil); len(got) != 0 {
				t.Errorf("Reduce(nil) = %v, want empty", got)
			}
			if got := tt.a.Reduce(slices.Clone(run), make([]int, len(run))); len(got) == 0 {
				t.Errorf("Reduce of %d events returned none", len(run))
			}
		})
	}
}

func TestReduceWithShortOwnerPanicsNamingTheLengths(t *testing.T) {
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "3 events") || !strings.Contains(msg, "owner slice of 2") {
			t.Fatalf("panic = %q, want one naming both lengths", msg)
		}
	}()
	algebra.Dedup[int]().Reduce([]int{1, 2, 3}, make([]int, 2))
}

func TestReduceAcceptsLongerOwner(t *testing.T) {
	owner := []int{9, 9, 9, 9}
	got := algebra.Dedup[int]().Reduce([]int{5, 5, 6}, owner)
	if !slices.Equal(got, []int{5, 6}) || !slices.Equal(owner, []int{0, 0, 1, 9}) {
		t.Fatalf("Reduce = %v, owner = %v; want [5 6], [0 0 1 9]", got, owner)
	}
}

func BenchmarkReduce(b *testing.B) {
	run := make([]int, 1000)
	for i := range run {
		run[i] = i % 50
	}
	buf := make([]int, len(run))
	owner := make([]int, len(run))
	for _, bc := range []struct {
		name string
		a    algebra.Algebra[int]
	}{
		{"Sum", algebra.Sum(func(e int) int { return e }, func(_ int, n int) int { return n })},
		{"Fold", algebra.Fold(func(a, b int) int { return a + b })},
		{"Dedup", algebra.Dedup[int]()},
		{"Distinct", algebra.Distinct[int]()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				copy(buf, run)
				bc.a.Reduce(buf, owner)
			}
		})
	}
}
