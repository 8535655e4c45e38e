package topology_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// The tests of docs/design.md "When the log or the store changes", on the
// embedded broker: a source topic deleted and created again, before a
// start or while the App runs, and partitions added while it runs.

// sdkAdmin is the official SDK logged in to the broker behind cl: what an
// operator uses to delete a topic or add partitions.
func sdkAdmin(t *testing.T, cl *iggy.Client) *tcp.IggyTcpClient {
	t.Helper()
	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(cl.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sdk.Close() })
	if _, err := sdk.LoginUser("iggy", "iggy"); err != nil {
		t.Fatal(err)
	}
	return sdk
}

func ident(t *testing.T, name string) iggcon.Identifier {
	t.Helper()
	id, err := iggcon.NewIdentifier(name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// publishN publishes n events of keys k0..k9, one each of amount 1.
func publishN(t *testing.T, cl *iggy.Client, decl *stream.Event[string, grouptest.Ev], n int) {
	t.Helper()
	ctx := context.Background()
	pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(ctx)
	for i := range n {
		if err := iggy.Publish(ctx, pub, decl, grouptest.Ev{K: fmt.Sprintf("k%d", i%10), Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// runCaughtUp opens an App over dir, runs it until it has committed
// everything in the topic, and closes it.
func runCaughtUp(t *testing.T, topo *topology.Topology, conn connector.Connector, dir string, opts ...topology.OpenOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := topology.Open(ctx, topo, conn, dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func recreateTopic(t *testing.T, cl *iggy.Client, partitions uint32) {
	t.Helper()
	if err := sdkAdmin(t, cl).DeleteTopic(ident(t, "s"), ident(t, "log")); err != nil {
		t.Fatal(err)
	}
	if err := cl.EnsureTopic(context.Background(), "s", "log", partitions); err != nil {
		t.Fatal(err)
	}
}

// A topic deleted and created again with the same partition count and more
// events than the state's checkpoints is refused at Open, naming the
// source and the way out; nothing of it is applied.
func TestOpenRefusesARecreatedTopic(t *testing.T) {
	ctx := context.Background()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	topo, _, decl := grouptest.Counter("recreated")
	publishN(t, cl, decl, 100)
	dir := t.TempDir()
	runCaughtUp(t, topo, cl, dir)

	recreateTopic(t, cl, 2)
	publishN(t, cl, decl, 300) // every partition now ends beyond its old checkpoint
	_, err := topology.Open(ctx, topo, cl, dir)
	if !errors.Is(err, topology.ErrSourceChanged) {
		t.Fatalf("Open over a recreated topic = %v, want ErrSourceChanged", err)
	}
	t.Logf("Open: %v", err)
	for _, want := range []string{`source "s/log"`, "deleted and created again", "move the state directory away"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	// Refused again: the refusal changed nothing.
	if _, err := topology.Open(ctx, topo, cl, dir); !errors.Is(err, topology.ErrSourceChanged) {
		t.Fatalf("a second Open = %v, want ErrSourceChanged", err)
	}
}

// hideIdentity is a connector whose sources report their end offsets but
// cannot tell their identity: the least a connector may do, with which a
// checkpoint beyond the end of a partition is still refused.
type hideIdentity struct{ connector.Connector }

type endsOnly struct {
	connector.Source
	eo connector.EndOffsetter
}

func (e endsOnly) EndOffsets(ctx context.Context) ([]uint64, error) { return e.eo.EndOffsets(ctx) }

func (h hideIdentity) OpenSource(ctx context.Context, topic string) (connector.Source, error) {
	src, err := h.Connector.OpenSource(ctx, topic)
	if err != nil {
		return nil, err
	}
	return endsOnly{Source: src, eo: src.(connector.EndOffsetter)}, nil
}

// A partition whose log ends before the state's checkpoint (a topic
// recreated with fewer events) is refused at Open even by a connector
// that cannot tell a topic's identity, naming the source, the partition,
// the checkpoint and the end.
func TestOpenRefusesACheckpointBeyondTheEnd(t *testing.T) {
	ctx := context.Background()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	topo, _, decl := grouptest.Counter("beyond")
	publishN(t, cl, decl, 200)
	dir := t.TempDir()
	conn := hideIdentity{cl}
	runCaughtUp(t, topo, conn, dir)

	recreateTopic(t, cl, 2)
	publishN(t, cl, decl, 10)
	_, err := topology.Open(ctx, topo, conn, dir)
	if !errors.Is(err, topology.ErrSourceChanged) {
		t.Fatalf("Open over a shorter log = %v, want ErrSourceChanged", err)
	}
	t.Logf("Open: %v", err)
	for _, want := range []string{`source "s/log" partition `, "the state's checkpoint is at offset ", "but the log ends at offset ", "move the state directory away"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// runUntilFailed opens and runs an App, calls change once it has caught
// up, and returns what Run returned (failing the test if it does not
// return within 20 seconds).
func runUntilFailed(t *testing.T, topo *topology.Topology, cl *iggy.Client, change func()) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := topology.Open(ctx, topo, cl, t.TempDir(), topology.WithEndOffsetInterval(20*time.Millisecond), topology.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	change()
	select {
	case err := <-done:
		t.Logf("Run: %v", err)
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run goes on 20s after the log changed under it")
		return nil
	}
}

// A topic deleted and created again while the App runs, and filled with
// more events than the old checkpoints, stops Run with an error naming the
// source and the way out. The broker holds the App's polls while the topic
// is replaced, so that the reader never sees it missing: only its identity
// tells the new log from the old.
func TestRunStopsWhenTheTopicIsRecreated(t *testing.T) {
	srv, cl := grouptest.BrokerServer(t)
	if err := cl.EnsureTopic(context.Background(), "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	topo, _, decl := grouptest.Counter("recreated-running")
	publishN(t, cl, decl, 50)
	err := runUntilFailed(t, topo, cl, func() {
		hold := make(chan struct{})
		remove := srv.Control(func(req *iggytest.Request) iggytest.Reply {
			if req.Command == iggytest.CmdPollMessages {
				<-hold
			}
			return iggytest.Reply{}
		})
		defer remove()
		defer close(hold)
		recreateTopic(t, cl, 2)
		publishN(t, cl, decl, 300)
	})
	if !errors.Is(err, topology.ErrSourceChanged) || !strings.Contains(err.Error(), `source "s/log"`) ||
		!strings.Contains(err.Error(), "deleted and created again") || !strings.Contains(err.Error(), "move the state directory away") {
		t.Fatalf("Run after the topic was recreated = %v, want ErrSourceChanged naming the source and the way out", err)
	}
}

// Partitions added while the App runs stop Run with an error naming the
// source and both counts (the new partitions would never be read).
func TestRunStopsWhenPartitionsAreAdded(t *testing.T) {
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(context.Background(), "s", "log", 8); err != nil {
		t.Fatal(err)
	}
	topo, _, decl := grouptest.Counter("grown")
	publishN(t, cl, decl, 50)
	err := runUntilFailed(t, topo, cl, func() {
		if err := sdkAdmin(t, cl).CreatePartitions(ident(t, "s"), ident(t, "log"), 4); err != nil {
			t.Fatal(err)
		}
	})
	if !errors.Is(err, topology.ErrPartitionsChanged) {
		t.Fatalf("Run after partitions were added = %v, want ErrPartitionsChanged", err)
	}
	for _, want := range []string{`source "s/log" had 8 partitions`, "has 12 now", "partitions 8..11 would never be read"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// A broker that fails the App's polls (as one whose disk failed answers
// with an error status) stops Run with an error naming the source, the
// partition and the offset, not the process; once the broker is well
// again, a second Run resumes and catches up exactly.
func TestABrokerErrorStopsRunNotTheProcess(t *testing.T) {
	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	topo, n, decl := grouptest.Counter("broker-error")
	publishN(t, cl, decl, 100)
	app, err := topology.Open(ctx, topo, cl, t.TempDir(), topology.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	srv.FailNext(iggytest.CmdPollMessages, 1, iggytest.StatusError)
	err = app.Run(ctx)
	t.Logf("Run: %v", err)
	if err == nil || !strings.Contains(err.Error(), `source "s/log" partition `) || !strings.Contains(err.Error(), "offset 0") {
		t.Fatalf("Run with a failing broker = %v, want an error naming the source, partition and offset", err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		if v, _, err := n.Get(ctx, fmt.Sprintf("k%d", k)); err != nil || v != 10 {
			t.Errorf("k%d = %d (%v), want 10", k, v, err)
		}
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The store cases at the front door: a stopped App's state
// directory that lost a write-ahead log opens with everything (a stopped
// store keeps nothing in its logs) and resumes exactly; one that lost
// Pebble's files is refused with ErrStoreDamaged, never taken for a new
// store that would fold the log again onto nothing.
func TestOpenOfALostOrDamagedStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	topo, n, decl := grouptest.Counter("store")
	publishN(t, cl, decl, 100)
	dir := t.TempDir()
	runCaughtUp(t, topo, cl, dir)

	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		if err := os.Remove(l); err != nil {
			t.Fatal(err)
		}
	}
	publishN(t, cl, decl, 100)
	runCaughtUp(t, topo, cl, dir)
	app, err := topology.Open(ctx, topo, cl, dir)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		if v, _, err := n.Get(ctx, fmt.Sprintf("k%d", k)); err != nil || v != 20 {
			t.Errorf("k%d = %d (%v) after the write-ahead logs were deleted, want 20", k, v, err)
		}
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}

	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		if e.Name() != "strand-store.id" {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err = topology.Open(ctx, topo, cl, dir)
	t.Logf("Open: %v", err)
	if !errors.Is(err, topology.ErrStoreDamaged) || !strings.Contains(err.Error(), "move it away and start again") {
		t.Fatalf("Open of a store whose files are gone = %v, want ErrStoreDamaged saying what to do", err)
	}
}
