package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/strand-io/strand/stream/topology"
)

// telemetry is the example's OpenTelemetry setup: metrics exported in
// Prometheus format at /metrics, and with -trace the spans (the
// producer's publish spans and strand's process spans, linked) printed to
// stdout. The SDK and the exporters are the example's dependencies; the
// library itself links only the OpenTelemetry API.
type telemetry struct {
	mp      *sdkmetric.MeterProvider
	tp      trace.TracerProvider
	sdkTP   *sdktrace.TracerProvider // nil without -trace
	metrics http.Handler
}

func newTelemetry(traceTo io.Writer, tracing bool) (*telemetry, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t := &telemetry{
		mp:      sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		tp:      noop.NewTracerProvider(),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}
	if tracing {
		sexp, err := stdouttrace.New(stdouttrace.WithWriter(traceTo))
		if err != nil {
			return nil, fmt.Errorf("stdout trace exporter: %w", err)
		}
		t.sdkTP = sdktrace.NewTracerProvider(sdktrace.WithBatcher(sexp))
		t.tp = t.sdkTP
	}
	return t, nil
}

// options are the App's telemetry options.
func (t *telemetry) options() []topology.OpenOption {
	return []topology.OpenOption{
		topology.WithMeterProvider(t.mp), topology.WithTracerProvider(t.tp),
		topology.WithPropagator(propagation.TraceContext{}),
	}
}

// shutdown flushes the spans and stops the providers.
func (t *telemetry) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if t.sdkTP != nil {
		_ = t.sdkTP.Shutdown(ctx)
	}
	_ = t.mp.Shutdown(ctx)
}
