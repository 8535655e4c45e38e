package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/strand-io/strand/stream/topology"
)

// reset: a dry run changes nothing, a store an App has open is refused
// naming it, and a reset leaves no checkpoint.
func TestReset(t *testing.T) {
	f := newFixture(t)
	out, errOut, code := f.strand(t, replayHooks{}, "reset", "-dir", f.dir, "-dry-run")
	t.Logf("strand reset -dry-run:\n%s%s", out, errOut)
	if code != 0 || !strings.Contains(out, "dry run: nothing is changed") || !strings.Contains(out, `rewind  source "t/events" partition`) {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	before, _, _ := f.strand(t, replayHooks{}, "inspect", f.dir)
	noCheckpoints := regexp.MustCompile(`t/events\s+2\s+none`)
	if !strings.Contains(before, "t/events") || noCheckpoints.MatchString(before) {
		t.Fatalf("the dry run changed the store:\n%s", before)
	}

	app, err := topology.Open(context.Background(), cliTopology(f.decl), f.cl, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	out, errOut, code = f.strand(t, replayHooks{}, "reset", "-dir", f.dir)
	if code != 1 || !strings.Contains(errOut, "open in another App") {
		t.Fatalf("reset of an open store: exit %d\n%s\n%s", code, out, errOut)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}

	out, errOut, code = f.strand(t, replayHooks{}, "reset", "-dir", f.dir)
	t.Logf("strand reset:\n%s%s", out, errOut)
	if code != 0 || !strings.Contains(out, ": done") {
		t.Fatalf("reset: exit %d\n%s\n%s", code, out, errOut)
	}
	after, _, _ := f.strand(t, replayHooks{}, "inspect", f.dir)
	if !noCheckpoints.MatchString(after) || !strings.Contains(after, "t/events partition 0  rebuilding after a reset: at 0 of 16") {
		t.Fatalf("checkpoints left after the reset, or no rebuild shown:\n%s", after)
	}
	// The App rebuilds; once caught up, nothing is shown as rebuilding.
	app, err = topology.Open(context.Background(), cliTopology(f.decl), f.cl, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, st := range app.Stats() {
		for _, ps := range st.Partitions {
			if ps.ReplayMark != 0 {
				t.Errorf("partition %d caught up with replay mark %d in Stats", ps.Partition, ps.ReplayMark)
			}
		}
	}
	cancel()
	<-done
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	rebuilt, _, _ := f.strand(t, replayHooks{}, "inspect", f.dir)
	if strings.Contains(rebuilt, "rebuilding") || !strings.Contains(rebuilt, "0:16 1:17") {
		t.Fatalf("after the rebuild:\n%s", rebuilt)
	}
	if _, errOut, code := f.strand(t, replayHooks{}, "reset"); code != 2 || !strings.Contains(errOut, "-dir is required") {
		t.Fatalf("reset without -dir: exit %d, %s", code, errOut)
	}
}
