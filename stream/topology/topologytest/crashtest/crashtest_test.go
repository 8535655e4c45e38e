package crashtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if code, ok := Main(map[string]func([]string) int{
		"echo": func(args []string) int {
			fmt.Println(strings.Join(args, " "))
			if len(args) > 0 && args[0] == "fail" {
				return 3
			}
			return 0
		},
		"tmpdir": func([]string) int {
			dir, err := os.MkdirTemp("", "child")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			fmt.Println("tmpdir:", dir)
			return 0
		},
		"die": func(args []string) int {
			_, maybe, err := KillPoint(args[0], "inside")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			maybe()
			return 0
		},
	}); ok {
		os.Exit(code)
	}
	Exit(m.Run())
}

// TestSleeper is a child that says it is ready and then waits to be
// killed (at most a minute: it never outlives a lost parent).
func TestSleeper(t *testing.T) {
	Child(t, "sleeper")
	fmt.Println("sleeper: ready")
	time.Sleep(time.Minute)
}

func TestRunKillsAReadyChild(t *testing.T) {
	out := Run(t, Spec{Role: "sleeper", Test: "TestSleeper", Ready: "sleeper: ready"}, time.Millisecond)
	if out.Finished || out.SelfKill != "" {
		t.Fatalf("outcome %+v; want a kill by the parent", out)
	}
	if !strings.Contains(out.Output, "sleeper: ready") {
		t.Errorf("output %q lacks the ready line", out.Output)
	}
}

func TestRunWaitsForAChildToFinish(t *testing.T) {
	out := Run(t, Spec{Role: "echo", Args: []string{"hello", "world"}}, 0)
	if !out.Finished || !strings.Contains(out.Output, "hello world") {
		t.Fatalf("outcome %+v; want finished with its arguments echoed", out)
	}
}

func TestSelfKillIsReported(t *testing.T) {
	p := Start(t, Spec{Role: "die", Args: []string{"inside:1"}})
	<-p.Done()
	if point, ok := p.SelfKill(); !ok || point != "inside" {
		t.Fatalf("SelfKill = %q, %v; want inside (output %q)", point, ok, p.Output())
	}
	if !p.Killed() || !p.EndedBy(syscall.SIGKILL) {
		t.Error("a child that died by Die was not killed by SIGKILL")
	}
	out := Run(t, Spec{Role: "die", Args: []string{"inside:1"}, Ready: "never printed"}, time.Second)
	if out.SelfKill != "inside" {
		t.Errorf("Run of a child that kills itself before it is ready: %+v", out)
	}
}

// TestChildTempDirsAreTheParents: a child's temporary directories are
// made under the parent test's own, so that what a killed child leaves is
// removed with the test's; a TMPDIR in Spec.Env is kept.
func TestChildTempDirsAreTheParents(t *testing.T) {
	parent := filepath.Dir(t.TempDir()) // the test's temporary root
	out := Run(t, Spec{Role: "tmpdir"}, 0)
	_, dir, ok := strings.Cut(strings.TrimSpace(out.Output), "tmpdir: ")
	if !out.Finished || !ok {
		t.Fatalf("outcome %+v", out)
	}
	if !strings.HasPrefix(dir, parent+string(filepath.Separator)) {
		t.Errorf("the child's temporary directory %s is not under the test's %s", dir, parent)
	}
	own := t.TempDir()
	out = Run(t, Spec{Role: "tmpdir", Env: []string{"TMPDIR=" + own}}, 0)
	if _, dir, _ := strings.Cut(strings.TrimSpace(out.Output), "tmpdir: "); filepath.Dir(dir) != own {
		t.Errorf("with TMPDIR=%s in Spec.Env, the child made %q", own, dir)
	}
}

// TestCommandQuietsTheChildsExit: a child exits without the race
// runtime's second of sleep (GORACE atexit_sleep_ms=0), keeping the other
// GORACE options given to it.
func TestCommandQuietsTheChildsExit(t *testing.T) {
	t.Setenv("GORACE", "")
	cmd, err := Command(Spec{Role: "echo", Env: []string{"GORACE=halt_on_error=1"}})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, kv := range cmd.Env {
		if v, ok := strings.CutPrefix(kv, "GORACE="); ok {
			last = v
		}
	}
	if last != "halt_on_error=1 atexit_sleep_ms=0" {
		t.Errorf("the child's GORACE is %q", last)
	}
}

func TestFailingChildIsAnError(t *testing.T) {
	p := Start(t, Spec{Role: "echo", Args: []string{"fail"}})
	if err := p.Wait(t, time.Minute); err == nil {
		t.Fatal("a child exiting with code 3 reported no error")
	}
	if p.Killed() {
		t.Error("a child that exited reported a kill")
	}
	if _, ok := p.SelfKill(); ok {
		t.Error("a child that exited reported a self-kill")
	}
}

func TestKillPointRefusesBadModes(t *testing.T) {
	for _, mode := range []string{"inside", "inside:x", "inside:2", "outside:0.5"} {
		if _, _, err := KillPoint(mode, "inside"); err == nil {
			t.Errorf("KillPoint(%q) succeeded", mode)
		}
	}
	if point, maybe, err := KillPoint("inside:0", "inside"); err != nil || point != "inside" {
		t.Fatalf("KillPoint(inside:0) = %q, %v", point, err)
	} else {
		maybe() // probability 0: returns
	}
}

func TestKillsAndCoverage(t *testing.T) {
	t.Setenv("STRAND_SOAK", "")
	if Kills(20, 200) != 20 || Soak() {
		t.Error("default run: want 20 kills and no soak")
	}
	Coverage(t, false, "logged only: %d", 1)
	t.Setenv("STRAND_SOAK", "1")
	t.Setenv("STRAND_SOAK_KILLS", "7")
	if Kills(20, 200) != 7 {
		t.Error("soak with STRAND_SOAK_KILLS=7: want 7 kills")
	}
}

func TestOutputKeepsHeadAndTail(t *testing.T) {
	ready := make(chan struct{})
	o := newOutput("go", ready)
	line := strings.Repeat("x", 1023) + "\n"
	for range 3 * 1024 {
		_, _ = o.Write([]byte(line))
	}
	_, _ = o.Write([]byte("last go\n"))
	select {
	case <-ready:
	default:
		t.Fatal("ready not closed by a line containing the ready text")
	}
	s := o.String()
	if !strings.HasSuffix(s, "last go\n") || !strings.Contains(s, "output dropped") || len(s) > 2*outputHalf+100 {
		t.Errorf("output of %d bytes: want the head, a mark and the tail", len(s))
	}
}

// TestHogsBurnOnlyInSoakRunsAndStop: Hogs starts one goroutine per CPU in
// a soak run and none otherwise, and its goroutines end with the test.
func TestHogsBurnOnlyInSoakRunsAndStop(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Run("default", func(t *testing.T) {
		t.Setenv("STRAND_SOAK", "")
		Hogs(t)
		if n := runtime.NumGoroutine(); n > base+1 {
			t.Fatalf("%d goroutines after Hogs outside a soak, %d before", n, base)
		}
	})
	t.Run("soak", func(t *testing.T) {
		t.Setenv("STRAND_SOAK", "1")
		Hogs(t)
		if n := runtime.NumGoroutine(); n < base+runtime.NumCPU() {
			t.Fatalf("%d goroutines after Hogs in a soak, %d before: want %d hogs", n, base, runtime.NumCPU())
		}
	})
	WaitFor(t, 10*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > base {
			return fmt.Errorf("%d goroutines after the soak subtest ended, %d before: the hogs did not stop", n, base)
		}
		return nil
	})
}
