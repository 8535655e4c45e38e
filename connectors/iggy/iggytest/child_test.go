package iggytest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The kill -9 tests run a durable broker in a child process (this test
// binary re-executed in crashtest role childRole) on the data directory in
// childEnv, listening on the address in childAddrEnv (any when empty).
const (
	childRole    = "iggytest-broker"
	childEnv     = "IGGYTEST_CHILD_DATA_DIR"
	childAddrEnv = "IGGYTEST_CHILD_ADDR"
	childReady   = "iggytest child: listening on "
)

// runChild is the body of the child process: it opens a durable broker on
// its directory, prints its address and serves until killed (at most an
// hour: it never outlives a lost parent for long).
func runChild([]string) int {
	opts := []Option{WithDataDir(os.Getenv(childEnv))}
	if addr := os.Getenv(childAddrEnv); addr != "" {
		opts = append(opts, WithAddr(addr))
	}
	srv, err := NewServer(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	fmt.Println(childReady + srv.Addr())
	time.Sleep(time.Hour)
	return 0
}

// startBroker starts the child broker on dir (on addr, when not empty)
// and returns it with the address it listens on.
func startBroker(t *testing.T, dir, addr string) (*crashtest.Proc, string) {
	t.Helper()
	p := crashtest.Start(t, crashtest.Spec{Role: childRole, Ready: childReady, Env: []string{childEnv + "=" + dir, childAddrEnv + "=" + addr}})
	select {
	case <-p.Ready():
	case <-p.Done():
		t.Fatalf("the child broker ended before it listened: %v\n%s", p.Err(), p.Tail(20))
	case <-time.After(time.Minute):
		p.Kill()
		t.Fatalf("the child broker did not listen within a minute:\n%s", p.Tail(20))
	}
	out := p.Output()
	_, rest, _ := strings.Cut(out, childReady)
	got, _, _ := strings.Cut(rest, "\n")
	return p, strings.TrimSpace(got)
}
