// Package testrun is the TestMain of strand's test packages: one depth for
// their property tests (pgregory.net/rapid), goroutine leak checks
// (go.uber.org/goleak), and an exit that does not wait; and WaitFor, the
// suite's one wait on a condition. Only tests import it.
//
// # The exit
//
// A program built with -race sleeps one second when it exits with status 0
// while other goroutines are alive: the race runtime's atexit_sleep_ms,
// which gives them time to report a race. Every test binary of the suite
// pays it, and so does every child process a crash test starts and lets
// finish: about a minute of the newcomer's `go test -race ./...` spent
// asleep (docs/design.md §4, issue 33 item 7). Exit skips it for a test
// binary whose tests passed, once the testing package has already checked
// for races (it fails a test that raced, and the run on a race outside the
// tests); ChildEnv turns it off for a child process.
package testrun

import (
	"flag"
	"os"
	"strings"
	"syscall"
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
// (SetRapidChecks) and runs the tests through Verify. It does not return.
func Main(m *testing.M, opts ...goleak.Option) {
	flag.Parse()
	SetRapidChecks()
	Verify(m, opts...)
}

// Verify runs the tests, fails when a goroutine leaks (goleak, with opts)
// and exits (Exit). It does not return: the TestMain of a package whose
// rapid depth is its own, or that has none.
func Verify(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(opts, goleak.Cleanup(Exit))...)
}

// Exit ends the test binary with code, as os.Exit does, except that a
// race-enabled binary whose tests passed exits at once instead of sleeping
// the race runtime's second (see the package doc). The testing package
// has checked for races by then: m.Run returns a failing code for any it
// saw. With coverage on, Exit is os.Exit, so that nothing of the exit's
// own work is skipped.
func Exit(code int) {
	if code == 0 && raceEnabled && testing.CoverMode() == "" {
		syscall.Exit(0)
	}
	os.Exit(code)
}

// ChildEnv returns env (KEY=value entries for a child process of a test)
// with the race runtime's exit sleep turned off (GORACE
// atexit_sleep_ms=0), unless env or this process's GORACE sets it: a
// child the test lets finish exits at once. Races the child finds are
// still reported, and still make it exit with status 66.
func ChildEnv(env []string) []string {
	gorace, at := os.Getenv("GORACE"), -1
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GORACE="); ok {
			gorace, at = v, i
		}
	}
	v, changed := quiet(gorace)
	switch {
	case !changed:
		return env
	case at >= 0:
		out := append([]string(nil), env...)
		out[at] = "GORACE=" + v
		return out
	}
	return append(env, "GORACE="+v)
}

// QuietChildren sets this process's GORACE as ChildEnv would, so that
// every child process that inherits the environment exits without the
// race runtime's exit sleep. The setting does not change this process:
// its race runtime read GORACE when it started. Call it in the TestMain
// of a package whose tests start children without ChildEnv.
func QuietChildren() {
	if v, changed := quiet(os.Getenv("GORACE")); changed {
		_ = os.Setenv("GORACE", v) // fails only on an invalid key
	}
}

// quiet returns the GORACE options gorace with atexit_sleep_ms=0 added,
// and false if gorace sets atexit_sleep_ms already.
func quiet(gorace string) (string, bool) {
	if strings.Contains(gorace, "atexit_sleep_ms") {
		return gorace, false
	}
	return strings.TrimSpace(gorace + " atexit_sleep_ms=0"), true
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
