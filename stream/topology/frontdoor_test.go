package topology_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// The front door learns the partition count from the connector, stores it,
// and refuses a start whose count changed, saying what changed; a table
// answers ErrNotOpen before and after.
func TestOpenStoresAndChecksThePartitionCount(t *testing.T) {
	ctx := context.Background()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 4); err != nil {
		t.Fatal(err)
	}
	topo, n, _ := grouptest.Counter("parts")
	if _, _, err := n.Get(ctx, "a"); !errors.Is(err, topology.ErrNotOpen) {
		t.Fatalf("Get before Open = %v, want ErrNotOpen", err)
	}
	dir := t.TempDir()
	app, err := topology.Open(ctx, topo, cl, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Get(ctx, "a"); !errors.Is(err, topology.ErrNotOpen) {
		t.Fatalf("Get after Close = %v, want ErrNotOpen", err)
	}

	// The same directory over a topic of 8 partitions (another broker: the
	// topic was recreated) is refused.
	cl8 := grouptest.Broker(t)
	if err := cl8.EnsureTopic(ctx, "s", "log", 8); err != nil {
		t.Fatal(err)
	}
	_, err = topology.Open(ctx, topo, cl8, dir)
	if !errors.Is(err, topology.ErrPartitionsChanged) || !strings.Contains(err.Error(), "had 4 partitions") || !strings.Contains(err.Error(), "has 8 now") {
		t.Fatalf("Open after repartitioning = %v, want ErrPartitionsChanged naming 4 and 8", err)
	}
	// A missing source topic is refused by name.
	topo3, _, _ := grouptest.Counter("missing")
	topology.Source[string](topo3, "s/absent")
	if _, err := topology.Open(ctx, topo3, cl, t.TempDir()); err == nil || !strings.Contains(err.Error(), "s/absent") {
		t.Fatalf("Open with a missing topic = %v", err)
	}
	// Invalid options are refused, naming the option.
	if _, err := topology.Open(ctx, topo, cl, t.TempDir(), topology.WithPollSize(0)); err == nil || !strings.Contains(err.Error(), "topology.WithPollSize") {
		t.Fatalf("Open with poll size 0 = %v", err)
	}
}

// Close can be called in any order: before Run, during Run (which then
// returns after committing), twice; Run after Close is refused.
func TestAppCloseInAnyOrder(t *testing.T) {
	ctx := context.Background()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	topo, n, decl := grouptest.Counter("close")
	pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(ctx)
	for range 100 {
		if err := iggy.Publish(ctx, pub, decl, grouptest.Ev{K: "a", Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	app, err := topology.Open(ctx, topo, cl, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil { // before Run
		t.Fatal(err)
	}
	if err := app.Run(ctx); !errors.Is(err, topology.ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}

	app, err = topology.Open(ctx, topo, cl, dir)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	testrun.WaitFor(t, 30*time.Second, func() error {
		v, _, err := n.Get(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if v != 100 {
			return fmt.Errorf("count %d, want 100", v)
		}
		return nil
	})
	if err := app.Run(ctx); !errors.Is(err, topology.ErrRunning) {
		t.Fatalf("a second Run = %v, want ErrRunning", err)
	}
	if err := app.Close(); err != nil { // during Run
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run stopped by Close = %v, want nil", err)
	}
	if err := app.Close(); err != nil { // twice
		t.Fatal(err)
	}
	// The state survived: a new App resumes without replay.
	app, err = topology.Open(ctx, topo, cl, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if v, _, _ := n.Get(ctx, "a"); v != 100 {
		t.Fatalf("after reopening: %d, want 100", v)
	}
}

// A record whose strand-key header names one key and whose event names
// another is dead-lettered with its own reason, and applied to neither key.
func TestKeyMismatchIsDeadLettered(t *testing.T) {
	topo, n, decl := grouptest.Counter("mismatch")
	d := topologytest.NewDriver(t, topo)
	env, err := decl.Envelope(grouptest.Ev{K: "b", Amount: 5})
	if err != nil {
		t.Fatal(err)
	}
	h := env.Headers
	h.Key = []byte("a")
	d.PipeRecord("s/log", connector.Record{Headers: h, Payload: env.Payload})
	topologytest.Pipe(d, decl, grouptest.Ev{K: "a", Amount: 1})
	d.Advance()
	dls := d.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != deadletter.ReasonKeyMismatch || dls[0].Offset != 0 {
		t.Fatalf("dead letters %+v, want offset 0 as key-mismatch", dls)
	}
	ctx := context.Background()
	if v, _, _ := n.Get(ctx, "a"); v != 1 {
		t.Fatalf("a = %d, want 1", v)
	}
	if _, ok, _ := n.Get(ctx, "b"); ok {
		t.Fatal("b has a row")
	}
}

// A table fed by sources of different partition counts is refused at Open
// (its keys would be filed under two partitionings), and so is a static
// partition that a source does not have.
func TestOpenRefusesMixedPartitioningsAndAbsentPartitions(t *testing.T) {
	ctx := context.Background()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "a", 2); err != nil {
		t.Fatal(err)
	}
	if err := cl.EnsureTopic(ctx, "s", "b", 4); err != nil {
		t.Fatal(err)
	}
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	topo := topology.New("mixed")
	n := topology.NewTable[string, int64](topo, "n", stream.JSON[int64]())
	add := func(v *int64, e grouptest.Ev) error { *v += e.Amount; return nil }
	topology.Project(topology.On(topology.Source[string](topo, "s/a"), decl), n, add)
	topology.Project(topology.On(topology.Source[string](topo, "s/b"), decl), n, add)
	_, err := topology.Open(ctx, topo, cl, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `table "n" is fed by sources of 2 and 4 partitions`) {
		t.Fatalf("Open with mixed partitionings = %v", err)
	}

	one, _, _ := grouptest.Counter("absent")
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	_, err = topology.Open(ctx, one, cl, t.TempDir(), topology.WithPartitions(0, 5))
	if err == nil || !strings.Contains(err.Error(), "topology.WithPartitions") || !strings.Contains(err.Error(), "no partition 5") {
		t.Fatalf("Open with an absent partition = %v", err)
	}
}
