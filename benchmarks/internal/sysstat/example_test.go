package sysstat_test

import (
	"fmt"

	"github.com/strand-io/strand/benchmarks/internal/sysstat"
)

// Measure the peak memory of a section: reset the high-water mark, work,
// read it.
func Example() {
	sysstat.ResetPeakRSS()
	buf := make([]byte, 32<<20)
	for i := range buf {
		buf[i] = 1
	}
	fmt.Println(sysstat.PeakRSS() >= int64(len(buf)), sysstat.CPUTime() > 0)
	// Output: true true
}
