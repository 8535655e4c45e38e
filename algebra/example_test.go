package algebra_test

import (
	"fmt"

	"github.com/strand-io/strand/algebra"
)

type Deposited struct {
	Account uint64
	Amount  int64
}

// Deposits to one account fold into one event, so the handler writes the
// balance once per run instead of once per deposit.
func ExampleSum() {
	deposits := algebra.Sum(
		func(d Deposited) int64 { return d.Amount },
		func(d Deposited, n int64) Deposited { d.Amount = n; return d },
	)
	run := []Deposited{{42, 100}, {42, 250}, {42, -50}}
	owner := make([]int, len(run))
	reduced := deposits.Reduce(run, owner)
	fmt.Println(deposits.Kind(), reduced, owner)
	// Output:
	// Associative [{42 300}] [0 0 0]
}

// Status events that set a value collapse when the same status repeats in
// a row; the owner slice says which survivor stands for each input.
func ExampleDedup() {
	type Status string
	run := []Status{"open", "open", "frozen", "open", "open"}
	owner := make([]int, len(run))
	reduced := algebra.Dedup[Status]().Reduce(run, owner)
	fmt.Println(reduced, owner)
	// Output:
	// [open frozen open] [0 0 1 2 2]
}

// Tag events that add to a set may be applied in any order and only once,
// so duplicates anywhere in the run collapse into the first.
func ExampleDistinctBy() {
	type Tagged struct {
		Item uint64
		Tag  string
	}
	run := []Tagged{{1, "red"}, {1, "blue"}, {1, "red"}, {1, "green"}, {1, "blue"}}
	reduced := algebra.DistinctBy(func(t Tagged) string { return t.Tag }).Reduce(run, nil)
	fmt.Println(reduced)
	// Output:
	// [{1 red} {1 blue} {1 green}]
}
