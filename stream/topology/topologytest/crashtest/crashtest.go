// Package crashtest is a child-process crash harness, strand's own and
// one for the crash tests of a service built on strand: a crash
// test starts its own test binary again as a child process in a role,
// kills it with SIGKILL at a random moment or lets the child kill itself
// at a chosen point, restarts it, and checks what the child left behind
// against a reference.
//
// A child is either a test function of the binary, which starts with
// Child (it skips in a normal run):
//
//	func TestCrashChild(t *testing.T) {
//		crashtest.Child(t, "state-crash")
//		... work, print a ready line, keep working until killed
//	}
//
//	out := crashtest.Run(t, crashtest.Spec{Role: "state-crash", Test: "TestCrashChild", Ready: "committing"}, killAfter)
//
// or a program run by TestMain in place of the tests, given arguments:
//
//	func TestMain(m *testing.M) {
//		if code, ok := crashtest.Main(map[string]func([]string) int{"processor": childMain}); ok {
//			os.Exit(code)
//		}
//		os.Exit(m.Run())
//	}
//
// A child that wants to be killed at a point (inside a commit, after a
// send) calls Die there, usually through a hook armed by KillPoint; the
// parent learns where from Outcome.SelfKill.
//
// Where a random kill lands depends on the machine's speed, so a crash
// test never fails because kills missed a point: Coverage logs such a
// miss in the default run and fails only soak runs (STRAND_SOAK=1), which
// kill hundreds of times (Kills).
package crashtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/internal/testrun"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment variables a child is started with.
const (
	// EnvRole names the role a child runs (Spec.Role); it is empty in the
	// parent.
	EnvRole = "STRAND_CRASHTEST_ROLE"
	// EnvArgs carries the child's arguments (Spec.Args) as a JSON array.
	EnvArgs = "STRAND_CRASHTEST_ARGS"
)

// selfKillPrefix starts the line Die prints before the process kills
// itself.
const selfKillPrefix = "crashtest: self-kill at "

// Role returns the role this process was started in, or "" in a process
// that is no crashtest child.
func Role() string { return os.Getenv(EnvRole) }

// Args returns the arguments the parent gave this child (Spec.Args).
func Args() ([]string, error) {
	v := os.Getenv(EnvArgs)
	if v == "" {
		return nil, nil
	}
	var args []string
	if err := json.Unmarshal([]byte(v), &args); err != nil {
		return nil, strerr.Errorf("strand: crashtest: %s is not a JSON array of strings: %w", EnvArgs, err)
	}
	return args, nil
}

// Main runs, in a child whose role is a key of roles, that role's function
// with the child's arguments, and returns its exit code and true; TestMain
// then exits with it instead of running the tests. In the parent, or in a
// child whose role runs a test function (Child), it returns false.
func Main(roles map[string]func(args []string) int) (code int, ok bool) {
	fn, ok := roles[Role()]
	if !ok {
		return 0, false
	}
	args, err := Args()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2, true
	}
	return fn(args), true
}

// Child skips the calling test unless this process is a child started in
// role: the first line of a test function that is a crash test's child.
func Child(t testing.TB, role string) {
	t.Helper()
	if Role() != role {
		t.Skipf("runs only as a crash test's child process (role %q)", role)
	}
}

// Die, in a child, prints where it dies and kills the process with
// SIGKILL: no deferred function runs, nothing is flushed or closed, as
// when the machine loses power under a process. It does not return.
func Die(point string) {
	fmt.Fprintf(os.Stderr, "\n%s%s\n", selfKillPrefix, point)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// KillPoint parses a kill mode "point:probability" (as "commit:0.3") and
// returns the point and a function that calls Die(point) with that
// probability each time it is called. The empty mode returns "" and a
// function that does nothing. points, when not empty, lists the points a
// caller knows; another is an error.
func KillPoint(mode string, points ...string) (point string, maybe func(), err error) {
	if mode == "" {
		return "", func() {}, nil
	}
	point, ps, ok := strings.Cut(mode, ":")
	p, perr := strconv.ParseFloat(ps, 64)
	if !ok || perr != nil || p < 0 || p > 1 {
		return "", nil, fmt.Errorf("strand: crashtest: kill mode %q: want point:probability with a probability in [0, 1]", mode)
	}
	if len(points) > 0 && !contains(points, point) {
		return "", nil, fmt.Errorf("strand: crashtest: kill mode %q: unknown point %q (known: %s)", mode, point, strings.Join(points, ", "))
	}
	return point, func() {
		if rand.Float64() < p {
			Die(point)
		}
	}, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Soak reports whether this is a soak run (STRAND_SOAK set): crash tests
// kill more often and assert their coverage.
func Soak() bool { return os.Getenv("STRAND_SOAK") != "" }

// Kills returns how many kills a crash test makes: normal in the default
// run, soak with STRAND_SOAK set, or STRAND_SOAK_KILLS when that is set to
// a positive number in a soak run.
func Kills(normal, soak int) int {
	if !Soak() {
		return normal
	}
	if n, err := strconv.Atoi(os.Getenv("STRAND_SOAK_KILLS")); err == nil && n > 0 {
		return n
	}
	return soak
}

// Hogs starts, in a soak run (STRAND_SOAK set), one goroutine per CPU that
// burns CPU beside the children until the test ends: the windows a crash
// test looks for (a send in flight, a commit visible before its log
// record is synced) open under load. In the default run it starts none,
// so that the suite stays fast on a shared machine.
func Hogs(t testing.TB) {
	t.Helper()
	if !Soak() {
		return
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			for x := uint64(1); ; x = x*6364136223846793005 + 1 {
				if x&0xffff == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		})
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// Coverage reports that kills did not land where a crash test wanted them
// when ok is false. Where random kills land depends on the machine's
// speed, so the default run only logs it (the data checks are the test);
// soak runs (STRAND_SOAK=1), which kill hundreds of times, fail the test.
func Coverage(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("STRAND_SOAK") == "1" {
		t.Errorf("coverage: "+format, args...)
		return
	}
	t.Logf("coverage (asserted only with STRAND_SOAK=1): "+format, args...)
}

// Spec describes a child process.
type Spec struct {
	// Role is the child's role (EnvRole): the one its Child or Main
	// checks. Required.
	Role string
	// Test names the test function the child runs ("TestCrashChild");
	// empty runs none, for a child that TestMain runs through Main.
	Test string
	// Args are the child's arguments (Args, Main).
	Args []string
	// Env is added to the child's environment (this process's).
	Env []string
	// Ready is text the child prints (on stdout or stderr) when the
	// moment to kill it comes: Proc.Ready closes at the first line that
	// contains it. Empty: Ready is closed at the start.
	Ready string
	// Path is the binary to run; empty runs this test binary.
	Path string
}

// Command returns the command that runs the child s describes, not
// started: for a program that starts its children itself (a launcher
// given to it). Start runs it and watches it. A child built with -race
// exits without the race runtime's second of sleep (GORACE
// atexit_sleep_ms=0, unless the environment sets it): races it finds are
// still reported and still fail it.
func Command(s Spec) (*exec.Cmd, error) {
	if s.Role == "" {
		return nil, errors.New("strand: crashtest: Spec.Role is empty; name the role the child checks")
	}
	path, args := s.Path, []string(nil)
	if path == "" {
		path = os.Args[0]
		run := "^$"
		if s.Test != "" {
			run = "^" + s.Test + "$"
		}
		args = []string{"-test.run=" + run, "-test.count=1", "-test.v"}
	}
	js, err := json.Marshal(s.Args)
	if err != nil {
		return nil, strerr.Errorf("strand: crashtest: the child's arguments: %w", err)
	}
	cmd := exec.Command(path, args...)
	if s.Path != "" {
		cmd.Args = append(cmd.Args, s.Args...)
	}
	cmd.Env = append(os.Environ(), EnvRole+"="+s.Role, EnvArgs+"="+string(js))
	cmd.Env = testrun.ChildEnv(append(cmd.Env, s.Env...))
	return cmd, nil
}

// Proc is a running child process.
type Proc struct {
	cmd   *exec.Cmd
	out   *output
	ready chan struct{}
	done  chan struct{}
	err   error // of Wait, once done is closed

	cursor int // the lines WaitLine has looked at
}

// Start starts the child s describes, failing t if it cannot. A child
// still running when the test ends is killed. Unless s.Env sets TMPDIR,
// the child's TMPDIR is a directory of t's (t.TempDir), removed when the
// test ends: what a killed child left in its temporary directories goes
// with it.
func Start(t testing.TB, s Spec) *Proc {
	t.Helper()
	if s.Role == "" {
		t.Fatal("crashtest.Start: Spec.Role is empty; name the role the child checks")
	}
	cmd, err := Command(s)
	if err != nil {
		t.Fatalf("crashtest.Start: %v", err)
	}
	if !setsEnv(s.Env, "TMPDIR") {
		// The child's temporary directories (its t.TempDir, os.MkdirTemp)
		// go under the parent's: a child killed before its cleanup ran
		// leaves nothing behind once the parent's test ends.
		cmd.Env = append(cmd.Env, "TMPDIR="+t.TempDir())
	}
	p := &Proc{cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	p.out = newOutput(s.Ready, p.ready)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if s.Ready == "" {
		close(p.ready)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("crashtest: start %s (role %s): %v", p.cmd.Path, s.Role, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.Kill()
		}
	})
	return p
}

// setsEnv reports whether env (KEY=value entries) sets key.
func setsEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}

// Exit ends a test binary with code, as os.Exit does, except that a
// binary built with -race whose tests passed does not sleep the race
// runtime's second on its way out (GORACE atexit_sleep_ms: time for
// other goroutines to report a race; the testing package has checked for
// races by then, and a test or a run that raced has a failing code). Use
// it in a TestMain: crashtest.Exit(m.Run()), or
// goleak.VerifyTestMain(m, goleak.Cleanup(crashtest.Exit)).
func Exit(code int) { testrun.Exit(code) }

// WaitFor calls cond until it returns nil and returns how long that took;
// when timeout passes first, it fails t with cond's last error. A crash or
// scale-out test waits with it for what its processes show (a partition
// served again after a kill, a checkpoint past an offset) instead of
// sleeping: cond is called at once, then after pauses growing from 1 ms to
// 20 ms. timeout bounds a hang, not the machine's speed: give it room for a
// loaded machine.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) time.Duration {
	t.Helper()
	return testrun.WaitFor(t, timeout, cond)
}

// Ready is closed when the child printed Spec.Ready.
func (p *Proc) Ready() <-chan struct{} { return p.ready }

// Done is closed when the child has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns how the child ended (exec.Cmd.Wait's error) once Done is
// closed: nil for exit code 0.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Pid returns the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the child.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill kills the child with SIGKILL (continuing it first, should it be
// stopped) and waits until it has ended. Killing a child that ended does
// nothing.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	<-p.done
}

// Killed reports, once the child ended, whether it died of SIGKILL (from
// the parent or from Die).
func (p *Proc) Killed() bool { return p.signaled(syscall.SIGKILL) }

// signaled reports, once the child ended, whether sig ended it.
func (p *Proc) signaled(sig syscall.Signal) bool {
	<-p.done
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// EndedBy reports, once the child ended, whether the signal sig ended it.
func (p *Proc) EndedBy(sig syscall.Signal) bool { return p.signaled(sig) }

// SelfKill returns the point the child died at by Die, once it ended;
// false if it did not die so.
func (p *Proc) SelfKill() (string, bool) {
	<-p.done
	out := p.out.String()
	i := strings.LastIndex(out, selfKillPrefix)
	if i < 0 || !p.Killed() {
		return "", false
	}
	point, _, _ := strings.Cut(out[i+len(selfKillPrefix):], "\n")
	return point, true
}

// Output returns what the child printed so far, on stdout and stderr
// (interleaved): its first MiB and its last MiB.
func (p *Proc) Output() string { return p.out.String() }

// Tail returns the last n lines of Output, for failure messages.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Wait waits until the child ends or d passes; it kills the child and
// fails t in the second case, and reports the child's exit error in both.
func (p *Proc) Wait(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.Kill()
		t.Fatalf("crashtest: the child did not end within %v:\n%s", d, p.Tail(40))
		return nil
	}
}

// Outcome is how one run of Run ended.
type Outcome struct {
	// Finished: the child exited by itself with code 0 before the kill.
	Finished bool
	// SelfKill is the point the child died at by Die, or "".
	SelfKill string
	// Output is what the child printed (Proc.Output).
	Output string
}

// Run starts the child s describes, waits until it is Ready, and kills it
// with SIGKILL killAfter later, unless it ended first. With killAfter <= 0
// it waits for the child to finish instead (at most 5 minutes). It fails
// t when the child fails (a non-zero exit that is not a kill), ends before
// it is ready, or is not ready within 2 minutes.
func Run(t testing.TB, s Spec, killAfter time.Duration) Outcome {
	t.Helper()
	p := Start(t, s)
	if killAfter <= 0 {
		if err := p.Wait(t, 5*time.Minute); err != nil {
			t.Fatalf("crashtest: child (role %s) failed: %v\n%s", s.Role, err, p.Tail(60))
		}
		return Outcome{Finished: true, Output: p.Output()}
	}
	select {
	case <-p.ready:
	case <-p.done:
		if point, ok := p.SelfKill(); ok {
			return Outcome{SelfKill: point, Output: p.Output()}
		}
		t.Fatalf("crashtest: child (role %s) ended before it was ready (%q): %v\n%s", s.Role, s.Ready, p.err, p.Tail(60))
	case <-time.After(2 * time.Minute):
		p.Kill()
		t.Fatalf("crashtest: child (role %s) not ready (%q) within 2 minutes:\n%s", s.Role, s.Ready, p.Tail(60))
	}
	select {
	case <-p.done:
	case <-time.After(killAfter):
		p.Kill()
	}
	out := Outcome{Output: p.Output()}
	if point, ok := p.SelfKill(); ok {
		out.SelfKill = point
		return out
	}
	if p.Killed() {
		return out
	}
	if p.err != nil {
		t.Fatalf("crashtest: child (role %s) failed: %v\n%s", s.Role, p.err, p.Tail(60))
	}
	out.Finished = true
	return out
}

// output keeps a child's output (its first and last MiB) and closes ready
// at the first line that contains the ready text.
type output struct {
	mu        sync.Mutex
	head      []byte
	tail      []byte // the last bytes once head is full
	dropped   bool
	line      []byte // the current line, for the ready check
	readyText []byte
	ready     chan struct{}
	seen      bool
	lines     []string      // complete lines, the first maxLines
	grew      chan struct{} // closed and replaced at every line
}

const maxLines = 100_000

const outputHalf = 1 << 20

func newOutput(ready string, c chan struct{}) *output {
	return &output{readyText: []byte(ready), ready: c, seen: ready == "", grew: make(chan struct{})}
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if room := outputHalf - len(o.head); room > 0 {
		n := min(room, len(b))
		o.head = append(o.head, b[:n]...)
		o.keepTail(b[n:])
	} else {
		o.keepTail(b)
	}
	for rest := b; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		part := rest
		if i >= 0 {
			part = rest[:i]
		}
		if room := 64<<10 - len(o.line); room > 0 {
			o.line = append(o.line, part[:min(room, len(part))]...)
		}
		if i < 0 {
			break
		}
		o.endLine()
		rest = rest[i+1:]
	}
	return len(b), nil
}

func (o *output) keepTail(b []byte) {
	if len(b) == 0 {
		return
	}
	o.tail = append(o.tail, b...)
	if len(o.tail) > 2*outputHalf { // trim now and then, not on every write
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-outputHalf:]...)
		o.dropped = true
	}
}

func (o *output) endLine() {
	if !o.seen && bytes.Contains(o.line, o.readyText) {
		o.seen = true
		close(o.ready)
	}
	if len(o.lines) < maxLines {
		o.lines = append(o.lines, string(o.line))
		close(o.grew)
		o.grew = make(chan struct{})
	}
	o.line = o.line[:0]
}

// WaitLine waits until the child prints a line that contains text, after
// the line the previous WaitLine returned, and returns it. It fails t
// when the child ends first or d passes (killing the child).
func (p *Proc) WaitLine(t testing.TB, text string, d time.Duration) string {
	t.Helper()
	timeout := time.After(d)
	for {
		p.out.mu.Lock()
		lines, grew := p.out.lines, p.out.grew
		p.out.mu.Unlock()
		for ; p.cursor < len(lines); p.cursor++ {
			if strings.Contains(lines[p.cursor], text) {
				p.cursor++
				return lines[p.cursor-1]
			}
		}
		select {
		case <-grew:
		case <-p.done:
			p.out.mu.Lock()
			more := len(p.out.lines) > p.cursor
			p.out.mu.Unlock()
			if !more {
				t.Fatalf("crashtest: the child ended (%v) before it printed %q:\n%s", p.err, text, p.Tail(40))
			}
		case <-timeout:
			p.Kill()
			t.Fatalf("crashtest: the child did not print %q within %v:\n%s", text, d, p.Tail(40))
		}
	}
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.tail) == 0 {
		return string(o.head)
	}
	tail, sep := o.tail, ""
	if len(tail) > outputHalf {
		tail = tail[len(tail)-outputHalf:]
		o.dropped = true
	}
	if o.dropped {
		sep = "\n[... crashtest: output dropped ...]\n"
	}
	return string(o.head) + sep + string(tail)
}
