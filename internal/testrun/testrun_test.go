package testrun

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

// envExit makes this test binary a child that starts a goroutine and
// calls Exit with the code it names.
const envExit = "STRAND_TESTRUN_EXIT"

func TestMain(m *testing.M) {
	if v := os.Getenv(envExit); v != "" {
		code, _ := strconv.Atoi(v)
		go func() { select {} }() // alive at the exit: the race runtime's sleep applies
		Exit(code)
	}
	Main(m)
}

// TestExitSkipsTheRaceSleep: a race-enabled binary whose tests passed
// exits without the race runtime's exit sleep, and any other code is
// kept. The child is given a 60-second sleep (GORACE atexit_sleep_ms), so
// that an exit that sleeps cannot pass however fast the machine, and one
// that does not passes however slow.
func TestExitSkipsTheRaceSleep(t *testing.T) {
	if !raceEnabled {
		t.Skip("the exit sleep is the race runtime's: run with -race")
	}
	for _, code := range []int{0, 3} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envExit+"="+strconv.Itoa(code), "GORACE=atexit_sleep_ms=60000")
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		got := 0
		if ee, ok := err.(*exec.ExitError); ok {
			got = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if got != code {
			t.Errorf("Exit(%d): the child exited with %d", code, got)
		}
		if code == 0 && took >= 60*time.Second {
			t.Errorf("Exit(0) took %v: the race runtime's exit sleep was not skipped", took)
		}
	}
}

func TestChildEnvTurnsTheExitSleepOff(t *testing.T) {
	t.Setenv("GORACE", "halt_on_error=1")
	for _, c := range []struct{ env, want []string }{
		{nil, []string{"GORACE=halt_on_error=1 atexit_sleep_ms=0"}},
		{[]string{"A=1"}, []string{"A=1", "GORACE=halt_on_error=1 atexit_sleep_ms=0"}},
		{[]string{"GORACE=history_size=3", "B=2"}, []string{"GORACE=history_size=3 atexit_sleep_ms=0", "B=2"}},
		{[]string{"GORACE=atexit_sleep_ms=500"}, []string{"GORACE=atexit_sleep_ms=500"}},
	} {
		if got := ChildEnv(slices.Clone(c.env)); !slices.Equal(got, c.want) {
			t.Errorf("ChildEnv(%q) = %q, want %q", c.env, got, c.want)
		}
	}
	t.Setenv("GORACE", "atexit_sleep_ms=7")
	if got := ChildEnv([]string{"A=1"}); !slices.Equal(got, []string{"A=1"}) {
		t.Errorf("with GORACE=atexit_sleep_ms=7 set, ChildEnv changed the environment: %q", got)
	}
}

func TestQuietChildrenSetsTheInheritedGORACE(t *testing.T) {
	t.Setenv("GORACE", "halt_on_error=1")
	QuietChildren()
	if got := os.Getenv("GORACE"); got != "halt_on_error=1 atexit_sleep_ms=0" {
		t.Errorf("GORACE = %q after QuietChildren", got)
	}
}
