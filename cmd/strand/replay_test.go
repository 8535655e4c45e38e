package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

type sev struct {
	K      string
	Seq    uint64
	Amount int64
}

// The double replay and the replay into a re-sequenced source, end to end
// on the embedded broker (issue 27, items 1 and 2): ten events of a
// re-sequenced source are dead-lettered while their handler is broken;
// once it is fixed, a replay applies each of them once (re-admitted past
// the re-sequencer, never dropped as a duplicate of its old strand-seq);
// after 12,000 more events in the partition (beyond the replay's look-back
// window) a second replay sends them again, and the App applies none of
// them twice: the read model is unchanged.
func TestReplayIntoAResequencedSourceIsAppliedOnceForEver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := iggytest.NewServer(iggytest.WithCredentials(testUser, testPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials(testUser, testPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.EnsureTopic(ctx, "r", "events", 1); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"STRAND_IGGY_ADDR": srv.Addr(), "STRAND_IGGY_USER": testUser, "STRAND_IGGY_PASSWORD": testPassword}
	strand := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, args, &out, &errb, func(k string) string { return env[k] }); code != 0 {
			t.Fatalf("strand %q: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}

	var broken atomic.Bool
	broken.Store(true)
	decl := stream.DeclareFunc(1, func(e sev) string { return e.K }, stream.Sequence(func(e sev) uint64 { return e.Seq }))
	topo := topology.New("replay")
	src := topology.Source[string](topo, "r/events").Resequence()
	sums := topology.NewTable[string, int64](topo, "sums", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), sums, func(v *int64, e sev) error {
		if e.Amount < 0 && broken.Load() {
			return stream.Permanent(errors.New("negative amounts are refused (until fixed)"))
		}
		*v += e.Amount
		return nil
	})
	dir := t.TempDir()
	var stats []stream.Stats
	// runApp runs an App of the topology until it has caught up, then
	// stops it and returns the sums of the keys k0..k9.
	runApp := func() []int64 {
		t.Helper()
		app, err := topology.Open(ctx, topo, cl, dir, topology.WithEndOffsetInterval(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer app.Close()
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- app.Run(runCtx) }()
		if err := app.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		stats = app.Stats()
		var out []int64
		for i := range 10 {
			v, _, err := sums.Get(ctx, fmt.Sprintf("k%d", i))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	pub, err := iggy.NewPublisher(ctx, cl, "r", "events")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(ctx)
	var evs []sev
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		evs = append(evs, sev{k, 1, 1}, sev{k, 2, -5}, sev{k, 3, 1})
	}
	if err := iggy.PublishBatch(ctx, pub, decl, evs); err != nil {
		t.Fatal(err)
	}
	for i, v := range runApp() {
		if v != 2 {
			t.Fatalf("k%d = %d before the replay, want 2 (its -5 dead-lettered)", i, v)
		}
	}

	broken.Store(false)
	out := strand("dlq", "replay", "-topic", "r/events.dlq")
	if !strings.Contains(out, "replayed 10 dead letters") {
		t.Fatalf("first replay:\n%s", out)
	}
	for i, v := range runApp() {
		if v != -3 {
			t.Fatalf("k%d = %d after the replay, want -3: the replayed event was not applied (stats %+v)", i, v, stats[0].Total)
		}
	}
	if tot := stats[0].Total; tot.Readmitted != 10 || tot.Duplicates != 0 {
		t.Fatalf("readmitted %d, duplicates %d; want 10 and 0", tot.Readmitted, tot.Duplicates)
	}

	// 12,000 other events: the first replay's messages are now beyond the
	// look-back of the replay's check, so a second replay sends them again.
	more := make([]sev, 12_000)
	for i := range more {
		more[i] = sev{"other", uint64(i + 1), 1}
	}
	if err := iggy.PublishBatch(ctx, pub, decl, more); err != nil {
		t.Fatal(err)
	}
	out = strand("dlq", "replay", "-topic", "r/events.dlq")
	t.Logf("second replay:\n%s", out)
	for i, v := range runApp() {
		if v != -3 {
			t.Fatalf("k%d = %d after a second replay, want -3: a replayed event was applied twice", i, v)
		}
	}
	if !strings.Contains(out, "replayed 10 dead letters") {
		t.Logf("the second replay found its messages (the look-back reached them): the reader's dedup was not needed")
	}
	if tot := stats[0].Total; tot.Applied < 12_000 || tot.Redelivered != 10 || tot.Readmitted != 10 {
		t.Fatalf("applied %d, redelivered %d, readmitted %d; want the 12,000 other events applied and the 10 re-sent replays dropped", tot.Applied, tot.Redelivered, tot.Readmitted)
	}
}
