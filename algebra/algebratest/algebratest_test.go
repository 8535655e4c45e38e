package algebratest_test

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/algebra/algebratest"
	"github.com/strand-io/strand/internal/testrun"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests below make checks fail on purpose; keep rapid from saving
	// their counterexamples as fail files under testdata.
	if err := flag.Set("rapid.nofailfile", "true"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testrun.Exit(m.Run())
}

// recorder is a rapid.TB that records instead of failing the test, so that
// a test can assert that a checker fails.
type recorder struct {
	mu     sync.Mutex
	failed bool
	log    strings.Builder
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return "recorder" }
func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&r.log, format+"\n", args...)
}
func (r *recorder) Log(args ...any)                   { r.Logf("%s", fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any)  { r.Logf(format, args...) }
func (r *recorder) Skip(args ...any)                  { r.Log(args...) }
func (r *recorder) SkipNow()                          {}
func (r *recorder) Errorf(format string, args ...any) { r.Logf(format, args...); r.Fail() }
func (r *recorder) Error(args ...any)                 { r.Log(args...); r.Fail() }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...) }
func (r *recorder) FailNow()                          { r.Fail() }
func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

type deposit struct {
	Account uint64
	Amount  int64
}

var (
	amounts  = rapid.Int64Range(-1000, 1000)
	deposits = rapid.Custom(func(t *rapid.T) deposit {
		return deposit{Account: rapid.Uint64Range(1, 3).Draw(t, "account"), Amount: amounts.Draw(t, "amount")}
	})
	balances = rapid.Int64Range(-1_000_000, 1_000_000)
	sets     = rapid.Custom(func(t *rapid.T) map[int]bool {
		m := map[int]bool{}
		for _, k := range rapid.SliceOfN(rapid.IntRange(0, 9), 0, 5).Draw(t, "members") {
			m[k] = true
		}
		return m
	})
	small = rapid.IntRange(0, 9)
)

func sameDeposit(x, y deposit) bool  { return x == y }
func sameInt(x, y int) bool          { return x == y }
func sameInt64(x, y int64) bool      { return x == y }
func sameSet(x, y map[int]bool) bool { return maps.Equal(x, y) }

func addDeposit(b int64, d deposit) int64 { return b + d.Amount }

// setLast is a projection of "the value is now e" events: idempotent.
func setLast(_ int, e int) int { return e }

// addMember is a projection of "e is a member" events: idempotent and
// commutative. It copies the set, as CheckProjection requires.
func addMember(s map[int]bool, e int) map[int]bool {
	s = maps.Clone(s)
	if s == nil {
		s = map[int]bool{}
	}
	s[e] = true
	return s
}

func sumAmounts() algebra.Algebra[deposit] {
	return algebra.Sum(func(d deposit) int64 { return d.Amount }, func(d deposit, n int64) deposit { d.Amount = n; return d })
}

// TestCheckersPassLawfulAlgebras runs the checkers on a real *testing.T:
// each algebra here keeps its law, so a failure is a checker bug.
func TestCheckersPassLawfulAlgebras(t *testing.T) {
	t.Run("Sum of deposits", func(t *testing.T) {
		algebratest.Check(t, sumAmounts(), deposits, sameDeposit)
		algebratest.CheckProjection(t, sumAmounts(), balances, deposits, addDeposit, sameInt64)
	})
	t.Run("Fold of deposits", func(t *testing.T) {
		fold := algebra.Fold(func(acc, next deposit) deposit { acc.Amount += next.Amount; return acc })
		algebratest.Check(t, fold, deposits, sameDeposit)
		algebratest.CheckProjection(t, fold, balances, deposits, addDeposit, sameInt64)
	})
	t.Run("None", func(t *testing.T) {
		algebratest.Check(t, algebra.None[int](), small, sameInt)
		algebratest.CheckProjection(t, algebra.None[int](), small, small, func(s, e int) int { return s*3 - e }, sameInt)
	})
	t.Run("Dedup of set-to events", func(t *testing.T) {
		algebratest.Check(t, algebra.Dedup[int](), small, sameInt)
		algebratest.CheckProjection(t, algebra.Dedup[int](), small, small, setLast, sameInt)
	})
	t.Run("DedupFunc of set-to events", func(t *testing.T) {
		a := algebra.DedupFunc(sameInt)
		algebratest.Check(t, a, small, sameInt)
		algebratest.CheckProjection(t, a, small, small, setLast, sameInt)
	})
	t.Run("Unordered deposits", func(t *testing.T) {
		algebratest.Check(t, algebra.Unordered[deposit](), deposits, sameDeposit)
		algebratest.CheckProjection(t, algebra.Unordered[deposit](), balances, deposits, addDeposit, sameInt64)
	})
	t.Run("Distinct members", func(t *testing.T) {
		algebratest.Check(t, algebra.Distinct[int](), small, sameInt)
		algebratest.CheckProjection(t, algebra.Distinct[int](), sets, small, addMember, sameSet)
	})
	t.Run("DistinctBy members", func(t *testing.T) {
		a := algebra.DistinctBy(func(e int) int { return e })
		algebratest.Check(t, a, small, sameInt)
		algebratest.CheckProjection(t, a, sets, small, addMember, sameSet)
	})
}

// TestCheckersCatchBrokenLaws gives the checkers algebras and projections
// that break the law they claim, and requires each check to fail with a
// message naming the problem.
func TestCheckersCatchBrokenLaws(t *testing.T) {
	tests := []struct {
		name  string
		check func(rapid.TB)
		want  string
	}{
		{"subtraction claimed associative", func(tb rapid.TB) {
			algebratest.Check(tb, algebra.Fold(func(a, b int) int { return a - b }), small, sameInt)
		}, "not associative"},
		{"a combine that keeps the last amount claimed associative, with a summing projection", func(tb rapid.TB) {
			last := algebra.Fold(func(_, next deposit) deposit { return next })
			algebratest.CheckProjection(tb, last, balances, deposits, addDeposit, sameInt64)
		}, "does not keep the Associative law"},
		{"sum over a projection that overwrites claimed associative", func(tb rapid.TB) {
			algebratest.CheckProjection(tb, sumAmounts(), balances, deposits, func(_ int64, d deposit) int64 { return d.Amount }, sameInt64)
		}, "does not keep the Associative law"},
		{"a non-idempotent projection claimed idempotent", func(tb rapid.TB) {
			algebratest.CheckProjection(tb, algebra.Dedup[deposit](), balances, deposits, addDeposit, sameInt64)
		}, "does not keep the Idempotent law"},
		{"a dedup equality coarser than event equality", func(tb rapid.TB) {
			sameAccount := algebra.DedupFunc(func(a, b deposit) bool { return a.Account == b.Account })
			algebratest.Check(tb, sameAccount, deposits, sameDeposit)
		}, "into a different event"},
		{"a non-commutative projection claimed commutative", func(tb rapid.TB) {
			algebratest.CheckProjection(tb, algebra.Unordered[int](), small, small, func(s, e int) int { return 2*s + e }, sameInt)
		}, "does not keep the Commutative law"},
		{"an idempotent but ordered projection claimed idempotent-commutative", func(tb rapid.TB) {
			algebratest.CheckProjection(tb, algebra.Distinct[int](), small, small, setLast, sameInt)
		}, "does not keep the IdempotentCommutative law"},
		{"a commutative but non-idempotent projection claimed idempotent-commutative", func(tb rapid.TB) {
			algebratest.CheckProjection(tb, algebra.Distinct[int](), small, small, func(s, e int) int { return s + e }, sameInt)
		}, "does not keep the IdempotentCommutative law"},
		{"a missing generator", func(tb rapid.TB) {
			algebratest.Check(tb, algebra.Dedup[int](), nil, sameInt)
		}, "needs a generator"},
		{"a missing apply", func(tb rapid.TB) {
			algebratest.CheckProjection[int, int](tb, algebra.Dedup[int](), small, small, nil, sameInt)
		}, "needs state and event generators"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			tt.check(&r)
			if !r.Failed() {
				t.Fatalf("the check passed; want it to fail with %q\nlog:\n%s", tt.want, r.log.String())
			}
			if !strings.Contains(r.log.String(), tt.want) {
				t.Fatalf("the check failed without mentioning %q\nlog:\n%s", tt.want, r.log.String())
			}
		})
	}
}

// TestRecorderSeesPasses makes sure the recorder used above can tell a
// pass from a failure, so that the failures it reports mean something.
func TestRecorderSeesPasses(t *testing.T) {
	var r recorder
	algebratest.Check(&r, sumAmounts(), deposits, sameDeposit)
	algebratest.CheckProjection(&r, sumAmounts(), balances, deposits, addDeposit, sameInt64)
	if r.Failed() {
		t.Fatalf("a lawful Sum failed:\n%s", r.log.String())
	}
}

// TestCheckCatchesACoarseIdentity gives Check a DistinctBy whose identity
// merges events that are not equal.
func TestCheckCatchesACoarseIdentity(t *testing.T) {
	a := algebra.DistinctBy(func(d deposit) uint64 { return d.Account })
	var r recorder
	algebratest.Check(&r, a, deposits, sameDeposit)
	if !r.Failed() || !strings.Contains(r.log.String(), "into a different event") {
		t.Fatalf("Check passed a DistinctBy on a coarse identity:\n%s", r.log.String())
	}
}
