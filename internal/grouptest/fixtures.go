package grouptest

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// The counter: events of one type, summed per key.

// Ev is the test event: key K, a sequence number N and an amount.
type Ev struct {
	K      string
	N      int
	Amount int64
}

// EvKey is Ev's key.
func EvKey(e Ev) string { return e.K }

// Broker starts an embedded Iggy broker and connects to it; both are
// closed when the test ends.
func Broker(t testing.TB) *iggy.Client {
	t.Helper()
	_, cl := BrokerServer(t)
	return cl
}

// BrokerServer is Broker with the broker's server, for tests that use its
// controls (holding polls, dropping connections).
func BrokerServer(t testing.TB) (*iggytest.Server, *iggy.Client) {
	t.Helper()
	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cl, err := iggy.Connect(context.Background(), srv.Addr(), iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return srv, cl
}

// Counter returns the topology name, which sums the Amount of every Ev of
// its source s/log per key in its table n, that table, and Ev's
// declaration (type tag 1).
func Counter(name string) (*topology.Topology, *topology.Table[string, int64], *stream.Event[string, Ev]) {
	decl := stream.DeclareFunc(1, EvKey)
	topo := topology.New(name)
	src := topology.Source[string](topo, "s/log")
	n := topology.NewTable[string, int64](topo, "n", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), n, func(v *int64, e Ev) error { *v += e.Amount; return nil })
	return topo, n, decl
}

// Global tables: payments converted with the rates of a global table.

// RateSet sets a currency's rate.
type RateSet struct {
	Currency string `json:"currency"`
	Rate     int64  `json:"rate"`
}

// Payment is a payment of Amount in Currency on Account.
type Payment struct {
	Account  string `json:"account"`
	Currency string `json:"currency"`
	Amount   int64  `json:"amount"`
}

// CrashReady is the line a crash test's child prints when the parent may
// start its kill timer (crashtest.Spec.Ready).
const CrashReady = "strand-crash-child: piped"

// Sums returns, for the metric name, the sum of its data points by the
// value of attribute key ("" sums every point).
func Sums(t *testing.T, rm metricdata.ResourceMetrics, name string, key attribute.Key) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			found = true
			label := func(s attribute.Set) string {
				if key == "" {
					return ""
				}
				v, _ := s.Value(key)
				return v.Emit()
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[label(p.Attributes)] += float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[label(p.Attributes)] += float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[label(p.Attributes)] += float64(p.Count)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out[label(p.Attributes)] += float64(p.Count)
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", name, m.Data)
			}
		}
	}
	if !found {
		t.Fatalf("no metric %s", name)
	}
	return out
}

// Deletes and timers.

// TPEv is the time property test's event: Op as stream/topology's tEv's
// (0 add N, 1 delete, 2 add N and schedule a timer, 3 cancel the timer),
// At the absolute time of a timer it schedules (always after the clock of
// its step).
type TPEv struct {
	K  string
	Op int
	N  int64
	At time.Time
}

// TPEvents declares TPEv.
var TPEvents = stream.DeclareFunc(1, func(e TPEv) string { return e.K })

// TVal is the time tests' row: the sum of the Ns, the events applied and
// the timers fired.
type TVal struct {
	Sum    int64
	Events int64
	Fired  int64
}

// TBase is topologytest's clock at start.
var TBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Windows.

// WEv is the window tests' event: N at event time At (seconds from WBase).
type WEv struct {
	K   string
	At  int64
	N   int64
	Seq int
}

// WFinal is a window's final result as EmitFinal publishes it.
type WFinal struct {
	K          string
	Start, End int64 // seconds from WBase
	Sum, Count int64
}

// WAgg is a window's aggregate: the sum of its events' Ns and their count.
type WAgg struct{ Sum, Count int64 }

// WEvents declares WEv, wFinals WFinal; WBase is the time the events'
// At count from.
var (
	WEvents = stream.DeclareFunc(1, func(e WEv) string { return e.K })
	wFinals = stream.DeclareFunc(2, func(f WFinal) string { return f.K })
	WBase   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// WTime is an event's event time.
func WTime(e WEv) time.Time { return WBase.Add(time.Duration(e.At) * time.Second) }

// WSec is t in seconds from WBase.
func WSec(t time.Time) int64 { return int64(t.Sub(WBase) / time.Second) }

// WFold adds an event to its window's aggregate.
func WFold(a *WAgg, e WEv) error {
	a.Sum += e.N
	a.Count++
	return nil
}

// WTopology aggregates w/events into the window table sums (windows and
// opts) and emits each window's final result to w/finals.
func WTopology(windows topology.Windows, opts ...topology.WindowOption) (*topology.Topology, *topology.WindowTable[string, WAgg]) {
	topo := topology.New("win")
	src := topology.Source[string](topo, "w/events")
	wt := topology.NewWindowTable[string, WAgg](topo, "sums", windows, stream.JSON[WAgg](), opts...)
	topology.Aggregate(topology.On(src, WEvents), wt, topology.EventTimeOf(WTime), WFold)
	topology.EmitFinal(wt, "w/finals", wFinals, func(k string, w topology.Window, a WAgg) WFinal {
		return WFinal{K: k, Start: WSec(w.Start), End: WSec(w.End), Sum: a.Sum, Count: a.Count}
	})
	return topo, wt
}

// The set-up the windows' tests over Iggy share (TestGroupCarriesWindows,
// stream/topology's TestWindowFinalsOnceAcrossKills): an embedded broker
// with the topics w/events and w/finals, a publisher of w/events, the
// reference windows of a log, and the check that w/finals holds each
// window's final result exactly once with the reference's value.

// WindowBroker starts an embedded Iggy broker, creates w/events and
// w/finals with parts partitions and returns its address (for child
// processes), a client and a publisher of w/events; all three are closed
// when the test ends.
func WindowBroker(t *testing.T, parts uint32) (string, *iggy.Client, *iggy.Publisher) {
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

// PublishWindows publishes evs to w/events and flushes them.
func PublishWindows(t *testing.T, pub *iggy.Publisher, evs []WEv) {
	t.Helper()
	ctx := context.Background()
	if err := iggy.PublishBatch(ctx, pub, WEvents, evs); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// WindowReference folds the events of log below time before (seconds from
// WBase) into 30-second tumbling windows: each key's windows by start, and
// how many windows there are.
func WindowReference(log []WEv, before int64) (map[string]map[int64]WAgg, int) {
	want := map[string]map[int64]WAgg{}
	n := 0
	for _, e := range log {
		if e.At >= before {
			continue
		}
		if want[e.K] == nil {
			want[e.K] = map[int64]WAgg{}
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
func readFinals(t *testing.T, cl *iggy.Client, parts uint32, limit int) []WFinal {
	t.Helper()
	var out []WFinal
	for p := range parts {
		ms, err := cl.Read(context.Background(), "w", "finals", p, 0, limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			var f WFinal
			if err := json.Unmarshal(m.Payload, &f); err != nil {
				t.Fatalf("final result %q: %v", m.Payload, err)
			}
			out = append(out, f)
		}
	}
	return out
}

// CheckFinalsOnce checks that w/finals holds the final result of every
// window of want exactly once, with want's value, and nothing else.
func CheckFinalsOnce(t *testing.T, cl *iggy.Client, parts uint32, want map[string]map[int64]WAgg, nWindows int) {
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
