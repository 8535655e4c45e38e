package topology_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/proptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/state"
	"github.com/strand-io/strand/stream/topology"
)

// Held records are not lag, but they are not done either: with a gap open
// every checkpoint is at the end (lag 0) while WaitCaughtUp keeps waiting,
// the stats and the inspection of the stopped store count the held records
// and keys; once the missing number arrives WaitCaughtUp returns and
// nothing waits (issue 27, item 3).
func TestWaitCaughtUpAndInspectCountHeldRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 1); err != nil {
		t.Fatal(err)
	}
	pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(ctx)
	if err := iggy.PublishBatch(ctx, pub, proptest.SPlain, plains("a", 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	topo := topology.New("held")
	src := topology.Source[string](topo, "s/log").Resequence()
	table := topology.NewTable[string, proptest.PState](topo, "state", stream.JSON[proptest.PState]())
	topology.Project(topology.On(src, proptest.SPlain), table, func(s *proptest.PState, e proptest.SEv) error { proptest.FoldPlain(s, proptest.SevPEv(e)); return nil })
	dir := t.TempDir()
	open := func() *topology.App {
		app, err := topology.Open(ctx, topo, cl, dir, topology.WithEndOffsetInterval(10*time.Millisecond), topology.WithDeadLetterTopic("s/log.dlq"))
		if err != nil {
			t.Fatal(err)
		}
		return app
	}
	app := open()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	// Wait until all three are read and held.
	for {
		st := app.Stats()[0]
		if len(st.Partitions) == 1 && st.Partitions[0].HeldRecords == 3 && st.Lag() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never held: %+v", app.Stats())
		case <-time.After(5 * time.Millisecond):
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = app.WaitCaughtUp(wctx)
	wcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitCaughtUp with 3 held records = %v, want the deadline", err)
	}
	if w := app.Stats()[0].Waiting(); w != 3 {
		t.Fatalf("Stats.Waiting = %d, want 3", w)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	in := summarize(t, dir)
	if len(in.Held) != 1 || in.Held[0].Keys != 1 || in.Held[0].Records != 3 || in.Held[0].Oldest.IsZero() {
		t.Fatalf("inspection held %+v, want 1 key with 3 records", in.Held)
	}
	if h, p, d, o := in.Waiting(); h != 3 || p != 0 || d != 0 || o != 0 {
		t.Fatalf("inspection waiting %d held %d parked %d dead letters %d outbox, want 3 0 0 0", h, p, d, o)
	}
	// Record by record: key a waits for number 1 and holds 2, 3 and 4.
	st, err := state.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	held, err := st.Held(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || string(held[0].Key) != "a" || held[0].Next != 1 || len(held[0].Records) != 3 ||
		held[0].Records[0].Headers.Seq != 2 || held[0].Records[2].Headers.Seq != 4 {
		t.Fatalf("held keys %+v, want a waiting for 1 with 2, 3, 4", held)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	app = open()
	defer app.Close()
	runCtx, stop = context.WithCancel(ctx)
	go func() { done <- app.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := iggy.Publish(ctx, pub, proptest.SPlain, plains("a", 1)[0]); err != nil {
		t.Fatal(err)
	}
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if w := app.Stats()[0].Waiting(); w != 0 {
		t.Fatalf("waiting %d after the gap closed", w)
	}
	if got, want := stateOf(t, table, "a"), chainOf(1, 2, 3, 4); got != want {
		t.Fatalf("table %+v, want %+v", got, want)
	}
}

// Outbox messages that cannot be published yet are waiting too: Stats count
// them, WaitCaughtUp waits for them, and the inspection of the stopped
// store lists them per partition (issue 27, item 3).
func TestInspectCountsPendingOutboxMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	topo, _, decl := grouptest.Counter("outbox")
	src := topology.Source[string](topo, "s/log")
	echo := stream.DeclareFunc(2, grouptest.EvKey)
	topology.To(topology.On(src, decl), "echo", "s/echo", echo, func(_ context.Context, k string, e grouptest.Ev, emit func(grouptest.Ev)) error {
		emit(e)
		return nil
	})
	pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(ctx)
	for i := range 5 {
		if err := iggy.Publish(ctx, pub, decl, grouptest.Ev{K: fmt.Sprintf("k%d", i), Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	conn := &gatedConnector{Connector: cl, open: make(chan struct{})}
	dir := t.TempDir()
	app, err := topology.Open(ctx, topo, conn, dir, topology.WithEndOffsetInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	for app.Stats()[0].Lag() != 0 || app.Stats()[0].Waiting() != 5 {
		select {
		case <-ctx.Done():
			t.Fatalf("never waiting for 5 outbox messages: %+v", app.Stats())
		case <-time.After(5 * time.Millisecond):
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = app.WaitCaughtUp(wctx)
	wcancel()
	if err == nil {
		t.Fatal("WaitCaughtUp returned with 5 outbox messages unpublished")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	in := summarize(t, dir)
	n := 0
	for _, o := range in.Outbox {
		if o.Source != "s/log" {
			t.Fatalf("outbox of %q", o.Source)
		}
		n += o.Messages
	}
	if _, _, _, o := in.Waiting(); n != 5 || o != 5 {
		t.Fatalf("inspection: %d outbox messages (%+v), Waiting %d; want 5", n, in.Outbox, o)
	}
	// Message by message: the 5 echoes to s/echo, keyed k0..k4.
	st, err := state.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	msgs, err := st.Outbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, m := range msgs {
		if m.Topic != "s/echo" || m.Source != "s/log" {
			t.Fatalf("outbox message %+v, want one of s/log to s/echo", m)
		}
		keys[string(m.Message.Key)] = true
	}
	if len(msgs) != 5 || len(keys) != 5 {
		t.Fatalf("outbox messages %+v, want 5 of 5 keys", msgs)
	}
}

// summarize reads the summary of the stopped store in dir.
func summarize(t *testing.T, dir string) *state.Summary {
	t.Helper()
	st, err := state.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in, err := st.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return in
}
