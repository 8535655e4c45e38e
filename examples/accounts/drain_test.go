package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream/topology"
)

// A processor that fails while -drain waits for it to catch up makes the
// run return that failure (it used to hang for ever: the wait took Run's
// result from the channel the stop then waited on).
func TestDrainReturnsTheProcessorsError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	common := []string{"-iggy", srv.Addr(), "-partitions", "2", "-data", t.TempDir(), "-http", "", "-progress", "0"}
	if err := run(ctx, append([]string{"-role", "producer", "-events", "200", "-poison", "0"}, common...), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected failure")
	faults := topology.Faults{AfterCommit: func(string, uint32, uint64) error { return injected }}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-role", "processor", "-drain"}, common...), io.Discard, io.Discard, topology.WithFaults(faults))
	}()
	select {
	case err := <-done:
		// The failure may reach run through the drain's wait ("processor
		// stopped before it caught up: …") or, when the App fails before
		// the wait begins, directly: either way it is the failure.
		if !errors.Is(err, injected) {
			t.Fatalf("-drain after a processor failure = %v, want the failure", err)
		}
	case <-ctx.Done():
		t.Fatal("-drain did not return after the processor failed")
	}
}
