package testrun

import (
	"errors"
	"testing"
	"time"
)

// WaitFor calls cond until it returns nil and returns how long that took.
// When timeout passes first, it fails tb with cond's last error (tb.Fatalf)
// and returns timeout.
//
// It is the suite's one wait for what a test cannot be told about: a
// partition served, a row visible to Pebble's readers, a member dropped by
// the broker. A test sleeps only to pace what it does (a kill at a random
// moment) or to leave a window in which something must not happen; it
// never sleeps and hopes. cond is called at once, then after pauses that
// grow from 1 ms to 20 ms, so a condition that already holds costs nothing
// and a long wait does not spin. timeout bounds a hang, not the machine's
// speed: give it room for a loaded machine.
func WaitFor(tb testing.TB, timeout time.Duration, cond func() error) time.Duration {
	tb.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("not within %v: %v", timeout, err)
			return timeout
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// Until is the condition of WaitFor for a cond that only says yes or no:
// not yet is the error "waiting for what".
func Until(what string, cond func() bool) func() error {
	return func() error {
		if !cond() {
			return errors.New("waiting for " + what)
		}
		return nil
	}
}
