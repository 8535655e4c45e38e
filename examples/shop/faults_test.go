package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/examples/shop/orders"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// TestBrokerFaultsWhileForwarding refuses every send of the outbox first:
// the orders read model must still get every line (a forward that fails
// never holds up nor dead-letters the events that emitted it). Then sends
// fail now and then, are delayed, and connections are dropped under the
// processor's feet until it has caught up; at the end both read models are
// exact and the receipts and repartition topics hold every message once.
// The default run has 7,500 order lines (15,000 took 60 s of a loaded run,
// issue 33 item 7); STRAND_SOAK=1 keeps 15,000.
func TestBrokerFaultsWhileForwarding(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test in -short mode")
	}
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	dir := t.TempDir()
	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	events := 7500
	if crashtest.Soak() {
		events = 15000
	}
	args := []string{"-iggy", srv.Addr(), "-events", strconv.Itoa(events), "-orders", "500", "-customers", "40", "-partitions", "4"}
	var out bytes.Buffer
	if err := run(ctx, append([]string{"-role", "producer"}, args...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}

	// Phase 1: the broker refuses every send (only the outbox sends now).
	var refused atomic.Int64
	removeRefuse := srv.Control(func(req *iggytest.Request) iggytest.Reply {
		if req.Command == iggytest.CmdSendMessages {
			refused.Add(1)
			return iggytest.Reply{Action: iggytest.Fail, Status: iggytest.StatusError}
		}
		return iggytest.Reply{}
	})
	log := slog.New(slog.DiscardHandler)
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithLogger(log), iggy.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	shop := orders.NewTopology(orders.Stream)
	app, err := topology.Open(ctx, shop.Topology, cl, dir, topology.WithLogger(log),
		topology.WithDeadLetterTopic(orders.Stream+"/"+orders.DLQTopic))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()

	lines := orders.Workload(events, 500, 40, 1)
	wantOrders, _, _ := orders.Reference(lines)
	var st stream.Stats // shop/orders, when it applied every line
	crashtest.WaitFor(t, time.Minute, func() error {
		st = app.Stats()[0]
		if st.Total.Applied != uint64(len(lines)) || refused.Load() == 0 {
			return fmt.Errorf("orders applied %d of %d lines while forwards failed", st.Total.Applied, len(lines))
		}
		return nil
	})
	if st.Total.DeadLettered != 0 || st.ParkedKeys != 0 {
		t.Fatalf("orders: %d dead letters, %d parked keys while forwards failed", st.Total.DeadLettered, st.ParkedKeys)
	}
	if st.Total.OutboxPublished != 0 {
		t.Fatalf("%d outbox messages published while the broker refused every send", st.Total.OutboxPublished)
	}
	n := 0
	if err := shop.Orders.Scan(ctx, func(k orders.OrderID, v orders.Order) bool {
		n++
		if wantOrders[k] != v {
			t.Errorf("order %d = %+v, want %+v", k, v, wantOrders[k])
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(wantOrders) {
		t.Fatalf("%d orders while forwards failed, want %d", n, len(wantOrders))
	}

	// Phase 2: sends fail sometimes and are slow sometimes, and every
	// connection is dropped now and then, until the processor caught up.
	removeRefuse()
	var mu sync.Mutex
	var failed, drops atomic.Int64
	r := rand.New(rand.NewPCG(7, 7))
	removeChaos := srv.Control(func(req *iggytest.Request) iggytest.Reply {
		if req.Command != iggytest.CmdSendMessages {
			return iggytest.Reply{}
		}
		mu.Lock()
		x := r.IntN(10)
		mu.Unlock()
		switch {
		case x == 0:
			failed.Add(1)
			return iggytest.Reply{Action: iggytest.Fail, Status: iggytest.StatusError}
		case x == 1:
			return iggytest.Reply{Delay: 20 * time.Millisecond}
		}
		return iggytest.Reply{}
	})
	chaosDone := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for drops.Load() < 30 {
			select {
			case <-chaosDone:
				return
			case <-tick.C:
				srv.DropConnections()
				drops.Add(1)
			}
		}
	})
	waitCtx, cancelWait := context.WithTimeout(ctx, 2*time.Minute)
	err = app.WaitCaughtUp(waitCtx)
	cancelWait()
	close(chaosDone)
	chaos.Wait()
	removeChaos()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range app.Stats() {
		t.Logf("%s: %+v", st.Source, st.Total)
		for _, ps := range st.Partitions {
			t.Logf("  %d: next %d end %d pending %d", ps.Partition, ps.Next, ps.End, ps.OutboxPending)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, append([]string{"-role", "check", "-data", dir}, args...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	t.Logf("phase 1: %d sends refused; phase 2: %d sends failed, connections dropped %d times; %s",
		refused.Load(), failed.Load(), drops.Load(), strings.TrimSpace(out.String()))
	// Whether a drop (every 100 ms) lands before the processor caught up
	// depends on the machine's speed: the data check above is the test;
	// that phase 2 injected faults is asserted over soaks.
	crashtest.Coverage(t, failed.Load() > 0 && drops.Load() > 0, "phase 2 injected no fault (%d sends failed, %d drops)", failed.Load(), drops.Load())
}
