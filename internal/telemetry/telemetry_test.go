package telemetry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/internal/telemetry"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/connector"
)

func TestMain(m *testing.M) { testrun.Verify(m) }

// batch returns a commit of n records whose traceparents come from
// distinct producer spans.
func batch(n, distinct int) pipeline.Commit {
	recs := make([]connector.Record, n)
	offs := make([]uint64, n)
	for i := range recs {
		tp := fmt.Sprintf("00-%032x-%016x-01", i%distinct+1, i%distinct+1)
		recs[i] = connector.Record{Offset: uint64(i), Headers: connector.Headers{Key: []byte("k"), TraceParent: []byte(tp)}}
		offs[i] = uint64(i)
	}
	now := time.Now()
	return pipeline.Commit{Start: now.Add(-time.Millisecond), End: now, Records: recs,
		Result: executor.Result{Next: uint64(n), Records: n, Applied: offs}}
}

// BenchmarkCommitted measures the telemetry of one commit of a batch of
// 1000 records: off (no-op providers), and on (SDK metrics, every span
// sampled to a no-op exporter, links from 1 or 100 distinct producer
// spans). Divide by 1000 for the cost per event.
func BenchmarkCommitted(b *testing.B) {
	for _, c := range []struct {
		name     string
		on       bool
		distinct int
	}{{"off", false, 1}, {"on/1-producer-span", true, 1}, {"on/100-producer-spans", true, 100}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := telemetry.Config{MeterProvider: noop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider(),
				Propagator: propagation.TraceContext{}, Consumer: "bench"}
			if c.on {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer mp.Shutdown(context.Background())
				defer tp.Shutdown(context.Background())
				cfg.MeterProvider, cfg.TracerProvider = mp, tp
			}
			tel, err := telemetry.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			obs := tel.Source("s/log")
			cm := batch(1000, c.distinct)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				obs.Polled(0, 1000, cm.Start, nil)
				obs.Committed(0, cm)
			}
		})
	}
}

// The process span links each distinct producer span once, at most
// MaxLinks.
func TestProcessSpanLinks(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.Config{MeterProvider: noop.NewMeterProvider(), TracerProvider: tp,
		Propagator: propagation.TraceContext{}, Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	obs := tel.Source("s/log")
	obs.Committed(3, batch(10, 1))
	obs.Committed(3, batch(1000, 500))
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "process s/log" {
		t.Fatalf("spans %v", spans)
	}
	if n := len(spans[0].Links); n != 1 {
		t.Errorf("10 records of one producer span: %d links, want 1", n)
	}
	if n := len(spans[1].Links); n != telemetry.MaxLinks {
		t.Errorf("500 producer spans: %d links, want %d", n, telemetry.MaxLinks)
	}
}
