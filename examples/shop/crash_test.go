package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/examples/shop/orders"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// The crash test re-executes this test binary as the processor: with
// childEnv set, TestMain runs the program with the arguments in
// childArgsEnv (JSON) instead of the tests, with hooks that SIGKILL the
// process at the point named by childKillEnv.
const (
	childEnv     = "STRAND_SHOP_CHILD"
	childArgsEnv = "STRAND_SHOP_ARGS"
	childKillEnv = "STRAND_SHOP_KILL"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

func childMain() int {
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(childArgsEnv)), &args); err != nil {
		fmt.Fprintln(os.Stderr, "child: bad", childArgsEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	hooks, err := killHooks(os.Getenv(childKillEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	if err := run(ctx, args, os.Stdout, os.Stderr, topology.WithFaults(hooks)); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// die SIGKILLs this process: no deferred function, no flush.
func die(where string) {
	fmt.Fprintf(os.Stderr, "SELF-KILL %s\n", where)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// killHooks returns hooks that kill the process at a point, with
// probability p per call, for mode "point:p"; none for "" (the parent kills
// at a random moment):
//
//	after-commit        a batch committed, its outbox messages not yet published
//	outbox-before-send  outbox messages durable, about to be sent
//	outbox-after-send   outbox messages accepted by the broker, rows not deleted
func killHooks(mode string) (topology.Faults, error) {
	var h topology.Faults
	if mode == "" {
		return h, nil
	}
	point, ps, ok := strings.Cut(mode, ":")
	p, err := strconv.ParseFloat(ps, 64)
	if !ok || err != nil {
		return h, fmt.Errorf("bad kill mode %q, want point:probability", mode)
	}
	hit := func() bool { return rand.Float64() < p }
	switch point {
	case "after-commit":
		h.AfterCommit = func(string, uint32, uint64) error {
			if hit() {
				die(point)
			}
			return nil
		}
	case "outbox-before-send":
		h.BeforeOutboxSend = func(string, uint32, []connector.Message) error {
			if hit() {
				die(point)
			}
			return nil
		}
	case "outbox-after-send":
		h.AfterOutboxSend = func(string, uint32, []connector.Message) error {
			if hit() {
				die(point)
			}
			return nil
		}
	default:
		return h, fmt.Errorf("unknown kill point %q", point)
	}
	return h, nil
}

// startChild starts the processor as a child process and waits until it
// prints readyLine.
func startChild(t *testing.T, args []string, kill string) (*exec.Cmd, *bytes.Buffer, <-chan error) {
	t.Helper()
	js, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childArgsEnv+"="+string(js), childKillEnv+"="+kill)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled && sc.Text() == readyLine {
				close(ready)
				signalled = true
			}
		}
		if !signalled {
			close(ready)
		}
		_, _ = io.Copy(io.Discard, out)
		done <- cmd.Wait()
	}()
	<-ready
	return cmd, &stderr, done
}

// TestCrashWhileForwarding kills the processor with SIGKILL while it
// forwards (at random moments, and right around the outbox's sends), at
// least 20 times, restarting it on the same store and the same broker;
// then it lets it finish and checks the read models (the orders enriched
// with their customers' profiles, a foreign-key join, included), the
// receipts topic and the repartition and enriched topics: every row exact,
// every message exactly once. Half the profiles come late, so lines wait
// for them across kills.
// STRAND_SOAK=1 makes it 200 kills over a bigger workload.
func TestCrashWhileForwarding(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	defer goleak.VerifyNone(t)
	kills, events := 20, 20_000
	if os.Getenv("STRAND_SOAK") != "" {
		kills, events = 200, 200_000
	}
	dir := t.TempDir()
	srv, err := iggytest.NewServer(iggytest.WithDataDir(dir + "/broker"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	common := []string{"-iggy", srv.Addr(), "-events", strconv.Itoa(events), "-orders", "700", "-customers", "60", "-partitions", "4"}
	ctx := context.Background()
	var out bytes.Buffer
	// The log grows while the processor is killed: each run has new
	// order lines to forward.
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range []string{orders.Topic, orders.ProfilesTopic} {
		if err := cl.EnsureTopic(ctx, orders.Stream, topic, 4); err != nil {
			t.Fatal(err)
		}
	}
	// Half the customers' profiles now, the rest after a quarter of the
	// kills: the lines of the others wait for theirs (parked, retried
	// across kills) before the join enriches them.
	ppub, err := iggy.NewPublisher(ctx, cl, orders.Stream, orders.ProfilesTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer ppub.Close(ctx)
	profiles := orders.CustomerProfiles(60, 1)
	publishProfiles := func(ps []orders.Profile) {
		if err := iggy.PublishBatch(ctx, ppub, orders.Profiles, ps); err != nil {
			t.Fatal(err)
		}
		if err := ppub.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	publishProfiles(profiles[:30])
	pub, err := iggy.NewPublisher(ctx, cl, orders.Stream, orders.Topic)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(ctx) // on a failure; closed below otherwise
	lines := orders.Workload(events, 700, 60, 1)
	published := 0
	publish := func(n int) {
		n = min(n, len(lines)-published)
		if err := iggy.PublishBatch(ctx, pub, orders.Lines, lines[published:published+n]); err != nil {
			t.Fatal(err)
		}
		if err := pub.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		published += n
	}
	proc := append([]string{"-role", "processor", "-data", dir + "/state", "-drain"}, common...)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	modes := []string{"", "after-commit:0.2", "outbox-before-send:0.3", "outbox-after-send:0.3"}
	killed, finished := 0, 0
	late := false
	for killed < kills {
		if !late && killed >= kills/4 {
			publishProfiles(profiles[30:])
			late = true
		}
		if finished > 5*kills {
			t.Fatalf("the processor finished %d times before %d kills; the kills come too late (%d so far)", finished, kills, killed)
		}
		publish(len(lines) / (3 * kills))
		mode := modes[r.IntN(len(modes))]
		cmd, stderr, done := startChild(t, proc, mode)
		select {
		case err := <-done:
			if err == nil {
				finished++
				continue
			}
			if !strings.Contains(stderr.String(), "SELF-KILL") {
				t.Fatalf("child (%q) failed: %v\n%s", mode, err, stderr)
			}
			killed++
		case <-time.After(time.Duration(5+r.IntN(300)) * time.Millisecond):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			killed++
		}
	}
	t.Logf("%d kills, %d runs finished before a kill", killed, finished)
	publish(len(lines))
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cmd, stderr, done := startChild(t, proc, "")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("last run: %v\n%s", err, stderr)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		t.Fatalf("last run did not finish\n%s", stderr)
	}
	out.Reset()
	if err := run(ctx, append([]string{"-role", "check", "-data", dir + "/state"}, common...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out.String()))
}
