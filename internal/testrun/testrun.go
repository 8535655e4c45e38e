// Package testrun is the TestMain of strand's packages with property
// tests: one depth for their rapid checks, and goroutine leak checks. Only
// tests import it.
package testrun

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// DefaultChecks and SoakChecks are the cases each property test
// (pgregory.net/rapid) tries: DefaultChecks in the default run (so that the
// whole suite stays within 8 minutes on a 2-core machine), SoakChecks with
// STRAND_SOAK=1 (benchmarks/soak-*.sh).
const (
	DefaultChecks = "50"
	SoakChecks    = "500"
)

// Main parses the flags, sets the depth of the package's property tests
// (SetRapidChecks) and runs the tests, failing when a goroutine leaks
// (goleak). It does not return.
func Main(m *testing.M) {
	flag.Parse()
	SetRapidChecks()
	goleak.VerifyTestMain(m)
}

// SetRapidChecks sets -rapid.checks to DefaultChecks, or SoakChecks with
// STRAND_SOAK set, unless the command line gave it or the test binary has
// no rapid tests. Call it after flag.Parse.
func SetRapidChecks() {
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if explicit || flag.Lookup("rapid.checks") == nil {
		return
	}
	n := DefaultChecks
	if os.Getenv("STRAND_SOAK") != "" {
		n = SoakChecks
	}
	if err := flag.Set("rapid.checks", n); err != nil {
		panic(err)
	}
}
