package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

func TestMain(m *testing.M) { testrun.Verify(m) }

const (
	testUser     = "ops"
	testPassword = "cli-S3cret-never-printed"
)

type ev struct {
	K      string
	Amount int64
}

// fixture is an embedded broker holding a source topic "t/events" whose
// App dead-lettered 20 events (permanent) and 3 records without headers
// (bad-headers) to "t/events.dlq", and the App's stopped state directory.
type fixture struct {
	cl   *iggy.Client
	env  map[string]string
	dir  string
	decl *stream.Event[string, ev]
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := iggytest.NewServer(iggytest.WithCredentials(testUser, testPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials(testUser, testPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	if err := cl.EnsureTopic(ctx, "t", "events", 2); err != nil {
		t.Fatal(err)
	}
	f := &fixture{cl: cl, dir: t.TempDir(), decl: stream.DeclareFunc(1, func(e ev) string { return e.K }),
		env: map[string]string{"STRAND_IGGY_ADDR": srv.Addr(), "STRAND_IGGY_USER": testUser, "STRAND_IGGY_PASSWORD": testPassword}}
	pub, err := iggy.NewPublisher(ctx, cl, "t", "events")
	if err != nil {
		t.Fatal(err)
	}
	var evs []ev
	for i := range 30 {
		amount := int64(1)
		if i%3 != 0 {
			amount = -1 // 20 of them: refused for good
		}
		evs = append(evs, ev{K: fmt.Sprintf("k%02d", i), Amount: amount})
	}
	if err := iggy.PublishBatch(ctx, pub, f.decl, evs); err != nil {
		t.Fatal(err)
	}
	_ = pub.Close(ctx)
	raw, err := iggy.NewSink(ctx, cl, "t", "events")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := raw.Send(ctx, []connector.Message{{Key: []byte(fmt.Sprintf("raw%d", i)), Payload: []byte("no headers")}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = raw.Close(ctx)

	app, err := topology.Open(ctx, cliTopology(f.decl), cl, f.dir)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	return f
}

// strand runs the command line with the fixture's environment; the
// password must appear in neither output.
// cliTopology sums the events' amounts per key; negative amounts are
// refused for good (dead letters).
func cliTopology(decl *stream.Event[string, ev]) *topology.Topology {
	topo := topology.New("cli")
	src := topology.Source[string](topo, "t/events")
	sums := topology.NewTable[string, int64](topo, "sums", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), sums, func(v *int64, e ev) error {
		if e.Amount < 0 {
			return stream.Permanent(errors.New("negative amount"))
		}
		*v += e.Amount
		return nil
	})
	return topo
}

func (f *fixture) strand(t *testing.T, hooks replayHooks, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string { return f.env[k] }
	ctx := context.Background()
	if len(args) >= 2 && args[0] == "dlq" && args[1] == "replay" && (hooks.afterSend != nil || hooks.beforeSend != nil) {
		err := dlqReplay(ctx, args[2:], &out, &errb, getenv, hooks)
		code = 0
		if err != nil {
			fmt.Fprintf(&errb, "strand: %v\n", err)
			code = 1
		}
	} else {
		code = run(ctx, args, &out, &errb, getenv)
	}
	if strings.Contains(out.String()+errb.String(), testPassword) {
		t.Fatalf("strand %q printed the password:\n%s\n%s", args, out.String(), errb.String())
	}
	return out.String(), errb.String(), code
}

// destination returns the replayed messages in the source topic (those
// after the 33 original records), by message id.
func (f *fixture) destination(t *testing.T) map[[16]byte]int {
	t.Helper()
	ids := map[[16]byte]int{}
	for p := range uint32(2) {
		msgs, err := f.cl.Tail(context.Background(), "t", "events", p, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			ids[m.ID]++
		}
	}
	return ids
}

func TestDLQListFiltersAndReplayIsExactlyOnceAcrossAnInterruption(t *testing.T) {
	f := newFixture(t)
	out, errOut, code := f.strand(t, replayHooks{}, "dlq", "list", "-topic", "t/events.dlq")
	if code != 0 || !strings.Contains(out, "23 dead letters") {
		t.Fatalf("dlq list: %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("strand dlq list:\n%s", out)
	if !strings.Contains(out, "permanent") || !strings.Contains(out, "bad-headers") || !strings.Contains(out, "negative amount") {
		t.Fatalf("dlq list lacks reasons or errors:\n%s", out)
	}
	out, _, _ = f.strand(t, replayHooks{}, "dlq", "list", "-topic", "t/events.dlq", "-reason", "permanent-failure")
	if !strings.Contains(out, "20 dead letters") {
		t.Fatalf("dlq list -reason permanent:\n%s", out)
	}
	out, _, _ = f.strand(t, replayHooks{}, "dlq", "list", "-topic", "t/events.dlq", "-key", "k01")
	if !strings.Contains(out, "1 dead letters") || !strings.Contains(out, "k01") {
		t.Fatalf("dlq list -key k01:\n%s", out)
	}
	// k01 is in partition xxh32("k01")%2 at some offset: an offset range
	// over both partitions' first 5 records.
	out, _, _ = f.strand(t, replayHooks{}, "dlq", "list", "-topic", "t/events.dlq", "-reason", "permanent-failure", "-from", "0", "-to", "4")
	if n := countLines(out, regexp.MustCompile(`permanent-failure`)); n == 0 || n >= 20 {
		t.Fatalf("dlq list -from 0 -to 4 shows %d dead letters:\n%s", n, out)
	}

	before := len(f.destination(t))
	if before != 33 {
		t.Fatalf("source topic holds %d messages, want 33", before)
	}
	// A dry run sends nothing.
	out, _, code = f.strand(t, replayHooks{}, "dlq", "replay", "-topic", "t/events.dlq", "-dry-run")
	if code != 0 || !strings.Contains(out, "would replay 20 dead letters") || !strings.Contains(out, "3 skipped") {
		t.Fatalf("dry run: %d\n%s", code, out)
	}
	if n := len(f.destination(t)); n != before {
		t.Fatalf("dry run sent %d messages", n-before)
	}
	// Interrupted after its first batch of 8...
	interrupted := errors.New("interrupted")
	_, errOut, code = f.strand(t, replayHooks{afterSend: func(int) error { return interrupted }},
		"dlq", "replay", "-topic", "t/events.dlq", "-batch", "8")
	if code == 0 || !strings.Contains(errOut, "interrupted") {
		t.Fatalf("interrupted replay: %d %s", code, errOut)
	}
	if n := len(f.destination(t)) - before; n != 8 {
		t.Fatalf("interrupted replay sent %d messages, want 8", n)
	}
	// ...and run again: it sends the other 12 only.
	out, errOut, code = f.strand(t, replayHooks{}, "dlq", "replay", "-topic", "t/events.dlq", "-batch", "8")
	if code != 0 || !strings.Contains(out, "replayed 12 dead letters; 8 were already replayed; 3 skipped") {
		t.Fatalf("resumed replay: %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("strand dlq replay (resumed):\n%s", out)
	ids := f.destination(t)
	if len(ids) != before+20 {
		t.Fatalf("source topic holds %d distinct messages, want %d", len(ids), before+20)
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("message %x is in the source topic %d times", id, n)
		}
	}
	// A third run finds everything replayed.
	out, _, _ = f.strand(t, replayHooks{}, "dlq", "replay", "-topic", "t/events.dlq")
	if !strings.Contains(out, "replayed 0 dead letters; 20 were already replayed") {
		t.Fatalf("third replay:\n%s", out)
	}
	// The replayed messages carry the original strand headers and payload:
	// a Source reads them as the original events.
	src, err := iggy.NewSource(f.cl, "t", "events")
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for p := range uint32(2) {
		rd, err := src.Open(context.Background(), p, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		recs, err := rd.Poll(ctx, 1000)
		cancel()
		_ = rd.Close()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, r := range recs {
			if r.HeaderErr != nil {
				continue
			}
			e, err := f.decl.Decode(r.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Headers.Key) != e.K {
				t.Fatalf("record key %q, event key %q", r.Headers.Key, e.K)
			}
			if seen[e.K]++; seen[e.K] == 2 {
				replayed++
				if e.Amount != -1 {
					t.Fatalf("replayed %+v, only negative events were dead-lettered", e)
				}
			}
		}
	}
	if replayed != 20 {
		t.Fatalf("%d events appear twice (original and replay), want 20", replayed)
	}

	// lag: the App's checkpoints against the source's end: 20 replayed
	// records are not processed yet.
	out, errOut, code = f.strand(t, replayHooks{}, "lag", "-dir", f.dir)
	if code != 0 || !strings.Contains(out, "total lag 20 records") {
		t.Fatalf("lag: %d\n%s\n%s", code, out, errOut)
	}
	// inspect: the store's tables and checkpoints.
	t.Logf("strand lag:\n%s", out)
	out, errOut, code = f.strand(t, replayHooks{}, "inspect", f.dir)
	t.Logf("strand inspect:\n%s", out)
	if code != 0 || !regexp.MustCompile(`sums\s+10`).MatchString(out) || !strings.Contains(out, "t/events") || !strings.Contains(out, "pending dead letters: 0") {
		t.Fatalf("inspect: %d\n%s\n%s", code, out, errOut)
	}
}

// lag names a partition whose log ends before the state's checkpoint (the
// topic was deleted and created again) and fails, instead of reporting a
// lag of 0.
func TestLagNamesACheckpointBeyondTheEnd(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.cl.DeleteStream(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := f.cl.EnsureTopic(ctx, "t", "events", 2); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := f.strand(t, replayHooks{}, "lag", "-dir", f.dir)
	t.Logf("strand lag:\n%s%s", out, errOut)
	if code != 1 || !regexp.MustCompile(`source "t/events" partition \d: the checkpoint \d+ is beyond the log's end 0`).MatchString(out) ||
		!strings.Contains(errOut, "move the state directory away") {
		t.Fatalf("lag over a recreated topic: exit %d\n%s\n%s", code, out, errOut)
	}
}

// inspect works on a store an App has open with live inspection (it reads
// the App's copy, and the output says so) with the figures of the stopped
// store; without live inspection it names the App; and it names the App
// that left a store without closing it.
func TestInspectLiveStore(t *testing.T) {
	f := newFixture(t)
	offline, errOut, code := f.strand(t, replayHooks{}, "inspect", f.dir)
	if code != 0 || strings.Contains(offline, "live") {
		t.Fatalf("inspect of the stopped store: %d\n%s\n%s", code, offline, errOut)
	}
	// Without live inspection (the default) the command names the App.
	app, err := topology.Open(context.Background(), cliTopology(f.decl), f.cl, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code = f.strand(t, replayHooks{}, "inspect", f.dir)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(errOut, "WithLiveInspect(true)") {
		t.Fatalf("inspect of a store open without live inspection: %d\n%s", code, errOut)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	app, err = topology.Open(context.Background(), cliTopology(f.decl), f.cl, f.dir, topology.WithLiveInspect(true))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	live, errOut, code := f.strand(t, replayHooks{}, "inspect", f.dir)
	t.Logf("strand inspect of an open store:\n%s", live)
	lines := strings.Split(live, "\n")
	if code != 0 || len(lines) < 3 || !strings.HasPrefix(lines[2], fmt.Sprintf("  live: the store is open in a running App (pid %d,", os.Getpid())) {
		t.Fatalf("inspect of the open store: %d\n%s\n%s", code, live, errOut)
	}
	if without := strings.Join(slices.Delete(lines, 2, 3), "\n"); without != offline {
		t.Fatalf("the live report differs from the offline one:\n%s\nvs\n%s", without, offline)
	}
	out, errOut, code := f.strand(t, replayHooks{}, "lag", "-dir", f.dir)
	if code != 0 || !strings.Contains(out, "total lag 0 records") {
		t.Fatalf("lag of the open store: %d\n%s\n%s", code, out, errOut)
	}

	// A record left behind, as by an App killed while it had the store
	// open.
	rec, err := os.ReadFile(filepath.Join(f.dir, "strand-live.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "strand-live.json"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = f.strand(t, replayHooks{}, "inspect", f.dir)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("the App that had it open last (pid %d,", os.Getpid())) || !strings.Contains(out, "crashed or was killed") {
		t.Fatalf("inspect of a store left open: %d\n%s\n%s", code, out, errOut)
	}
}

func countLines(s string, re *regexp.Regexp) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

// Usage errors exit 2 with a message naming the problem; a wrong password
// fails without printing it.
func TestUsageAndErrors(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no command"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"dlq"}, 2, "want a subcommand"},
		{[]string{"dlq", "list"}, 2, "-topic is required"},
		{[]string{"dlq", "list", "-topic", "nostream"}, 2, "want STREAM/TOPIC"},
		{[]string{"dlq", "replay", "-topic", "a/b", "-batch", "0"}, 2, "-batch 0"},
		{[]string{"dlq", "list", "-topic", "a/b", "-reason", "permanent"}, 2, `unknown dead-letter reason "permanent": want one of bad-headers, unknown-type,`},
		{[]string{"dlq", "list", "-topic", "a/b", "-from", "5", "-to", "1"}, 2, "-from 5 is after -to 1"},
		{[]string{"lag"}, 2, "-dir is required"},
		{[]string{"inspect"}, 2, "want one state directory"},
		{[]string{"inspect", "/nonexistent/strand"}, 1, "no state directory at /nonexistent/strand: give the dir the App was opened with"},
		{[]string{"help"}, 0, ""},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb, getenv)
		if code != c.code || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), "one process at a time") {
			t.Errorf("strand %q = %d, %q; want %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
	srv, err := iggytest.NewServer(iggytest.WithCredentials(testUser, testPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out, errb bytes.Buffer
	env := map[string]string{"STRAND_IGGY_ADDR": srv.Addr(), "STRAND_IGGY_USER": testUser}
	code := run(context.Background(), []string{"dlq", "list", "-topic", "a/b", "-password", "wrong-Pa55word"}, &out, &errb, func(k string) string { return env[k] })
	if code != 1 || strings.Contains(out.String()+errb.String(), "wrong-Pa55word") || !strings.Contains(errb.String(), srv.Addr()) {
		t.Fatalf("wrong password: %d %q %q", code, out.String(), errb.String())
	}
}
