package topology_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/state"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

var (
	resetEv     = stream.DeclareFunc(1, grouptest.EvKey)
	resetNotice = stream.DeclareFunc(7, grouptest.EvKey)
	resetPoison = stream.DeclareFunc(99, grouptest.EvKey) // no handler: dead-lettered
)

type resetTables struct {
	n, buckets, counts *topology.Table[string, int64]
}

// calls counts the ForEach calls per event.
type calls struct {
	mu sync.Mutex
	n  map[int]int
}

func (c *calls) count(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[n]
}

// resetTopology: a sum per key, a To publishing a notice per event, a
// KeyBy into buckets; withCounts adds a table (a change Open refuses).
func resetTopology(withCounts bool, seen *calls) (*topology.Topology, resetTables) {
	var tabs resetTables
	topo := topology.New("reset")
	src := topology.Source[string](topo, "s/log")
	on := topology.On(src, resetEv)
	on.ForEach("calls", func(_ context.Context, _ string, es []grouptest.Ev) error {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		for _, e := range es {
			seen.n[e.N]++
		}
		return nil
	})
	tabs.n = topology.NewTable[string, int64](topo, "n", stream.JSON[int64]())
	topology.Project(on, tabs.n, func(v *int64, e grouptest.Ev) error { *v += e.Amount; return nil })
	topology.To(on, "notices", "s/notices", resetNotice, func(_ context.Context, _ string, e grouptest.Ev, emit func(grouptest.Ev)) error {
		emit(e)
		return nil
	})
	byBucket := topology.KeyBy(on, "by-bucket", func(e grouptest.Ev) (string, error) { return fmt.Sprintf("b%d", e.N%3), nil })
	tabs.buckets = topology.NewTable[string, int64](topo, "buckets", stream.JSON[int64]())
	topology.Project(byBucket, tabs.buckets, func(v *int64, e grouptest.Ev) error { *v += e.Amount; return nil })
	if withCounts {
		tabs.counts = topology.NewTable[string, int64](topo, "counts", stream.JSON[int64]())
		topology.Project(on, tabs.counts, func(v *int64, e grouptest.Ev) error { *v++; return nil })
	}
	return topo, tabs
}

// publishRange publishes events N = from..to-1 (key k(N%10), amount N) and
// one poison record.
func publishRange(t *testing.T, cl *iggy.Client, from, to int) {
	t.Helper()
	ctx := context.Background()
	pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(ctx)
	for i := from; i < to; i++ {
		if err := iggy.Publish(ctx, pub, resetEv, grouptest.Ev{K: fmt.Sprintf("k%d", i%10), N: i, Amount: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := iggy.Publish(ctx, pub, resetPoison, grouptest.Ev{K: "poison", N: -from}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// messagesOf returns every message of stream/topic (all partitions).
func messagesOf(t *testing.T, cl *iggy.Client, topic string) []iggy.StoredMessage {
	t.Helper()
	ctx := context.Background()
	ends, err := cl.EndOffsets(ctx, "s", topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []iggy.StoredMessage
	for p, end := range ends {
		if end == 0 {
			continue
		}
		ms, err := cl.Tail(ctx, "s", topic, uint32(p), int(end)+1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ms...)
	}
	return out
}

// checkOnce: the notices hold each event 0..n-1 exactly once, the
// repartition topic n messages, the dead-letter topic one per poison.
func checkOnce(t *testing.T, cl *iggy.Client, n, poisons int) {
	t.Helper()
	seen := map[int]int{}
	for _, m := range messagesOf(t, cl, "notices") {
		var e grouptest.Ev
		if err := json.Unmarshal(m.Payload, &e); err != nil {
			t.Fatalf("notice %q: %v", m.Payload, err)
		}
		seen[e.N]++
	}
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("event %d: %d notices, want 1", i, seen[i])
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct notices, want %d", len(seen), n)
	}
	if got := len(messagesOf(t, cl, "reset-by-bucket-repartition")); got != n {
		t.Errorf("repartition topic: %d messages, want %d", got, n)
	}
	if got := len(messagesOf(t, cl, "log.dlq")); got != poisons {
		t.Errorf("dead-letter topic: %d messages, want %d", got, poisons)
	}
}

// checkTables: every table is the fold of events 0..n-1.
func checkTables(t *testing.T, app *topology.App, tabs resetTables, n int) {
	t.Helper()
	ctx := context.Background()
	wantN, wantB, wantC := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for i := range n {
		wantN[fmt.Sprintf("k%d", i%10)] += int64(i)
		wantB[fmt.Sprintf("b%d", i%3)] += int64(i)
		wantC[fmt.Sprintf("k%d", i%10)]++
	}
	check := func(name string, tab *topology.Table[string, int64], want map[string]int64) {
		got := map[string]int64{}
		if err := tab.Scan(ctx, func(k string, v int64) bool { got[k] = v; return true }); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("table %s = %v, want %v", name, got, want)
		}
	}
	check("n", tabs.n, wantN)
	check("buckets", tabs.buckets, wantB)
	if tabs.counts != nil {
		check("counts", tabs.counts, wantC)
	}
}

// runUntilCaughtUp opens topo on dir, waits until it caught up, checks its
// tables with check, and closes it.
func runUntilCaughtUp(t *testing.T, topo *topology.Topology, cl *iggy.Client, dir string, check func(*topology.App)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	app, err := topology.Open(ctx, topo, cl, dir, topology.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if check != nil {
		check(app)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestResetPublishesNothingTwice: a topology with a To, a KeyBy and a dead
// letter runs on the embedded broker; a changed topology is refused with
// the change listed; strand's reset (dry run first; refused while an App
// has the store) and a restart of the changed topology rebuild every
// table, the new one included, from the log, and no To message, KeyBy
// message or dead letter reaches its topic twice.
func TestResetPublishesNothingTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 3); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const first, second = 300, 200
	publishRange(t, cl, 0, first)
	seen := &calls{n: map[int]int{}}
	topo, tabs := resetTopology(false, seen)
	runUntilCaughtUp(t, topo, cl, dir, func(app *topology.App) {
		checkTables(t, app, tabs, first)
		// Refused while the App has the store open, naming it.
		if _, err := topology.Reset(ctx, dir); err == nil || !strings.Contains(err.Error(), "open in another App") {
			t.Errorf("Reset of an open store = %v, want a refusal naming the App", err)
		}
	})
	checkOnce(t, cl, first, 1)

	changed, ctabs := resetTopology(true, seen)
	_, err := topology.Open(ctx, changed, cl, dir, topology.WithLogger(slog.New(slog.DiscardHandler)), topology.WithInPlaceChanges(false))
	var tc *topology.TopologyChangedError
	if !errors.As(err, &tc) || len(tc.Changes) == 0 || tc.Changes[0].Subject != `table "counts"` || tc.Changes[0].Safety != topology.Safe {
		t.Fatalf("Open of the changed topology = %v, want a TopologyChangedError listing the new table", err)
	}

	dry, err := topology.Reset(ctx, dir, topology.WithDryRun())
	if err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || len(dry.Rewinds) < 4 || !strings.Contains(dry.String(), "dry run") || !strings.Contains(dry.String(), `drop    table "n"`) {
		t.Fatalf("dry run:\n%s\n%+v", dry, dry)
	}
	st, err := state.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := st.Sources(ctx)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) == 0 || len(srcs[0].Checkpoints) == 0 {
		t.Fatalf("the dry run changed the store: %+v", srcs)
	}
	rep, err := topology.Reset(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, rw := range rep.Rewinds {
		if rw.Mark != rw.From || rw.From == 0 {
			t.Errorf("rewind %+v", rw)
		}
	}

	// The rebuild alone: the log ends at the marks, so no run straddles
	// one and no ForEach is called again.
	runUntilCaughtUp(t, changed, cl, dir, func(app *topology.App) {
		checkTables(t, app, ctabs, first)
	})
	checkOnce(t, cl, first, 1)
	for i := range first {
		if n := seen.count(i); n != 1 {
			t.Errorf("event %d: ForEach called %d times, want 1", i, n)
		}
	}

	publishRange(t, cl, first, first+second)
	runUntilCaughtUp(t, changed, cl, dir, func(app *topology.App) {
		checkTables(t, app, ctabs, first+second)
	})
	checkOnce(t, cl, first+second, 2)
	for i := range first + second {
		if seen.count(i) == 0 {
			t.Errorf("event %d: ForEach never called", i)
		}
	}

	// A reset with records published after it and before the restart.
	if _, err := topology.Reset(ctx, dir); err != nil {
		t.Fatal(err)
	}
	publishRange(t, cl, first+second, first+2*second)
	runUntilCaughtUp(t, changed, cl, dir, func(app *topology.App) {
		checkTables(t, app, ctabs, first+2*second)
	})
	checkOnce(t, cl, first+2*second, 3)

	// A second reset right after: nothing published again either.
	if _, err := topology.Reset(ctx, dir); err != nil {
		t.Fatal(err)
	}
	runUntilCaughtUp(t, changed, cl, dir, func(app *topology.App) {
		checkTables(t, app, ctabs, first+2*second)
	})
	checkOnce(t, cl, first+2*second, 3)
}

// TestResetRefusesParkedRecords: records parked behind a failing handler
// were not applied and their outputs are still to come: Reset refuses,
// saying so, and changes nothing; once they are applied it resets.
func TestResetRefusesParkedRecords(t *testing.T) {
	ctx := context.Background()
	var fail atomic.Bool
	fail.Store(true)
	topo := topology.New("parked", topology.WithRetry(100, time.Second, time.Second))
	src := topology.Source[string](topo, "s/log")
	n := topology.NewTable[string, int64](topo, "n", stream.JSON[int64]())
	topology.Project(topology.On(src, resetEv), n, func(v *int64, e grouptest.Ev) error {
		if fail.Load() {
			return errors.New("not yet")
		}
		*v += e.Amount
		return nil
	})
	d := topologytest.NewDriver(t, topo)
	topologytest.Pipe(d, resetEv, grouptest.Ev{K: "a", N: 1, Amount: 1})
	d.Advance()
	if keys, _ := d.Parked(); keys != 1 {
		t.Fatalf("%d keys parked, want 1", keys)
	}
	d.Close()
	_, err := topology.Reset(ctx, d.Dir(), topology.WithDryRun())
	if !errors.Is(err, topology.ErrResetRefused) || !strings.Contains(err.Error(), "1 records are parked") {
		t.Fatalf("dry run with a parked record = %v, want ErrResetRefused", err)
	}
	if _, err := topology.Reset(ctx, d.Dir()); !errors.Is(err, topology.ErrResetRefused) {
		t.Fatalf("Reset with a parked record = %v, want ErrResetRefused", err)
	}
	fail.Store(false)
	d.Restart()
	d.AdvanceClock(2 * time.Second)
	d.Advance()
	if keys, _ := d.Parked(); keys != 0 {
		t.Fatalf("%d keys parked after the retry", keys)
	}
	d.Close()
	if _, err := topology.Reset(ctx, d.Dir()); err != nil {
		t.Fatalf("Reset once the record is applied: %v", err)
	}
	if _, err := topology.Reset(ctx, d.Dir(), topology.WithResetLogger(nil)); err == nil || !strings.Contains(err.Error(), "WithResetLogger") {
		t.Fatalf("a nil logger = %v, want a refusal naming the option", err)
	}
}
