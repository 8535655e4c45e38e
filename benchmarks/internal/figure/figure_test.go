package figure_test

import (
	"fmt"

	"github.com/strand-io/strand/benchmarks/internal/figure"
)

func Example() {
	fmt.Println(figure.Load1("5.53 5.24 3.08"), figure.Load1(""))
	fmt.Println(figure.Count(1_250_000), figure.Count(249_600), figure.Count(999), figure.Count(0))
	// Output:
	// 5.53 —
	// 1.25M 250k 999 0
}
