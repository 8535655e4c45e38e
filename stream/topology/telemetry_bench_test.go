package topology_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream/topology"
)

// BenchmarkTelemetryOverhead measures what metrics and tracing cost: the
// same backlog on the embedded broker (events published in producer spans,
// so every record carries a traceparent) is processed by a fresh App with
// telemetry off (the global no-op providers) and on (the OTel SDK: a
// metric reader, every span sampled and batched to a no-op exporter),
// alternating, several rounds; it reports the median events/s of each and
// the median of the per-round ratios. Run it with -benchtime 1x:
//
//	STRAND_TELEMETRY_EVENTS=400000 go test ./stream/topology -run '^$' -bench TelemetryOverhead -benchtime 1x
func BenchmarkTelemetryOverhead(b *testing.B) {
	events := envInt("STRAND_TELEMETRY_EVENTS", 200_000)
	rounds := envInt("STRAND_TELEMETRY_ROUNDS", 5)
	ctx := context.Background()
	cl := grouptest.Broker(b)
	if err := cl.EnsureTopic(ctx, "s", "log", 8); err != nil {
		b.Fatal(err)
	}
	topo, _, decl := grouptest.Counter("bench-telemetry")
	pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
	if err != nil {
		b.Fatal(err)
	}
	ptp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	const perSpan = 1000
	for i := 0; i < events; i += perSpan {
		sctx, span := ptp.Tracer("producer").Start(ctx, "publish")
		evs := make([]grouptest.Ev, 0, perSpan)
		for j := i; j < min(i+perSpan, events); j++ {
			evs = append(evs, grouptest.Ev{K: fmt.Sprintf("k%d", j%1000), N: j, Amount: 1})
		}
		if err := iggy.PublishBatch(sctx, pub, decl, evs); err != nil {
			b.Fatal(err)
		}
		span.End()
	}
	_ = pub.Close(ctx)
	_ = ptp.Shutdown(ctx)

	// runOnce returns events/s, events per CPU-second of the process (the
	// embedded broker included, alike in both), and what the metrics
	// counted as applied.
	runOnce := func(on bool) (float64, float64, int64) {
		var opts []topology.OpenOption
		var reader *sdkmetric.ManualReader
		var tp *sdktrace.TracerProvider
		var mp *sdkmetric.MeterProvider
		if on {
			reader = sdkmetric.NewManualReader()
			mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			opts = append(opts, topology.WithMeterProvider(mp), topology.WithTracerProvider(tp), topology.WithPropagator(propagation.TraceContext{}))
		}
		opts = append(opts, topology.WithDurability(topology.NoSync), topology.WithLogger(slog.New(slog.DiscardHandler)))
		app, err := topology.Open(ctx, topo, cl, b.TempDir(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		start, cpu0 := time.Now(), cpuTime()
		go func() { done <- app.Run(runCtx) }()
		if err := app.WaitCaughtUp(ctx); err != nil {
			b.Fatal(err)
		}
		d, cpu := time.Since(start), cpuTime()-cpu0
		stop()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		var applied int64
		if on {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(ctx, &rm); err != nil {
				b.Fatal(err)
			}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name == "strand.events.applied" {
						for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
							applied += p.Value
						}
					}
				}
			}
			_ = tp.Shutdown(ctx)
			_ = mp.Shutdown(ctx)
		}
		_ = app.Close()
		return float64(events) / d.Seconds(), float64(events) / cpu.Seconds(), applied
	}
	b.ResetTimer()
	for range b.N {
		var offs, ons, ratios, cpuRatios []float64
		for r := range rounds {
			var off, on, offCPU, onCPU float64
			var applied int64
			if r%2 == 0 {
				off, offCPU, _ = runOnce(false)
				on, onCPU, applied = runOnce(true)
			} else {
				on, onCPU, applied = runOnce(true)
				off, offCPU, _ = runOnce(false)
			}
			if applied != int64(events) {
				b.Fatalf("telemetry counted %d applied events, want %d", applied, events)
			}
			offs, ons, ratios = append(offs, off), append(ons, on), append(ratios, on/off)
			cpuRatios = append(cpuRatios, onCPU/offCPU)
			b.Logf("round %d: off %.0f events/s (%.0f per CPU-s), on %.0f events/s (%.0f per CPU-s), on/off %.3f (per CPU-s %.3f)",
				r+1, off, offCPU, on, onCPU, on/off, onCPU/offCPU)
		}
		b.ReportMetric(median(offs), "off-events/s")
		b.ReportMetric(median(ons), "on-events/s")
		b.ReportMetric(median(ratios), "on/off")
		b.ReportMetric(slices.Min(ratios), "on/off-min")
		b.ReportMetric(slices.Max(ratios), "on/off-max")
		b.ReportMetric(median(cpuRatios), "on/off-per-CPU-s")
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
