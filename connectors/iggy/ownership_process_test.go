package iggy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/internal/scaleout/membership"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

const childEnv = "STRAND_GROUP_CHILD"

// TestGroupChildProcess is a member of the group in a process of its own,
// started by TestGroupProcessesKilledStoppedResumed; it skips otherwise.
// It writes its claims to a file, one JSON line each, and leaves the group
// on SIGTERM.
func TestGroupChildProcess(t *testing.T) {
	crashtest.Child(t, "group-member")
	name := os.Getenv(childEnv)
	f, err := os.OpenFile(os.Getenv(childEnv+"_TRACE"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cl, err := Connect(ctx, os.Getenv(childEnv+"_ADDR"), WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	trace := func(ev traceEvent) {
		b, _ := json.Marshal(ev)
		_, _ = f.Write(append(b, '\n')) // one write a line: a SIGKILL leaves whole lines
	}
	m, err := cl.JoinGroup(ctx, os.Getenv(childEnv+"_STREAM"), "accounts", 6, WithSessionTimeout(testSession),
		WithHeartbeat(testHeartbeat), WithGroupPollInterval(testPoll), WithMemberName(name),
		WithGroupLogger(testLogger()), withTrace(trace))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for a := range m.Assignments() {
			if a.Kind == Revoking {
				_ = m.HandBack(ctx, a.Partition)
			}
		}
	}()
	<-ctx.Done()
	m.Close()
}

// groupView reads the whole membership log as any reader would.
func groupView(ctx context.Context, c *Client, stream, topic string) (*membership.State, error) {
	tr, err := newTopicRef(stream, topic)
	if err != nil {
		return nil, err
	}
	st := membership.NewState()
	for off := uint64(0); ; {
		var pm *iggcon.PolledMessage
		pid := uint32(0)
		err := c.admin.call(ctx, func(s *session) error {
			var err error
			pm, err = s.poll(tr, pid, off, 1000)
			return err
		})
		if err != nil {
			return nil, err
		}
		if pm == nil || len(pm.Messages) == 0 {
			return st, nil
		}
		for _, msg := range pm.Messages {
			st.Apply(msg.Header.Offset, msg.Header.Timestamp, msg.Payload)
			off = msg.Header.Offset + 1
		}
	}
}

// names returns the group's members by name, with how many partitions
// each owns, or "" if a partition is revoking or unowned.
func settledNames(st *membership.State) string {
	count := map[string]int{}
	for _, p := range st.Parts {
		m := st.Members[p.Owner]
		if m == nil || p.Revoking {
			return ""
		}
		count[m.Name]++
	}
	var out []string
	for _, id := range st.IDs {
		out = append(out, fmt.Sprintf("%s:%d", st.Members[id].Name, count[st.Members[id].Name]))
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

func TestGroupProcessesKilledStoppedResumed(t *testing.T) {
	if crashtest.Role() != "" {
		t.Skip("a child does not start children")
	}
	tg := newTarget(t)
	tg.faults(t)
	admin := tg.connect(t)
	stream, _ := tg.topic(t, admin, 1)
	dir := t.TempDir()
	type child struct {
		proc  *crashtest.Proc
		trace string
	}
	children := map[string]*child{}
	for _, name := range []string{"p0", "p1", "p2"} {
		c := &child{trace: filepath.Join(dir, name+".trace")}
		c.proc = crashtest.Start(t, crashtest.Spec{Role: "group-member", Test: "TestGroupChildProcess",
			Env: []string{childEnv + "=" + name, childEnv + "_ADDR=" + tg.addr, childEnv + "_STREAM=" + stream, childEnv + "_TRACE=" + c.trace}})
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("output of %s:\n%s", name, c.proc.Output())
			}
		})
		children[name] = c
	}
	wait := func(what, want string) time.Duration {
		t.Helper()
		var got string
		return testrun.WaitFor(t, 20*time.Second, func() error {
			st, err := groupView(ctxT(t, 5*time.Second), admin, stream, "strand-members-accounts")
			if err != nil {
				return fmt.Errorf("%s: group is %q, want %q (reading the group: %v)", what, got, want, err)
			}
			if got = settledNames(st); got != want {
				return fmt.Errorf("%s: group is %q, want %q", what, got, want)
			}
			return nil
		})
	}
	wait("three processes joined", "[p0:2 p1:2 p2:2]")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	children["p0"].proc.Kill()
	t.Logf("SIGKILL: partitions moved after %v", wait("after SIGKILL of p0", "[p1:3 p2:3]"))
	must(children["p1"].proc.Signal(syscall.SIGSTOP))
	t.Logf("SIGSTOP: partitions moved after %v", wait("after SIGSTOP of p1", "[p2:6]"))
	must(children["p1"].proc.Signal(syscall.SIGCONT))
	t.Logf("SIGCONT: the resumed process rejoined and the group settled after %v", wait("after SIGCONT of p1", "[p1:3 p2:3]"))
	for _, name := range []string{"p1", "p2"} {
		must(children[name].proc.Signal(syscall.SIGTERM))
		if err := children[name].proc.Wait(t, time.Minute); err != nil {
			t.Fatalf("child %s: %v", name, err)
		}
	}
	var events []traceEvent // each file is in its member's order
	for _, c := range children {
		f, err := os.Open(c.trace)
		must(err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev traceEvent
			must(json.Unmarshal(sc.Bytes(), &ev))
			events = append(events, ev)
		}
		f.Close()
	}
	byPart := checkHistory(t, events)
	changes := 0
	for _, cs := range byPart {
		changes += len(cs)
	}
	t.Logf("%d claims over 6 partitions, none overlapping, epochs rising", changes)
}
