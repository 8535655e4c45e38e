package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
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
// once it is fixed for nine keys, a replay with the App running applies
// each of those once (re-admitted past the re-sequencer, never dropped as
// a duplicate of its old strand-seq) and reports it, and the tenth
// dead-lettered again with its reason; after 12,000 more events a second
// replay sends only the tenth's new dead letter (the ledger in the
// dead-letter topic says the others were sent), and a third nothing: no
// row changes twice.
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

	var broken, k9broken atomic.Bool
	broken.Store(true)
	k9broken.Store(true)
	decl := stream.DeclareFunc(1, func(e sev) string { return e.K }, stream.WithSequence(func(e sev) uint64 { return e.Seq }))
	topo := topology.New("replay")
	src := topology.Source[string](topo, "r/events").Resequence()
	sums := topology.NewTable[string, int64](topo, "sums", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), sums, func(v *int64, e sev) error {
		if e.Amount < 0 && (broken.Load() || e.K == "k9" && k9broken.Load()) {
			return stream.Permanent(errors.New("negative amounts are refused (until fixed)"))
		}
		*v += e.Amount
		return nil
	})
	dir := t.TempDir()
	var stats []stream.Stats
	// startApp opens an App of the topology with live inspection and runs
	// it; the function it returns waits until it has caught up, stops it
	// and returns the sums of the keys k0..k9.
	startApp := func() func() []int64 {
		t.Helper()
		app, err := topology.Open(ctx, topo, cl, dir, topology.WithEndOffsetInterval(10*time.Millisecond), topology.WithLiveInspect(true))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- app.Run(runCtx) }()
		return func() []int64 {
			t.Helper()
			defer app.Close()
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
	}
	runApp := func() []int64 { return startApp()() }
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
	want := func(got []int64, k9 int64, when string) {
		t.Helper()
		for i, v := range got {
			w := int64(-3)
			if i == 9 {
				w = k9
			}
			if v != w {
				t.Fatalf("k%d = %d %s, want %d (stats %+v)", i, v, when, w, stats[0].Total)
			}
		}
	}

	// The fix reaches every key but k9. The replay, with the App running,
	// reports what it did with each event: 9 applied, k9's dead-lettered
	// again, with the reason.
	broken.Store(false)
	finish := startApp()
	out := strand("dlq", "replay", "-topic", "r/events.dlq", "-dir", dir, "-wait", "60s")
	t.Logf("first replay:\n%s", out)
	if !strings.Contains(out, "replayed 10 dead letters") ||
		!strings.Contains(out, "of 10 replayed events, 9 applied, 0 held, 0 parked, 1 dead-lettered again, 0 not processed yet, 0 dropped") ||
		!regexp.MustCompile(`dead-lettered again: the replay of r/events partition 0 offset \d+ \(key k9\).*permanent-failure`).MatchString(out) ||
		!strings.Contains(out, "report from the running App (pid") {
		t.Fatalf("first replay's report:\n%s", out)
	}
	want(finish(), 2, "after the replay")
	if tot := stats[0].Total; tot.Readmitted != 10 || tot.Duplicates != 0 {
		t.Fatalf("readmitted %d, duplicates %d; want 10 and 0", tot.Readmitted, tot.Duplicates)
	}

	// 12,000 other events, then k9 is fixed and a second replay sends k9's
	// new dead letter only: the ledger says the first replay sent the
	// other ten, however far back.
	more := make([]sev, 12_000)
	for i := range more {
		more[i] = sev{"other", uint64(i + 1), 1}
	}
	if err := iggy.PublishBatch(ctx, pub, decl, more); err != nil {
		t.Fatal(err)
	}
	k9broken.Store(false)
	out = strand("dlq", "replay", "-topic", "r/events.dlq", "-dir", dir)
	t.Logf("second replay:\n%s", out)
	if !strings.Contains(out, "replayed 1 dead letters; 10 were already replayed") ||
		!strings.Contains(out, "report from the stopped store") || !strings.Contains(out, "of 1 replayed events, 0 applied, 0 held, 0 parked, 0 dead-lettered again, 1 not processed yet") {
		t.Fatalf("second replay:\n%s", out)
	}
	want(runApp(), -3, "after the second replay")
	if tot := stats[0].Total; tot.Applied < 12_000 || tot.Redelivered != 0 || tot.Readmitted != 1 {
		t.Fatalf("applied %d, redelivered %d, readmitted %d; want the 12,000 other events and k9's replay applied, nothing re-sent", tot.Applied, tot.Redelivered, tot.Readmitted)
	}
	// A third replay sends nothing: no row changes.
	out = strand("dlq", "replay", "-topic", "r/events.dlq")
	if !strings.Contains(out, "replayed 0 dead letters; 11 were already replayed") {
		t.Fatalf("third replay:\n%s", out)
	}
	want(runApp(), -3, "after the third replay")
}
