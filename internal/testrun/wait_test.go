package testrun

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message instead
// of ending the goroutine.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	rec := &fatalRecorder{TB: t}
	WaitFor(rec, time.Minute, func() error {
		if calls++; calls < 5 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if rec.msg != "" || calls != 5 {
		t.Fatalf("WaitFor failed (%q) or stopped after %d calls, want 5", rec.msg, calls)
	}
}

func TestWaitForFailsWithTheLastErrorAfterTheTimeout(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	start := time.Now()
	WaitFor(rec, 50*time.Millisecond, func() error { return errors.New("partition 3 not served") })
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("WaitFor gave up after %v, before its 50ms timeout", took)
	}
	if !strings.Contains(rec.msg, "not within 50ms: partition 3 not served") {
		t.Fatalf("WaitFor failed with %q, want the timeout and the last error", rec.msg)
	}
}

func TestUntilSaysWhatItWaitsFor(t *testing.T) {
	ok := false
	cond := Until("partition 3 served", func() bool { return ok })
	if err := cond(); err == nil || err.Error() != "waiting for partition 3 served" {
		t.Fatalf("Until before the condition holds = %v", err)
	}
	ok = true
	if err := cond(); err != nil {
		t.Fatalf("Until once the condition holds = %v", err)
	}
}
