package algebratest_test

import (
	"fmt"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/algebra/algebratest"
)

// verdict is a rapid.TB that remembers whether a check failed, so that this
// example can print it. In a test, pass the test's t instead.
type verdict struct{ failed bool }

func (v *verdict) Helper()               {}
func (v *verdict) Name() string          { return "verdict" }
func (v *verdict) Logf(string, ...any)   {}
func (v *verdict) Log(...any)            {}
func (v *verdict) Skipf(string, ...any)  {}
func (v *verdict) Skip(...any)           {}
func (v *verdict) SkipNow()              {}
func (v *verdict) Errorf(string, ...any) { v.failed = true }
func (v *verdict) Error(...any)          { v.failed = true }
func (v *verdict) Fatalf(string, ...any) { v.failed = true }
func (v *verdict) Fatal(...any)          { v.failed = true }
func (v *verdict) FailNow()              { v.failed = true }
func (v *verdict) Fail()                 { v.failed = true }
func (v *verdict) Failed() bool          { return v.failed }
func (v *verdict) String() string {
	if v.failed {
		return "broken"
	}
	return "holds"
}

// Check a Sum of deposits and the balance projection against the
// Associative law, then a projection that is wrong for its algebra: a
// balance that adds deposits cannot use Dedup, since two equal deposits in
// a row are two deposits.
func Example() {
	type Deposited struct {
		Account uint64
		Amount  int64
	}
	gen := rapid.Custom(func(t *rapid.T) Deposited {
		return Deposited{Account: 42, Amount: rapid.Int64Range(-1000, 1000).Draw(t, "amount")}
	})
	balance := rapid.Int64Range(-1_000_000, 1_000_000)
	apply := func(b int64, d Deposited) int64 { return b + d.Amount }
	same := func(x, y int64) bool { return x == y }

	sum := algebra.Sum(
		func(d Deposited) int64 { return d.Amount },
		func(d Deposited, n int64) Deposited { d.Amount = n; return d },
	)
	var law, projection verdict
	algebratest.Check(&law, sum, gen, func(x, y Deposited) bool { return x == y })
	algebratest.CheckProjection(&projection, sum, balance, gen, apply, same)
	fmt.Println("Sum:", law.String(), projection.String())

	var dedup verdict
	algebratest.CheckProjection(&dedup, algebra.Dedup[Deposited](), balance, gen, apply, same)
	fmt.Println("Dedup:", dedup.String())
	// Output:
	// Sum: holds holds
	// Dedup: broken
}
