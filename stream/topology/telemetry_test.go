package topology_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/proptest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// A run on the embedded broker with an SDK installed: the metrics count
// exactly what the run did (events, dead letters by reason, commits), the
// lag reaches 0, and the process spans are linked to the producer's span.
func TestTelemetryCountsWhatTheRunDid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 4); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	decl := stream.DeclareFunc(1, grouptest.EvKey)
	topo := topology.New("telemetry")
	src := topology.Source[string](topo, "s/log")
	n := topology.NewTable[string, int64](topo, "n", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), n, func(v *int64, e grouptest.Ev) error {
		if e.Amount < 0 {
			return stream.Permanent(errors.New("negative amount"))
		}
		*v += e.Amount
		return nil
	})

	// The producer publishes inside a span: every message carries its
	// traceparent.
	pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	pctx, pspan := tp.Tracer("producer").Start(ctx, "publish")
	const events, negative, bad = 1000, 5, 3
	evs := make([]grouptest.Ev, 0, events+negative)
	for i := range events {
		evs = append(evs, grouptest.Ev{K: fmt.Sprintf("k%d", i%37), N: i, Amount: 1})
	}
	for i := range negative {
		evs = append(evs, grouptest.Ev{K: fmt.Sprintf("neg%d", i), N: i, Amount: -1})
	}
	if err := iggy.PublishBatch(pctx, pub, decl, evs); err != nil {
		t.Fatal(err)
	}
	pspan.End()
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := iggy.NewSink(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	for i := range bad { // no strand headers: dead-lettered as bad-headers
		if err := raw.Send(ctx, []connector.Message{{Key: []byte(fmt.Sprintf("bad%d", i)), Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = raw.Close(ctx)

	dir := t.TempDir()
	app, err := topology.Open(ctx, topo, cl, dir, topology.WithPollSize(100),
		topology.WithMeterProvider(mp), topology.WithTracerProvider(tp), topology.WithPropagator(propagation.TraceContext{}),
		topology.WithEndOffsetInterval(20*time.Millisecond), topology.WithDurability(topology.NoSync))
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
	// The end offsets are refreshed on their own schedule: wait for one
	// refresh after catching up so that the lag reads 0 from the source's
	// end, not only from the polls.
	caughtAt := time.Now()
	testrun.WaitFor(t, 30*time.Second, func() error {
		s := app.Stats()[0]
		for _, ps := range s.Partitions {
			if !ps.EndAt.After(caughtAt) {
				return fmt.Errorf("partition %d's end offset not refreshed since %v (at %v)", ps.Partition, caughtAt, ps.EndAt)
			}
		}
		if lag := s.Lag(); lag != 0 {
			t.Fatalf("lag after WaitCaughtUp = %d, want 0", lag)
		}
		return nil
	})
	stats := app.Stats()[0]
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	want := func(name string, key attribute.Key, label string, v float64) {
		t.Helper()
		if got := grouptest.Sums(t, rm, name, key)[label]; got != v {
			t.Errorf("%s{%s=%q} = %v, want %v", name, key, label, got, v)
		}
	}
	total := float64(events + negative + bad)
	want("messaging.client.consumed.messages", "", "", total)
	want("strand.events.applied", "", "", events)
	want("strand.dead_letters", "strand.dead_letter.reason", deadletter.ReasonPermanent.String(), negative)
	want("strand.dead_letters", "strand.dead_letter.reason", deadletter.ReasonBadHeaders.String(), bad)
	want("strand.commits", "strand.commit.kind", "batch", float64(stats.Total.Batches))
	want("messaging.process.duration", "", "", float64(stats.Total.Batches))
	want("strand.batch.size", "", "", float64(stats.Total.Batches))
	want("strand.lag", "", "", 0)
	want("strand.parked.keys", "", "", 0)
	// 1005 decoded events over 42 keys: the Sum algebra is not declared,
	// so nothing is reduced away; every applied run is one handler call.
	want("strand.events.reduced", "", "", 0)
	if got := grouptest.Sums(t, rm, "strand.handler.calls", "")[""]; got < 42 || got > events+negative {
		t.Errorf("strand.handler.calls = %v, want between 42 and %d", got, events+negative)
	}
	if stats.Total.Batches < 4 {
		t.Errorf("only %d batches: the poll size should have split the run", stats.Total.Batches)
	}
	if got := grouptest.Sums(t, rm, "strand.commit.duration", "")[""]; got < 1 {
		t.Errorf("strand.commit.duration has %v points, want some", got)
	}

	// One process span per commit, linked to the producer's span.
	var process, linked int
	for _, s := range spans.GetSpans() {
		if s.Name != "process s/log" {
			continue
		}
		process++
		for _, l := range s.Links {
			if l.SpanContext.TraceID() == pspan.SpanContext().TraceID() && l.SpanContext.SpanID() == pspan.SpanContext().SpanID() {
				linked++
				break
			}
		}
	}
	if want := int(stats.Total.Batches + stats.Total.Retries); process != want {
		t.Errorf("%d process spans, want %d (one per commit)", process, want)
	}
	if linked == 0 {
		t.Errorf("no process span is linked to the producer's span")
	}

	// The store, read once the App is closed: the checkpoints the App
	// reported, the table's rows, nothing parked or pending.
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	in := summarize(t, dir)
	if len(in.Sources) != 1 || in.Sources[0].Name != "s/log" || in.Sources[0].Partitions != 4 {
		t.Fatalf("inspected sources %+v", in.Sources)
	}
	for _, ps := range stats.Partitions {
		if got := in.Sources[0].Checkpoints[ps.Partition]; got != ps.Next {
			t.Errorf("inspected checkpoint of partition %d = %d, the App said %d", ps.Partition, got, ps.Next)
		}
	}
	if len(in.Tables) != 1 || in.Tables[0].Name != "n" || in.Tables[0].Rows != 37 {
		t.Errorf("inspected tables %+v, want n with 37 rows", in.Tables)
	}
	if len(in.Parked) != 0 || len(in.PendingDeadLetters) != 0 || in.Fingerprint == "" {
		t.Errorf("inspected parked %+v, pending %d, fingerprint %q", in.Parked, len(in.PendingDeadLetters), in.Fingerprint)
	}
}

// The telemetry options refuse nil values, naming the option.
func TestTelemetryOptionsRefuseInvalidValues(t *testing.T) {
	ctx := context.Background()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 1); err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]topology.OpenOption{
		"topology.WithMeterProvider":     topology.WithMeterProvider(nil),
		"topology.WithTracerProvider":    topology.WithTracerProvider(nil),
		"topology.WithPropagator":        topology.WithPropagator(nil),
		"topology.WithEndOffsetInterval": topology.WithEndOffsetInterval(0),
	} {
		topo, _, _ := grouptest.Counter("opts")
		_, err := topology.Open(ctx, topo, cl, t.TempDir(), opt)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Open with invalid %s = %v, want an error naming it", name, err)
		}
	}
}

// gatedConnector hands out dead-letter sinks that refuse every Send until
// open is closed.
type gatedConnector struct {
	connector.Connector
	open  chan struct{}
	tried atomic.Int64
}

func (c *gatedConnector) OpenSink(ctx context.Context, topic string, partitions uint32) (connector.Sink, error) {
	s, err := c.Connector.OpenSink(ctx, topic, partitions)
	if err != nil {
		return nil, err
	}
	return gatedSink{s, c}, nil
}

type gatedSink struct {
	connector.Sink
	c *gatedConnector
}

// Close closes the wrapped sink (the App closes its dead-letter sink).
func (s gatedSink) Close(ctx context.Context) error {
	if c, ok := s.Sink.(interface{ Close(context.Context) error }); ok {
		return c.Close(ctx)
	}
	return nil
}

func (s gatedSink) Send(ctx context.Context, msgs []connector.Message) error {
	select {
	case <-s.c.open:
		return s.Sink.Send(ctx, msgs)
	default:
		s.c.tried.Add(1)
		return errors.New("dead-letter topic unavailable")
	}
}

// WaitCaughtUp waits for the dead letters too: with every checkpoint at
// the end but the dead-letter topic refusing them, it does not return;
// once the topic takes them, it does, with nothing pending.
func TestWaitCaughtUpWaitsForPendingDeadLetters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	raw, err := iggy.NewSink(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Send(ctx, []connector.Message{{Key: []byte("x"), Payload: []byte("no headers")}}); err != nil {
		t.Fatal(err)
	}
	_ = raw.Close(ctx)
	topo, _, _ := grouptest.Counter("gated")
	conn := &gatedConnector{Connector: cl, open: make(chan struct{})}
	app, err := topology.Open(ctx, topo, conn, t.TempDir(), topology.WithEndOffsetInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	defer func() { stop(); <-done }()

	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = app.WaitCaughtUp(wctx)
	wcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitCaughtUp with a dead letter stuck = %v, want the deadline", err)
	}
	if lag := app.Stats()[0].Lag(); lag != 0 || conn.tried.Load() == 0 {
		t.Fatalf("lag %d, %d refused sends: the record should be committed and its dead letter tried", lag, conn.tried.Load())
	}
	close(conn.open)
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := app.PendingDeadLetters(ctx); err != nil || len(p) != 0 {
		t.Fatalf("pending after WaitCaughtUp: %d, %v", len(p), err)
	}
}

// The re-sequencer's holds, releases and duplicates are instruments too.
func TestTelemetryCountsTheResequencer(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	topo, _, _ := proptest.ReseqTopology(nil)
	d := topologytest.NewDriver(t, topo, topologytest.WithOpenOptions(topology.WithMeterProvider(mp)))
	topologytest.Pipe(d, proptest.SPlain, plains("a", 3, 5, 2)...)
	d.Advance()
	collect := func() metricdata.ResourceMetrics {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		return rm
	}
	if got := grouptest.Sums(t, collect(), "strand.resequencer.held.records", "")[""]; got != 3 {
		t.Fatalf("held records %v, want 3", got)
	}
	topologytest.Pipe(d, proptest.SPlain, plains("a", 1, 2, 4)...)
	d.Advance()
	rm := collect()
	if got := grouptest.Sums(t, rm, "strand.resequencer.held.records", "")[""]; got != 0 {
		t.Fatalf("held records %v after the release, want 0", got)
	}
	if got := grouptest.Sums(t, rm, "strand.resequencer.released", "")[""]; got != 3 {
		t.Fatalf("released %v, want 3", got)
	}
	if got := grouptest.Sums(t, rm, "strand.resequencer.duplicates", "")[""]; got != 1 {
		t.Fatalf("duplicates %v, want 1", got)
	}
}
