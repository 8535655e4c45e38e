package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client"
	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

func TestMain(m *testing.M) {
	if code, ok := crashtest.Main(map[string]func([]string) int{childRole: childMain}); ok {
		os.Exit(code) // the broker process of a measurement (see brokerCommand)
	}
	log.SetOutput(io.Discard)
	testrun.Verify(m)
}

// childRole is the crashtest role in which the test binary runs the
// command itself, with the child's arguments, instead of the tests.
const childRole = "iggy-embedded"

func childMain(args []string) int {
	if err := run(args); err != nil {
		fmt.Fprintln(os.Stderr, "iggy-embedded:", err)
		return 1
	}
	return 0
}

// brokerCommand returns the command that runs the broker with args in a
// child process (this test binary), not started.
func brokerCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd, err := crashtest.Command(crashtest.Spec{Role: childRole, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs the command and waits until it accepts connections.
func start(t *testing.T, args ...string) chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- run(args) }()
	waitServing(t, args[1], 30*time.Second, "server")
	return done
}

// waitServing waits until addr accepts a TCP connection, for at most
// timeout (a hang guard), and fails t naming what did not start.
func waitServing(t *testing.T, addr string, timeout time.Duration, what string) {
	t.Helper()
	testrun.WaitFor(t, timeout, func() error {
		nc, err := dialTCP(addr)
		if err != nil {
			return fmt.Errorf("%s did not start: %v", what, err)
		}
		nc.Close()
		return nil
	})
}

func stop(t *testing.T, done chan error) {
	t.Helper()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no graceful stop on SIGTERM")
	}
}

func TestServesAndStopsGracefullyKeepingData(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	done := start(t, "-addr", addr, "-data", dir)
	cli, err := client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(addr)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.LoginUser("iggy", "iggy"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.CreateStream("kept"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	stop(t, done)

	done = start(t, "-addr", addr, "-data", dir)
	cli, err = client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(addr)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.LoginUser("iggy", "iggy"); err != nil {
		t.Fatal(err)
	}
	id, _ := iggcon.NewIdentifier("kept")
	if _, err := cli.GetStream(id); err != nil {
		t.Fatalf("stream lost across a restart: %v", err)
	}
	cli.Close()
	stop(t, done)
}

func TestBadFlagIsAnError(t *testing.T) {
	if err := run([]string{"-no-such-flag"}); err == nil {
		t.Fatal("bad flag accepted")
	}
}

func TestDamagedDataIsRefusedAndRepairMovesItAside(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	done := start(t, "-addr", addr, "-data", dir)
	stop(t, done)
	meta := filepath.Join(dir, "meta.log")
	b, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	if err := os.WriteFile(meta, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = run([]string{"-addr", addr, "-data", dir})
	if err == nil || !strings.Contains(err.Error(), meta) || !strings.Contains(err.Error(), "-repair") {
		t.Fatalf("damaged meta.log: %v", err)
	}
	if err := run([]string{"-addr", addr, "-repair"}); err == nil {
		t.Fatal("-repair without -data accepted")
	}
	done = start(t, "-addr", addr, "-data", dir, "-repair")
	stop(t, done)
	moved, _ := filepath.Glob(filepath.Join(dir, "damaged", "*", "meta.log"))
	if len(moved) != 1 {
		t.Fatalf("damaged meta.log not moved aside: %v", moved)
	}
	if got, err := os.ReadFile(moved[0]); err != nil || string(got) != string(b) {
		t.Fatalf("moved-aside meta.log changed: %v", err)
	}
}
