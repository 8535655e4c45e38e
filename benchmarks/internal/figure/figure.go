// Package figure formats the figures of the benchmark runner's tables, for
// the runner and the scale-out measurements alike.
package figure

import (
	"fmt"
	"strings"
)

// Load1 returns the 1-minute figure of a load average as sysstat.Load
// gives it ("5.53 5.24 3.08" → "5.53"), or "—" for none.
func Load1(load string) string {
	if f := strings.Fields(load); len(f) > 0 {
		return f[0]
	}
	return "—"
}

// Count formats a count or a rate: millions with two decimals ("1.25M"),
// thousands as a whole number ("250k"), else the whole number.
func Count(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.0fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}
