package topology_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

// The set-up the windows' tests over Iggy share (TestGroupCarriesWindows,
// TestWindowFinalsOnceAcrossKills): an embedded broker with the topics
// w/events and w/finals, a publisher of w/events, the reference windows of
// a log, and the check that w/finals holds each window's final result
// exactly once with the reference's value.

// windowBroker starts an embedded Iggy broker, creates w/events and
// w/finals with parts partitions and returns its address (for child
// processes), a client and a publisher of w/events; all three are closed
// when the test ends.
func windowBroker(t *testing.T, parts uint32) (string, *iggy.Client, *iggy.Publisher) {
	t.Helper()
	ctx := context.Background()
	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"), iggy.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	for _, topic := range []string{"events", "finals"} {
		if err := cl.EnsureTopic(ctx, "w", topic, parts); err != nil {
			t.Fatal(err)
		}
	}
	pub, err := iggy.NewPublisher(ctx, cl, "w", "events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(ctx) })
	return srv.Addr(), cl, pub
}

// publishWindows publishes evs to w/events and flushes them.
func publishWindows(t *testing.T, pub *iggy.Publisher, evs []wEv) {
	t.Helper()
	ctx := context.Background()
	if err := iggy.PublishBatch(ctx, pub, wEvents, evs); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// windowReference folds the events of log below time before (seconds from
// wBase) into 30-second tumbling windows: each key's windows by start, and
// how many windows there are.
func windowReference(log []wEv, before int64) (map[string]map[int64]wAgg, int) {
	want := map[string]map[int64]wAgg{}
	n := 0
	for _, e := range log {
		if e.At >= before {
			continue
		}
		if want[e.K] == nil {
			want[e.K] = map[int64]wAgg{}
		}
		s := e.At / 30 * 30
		a, ok := want[e.K][s]
		if !ok {
			n++
		}
		a.Sum += e.N
		a.Count++
		want[e.K][s] = a
	}
	return want, n
}

// readFinals returns the final results w/finals holds (at most limit per
// partition).
func readFinals(t *testing.T, cl *iggy.Client, parts uint32, limit int) []wFinal {
	t.Helper()
	var out []wFinal
	for p := range parts {
		ms, err := cl.Read(context.Background(), "w", "finals", p, 0, limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			var f wFinal
			if err := json.Unmarshal(m.Payload, &f); err != nil {
				t.Fatalf("final result %q: %v", m.Payload, err)
			}
			out = append(out, f)
		}
	}
	return out
}

// checkFinalsOnce checks that w/finals holds the final result of every
// window of want exactly once, with want's value, and nothing else.
func checkFinalsOnce(t *testing.T, cl *iggy.Client, parts uint32, want map[string]map[int64]wAgg, nWindows int) {
	t.Helper()
	got := map[[2]any]int{}
	for _, f := range readFinals(t, cl, parts, 10*nWindows) {
		got[[2]any{f.K, f.Start}]++
		if w, ok := want[f.K][f.Start]; !ok || f.Sum != w.Sum || f.Count != w.Count || f.End != f.Start+30 {
			t.Errorf("final result %+v; want %+v for [%d, %d)", f, w, f.Start, f.Start+30)
		}
	}
	for k, ws := range want {
		for s := range ws {
			if n := got[[2]any{k, s}]; n != 1 {
				t.Errorf("%s window at %ds: final result published %d times, want once", k, s, n)
			}
		}
	}
	if len(got) != nWindows {
		t.Errorf("%d distinct final results, want %d", len(got), nWindows)
	}
}
