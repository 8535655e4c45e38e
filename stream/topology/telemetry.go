package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/internal/telemetry"
	"github.com/strand-io/strand/stream/deadletter"
)

// telemetryOptions are the OpenTelemetry options of Open.
type telemetryOptions struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	prop     propagation.TextMapPropagator
	endEvery time.Duration
}

// WithMeterProvider sets where the App's metrics go (docs/design.md §9);
// the default is the global provider (otel.GetMeterProvider), a no-op
// until the application installs an SDK.
func WithMeterProvider(mp metric.MeterProvider) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if mp == nil {
			return errors.New("strand: topology.WithMeterProvider: nil meter provider")
		}
		o.tel.mp = mp
		return nil
	})
}

// WithTracerProvider sets where the App's spans go: one "process <source>"
// consumer span per commit of a partition, linked to the spans its events
// were published in. The default is the global provider
// (otel.GetTracerProvider), a no-op until the application installs an SDK.
func WithTracerProvider(tp trace.TracerProvider) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if tp == nil {
			return errors.New("strand: topology.WithTracerProvider: nil tracer provider")
		}
		o.tel.tp = tp
		return nil
	})
}

// WithPropagator sets the propagator that reads the publishers' span
// context from a record's traceparent header, for the links of the process
// spans. The default is the global one (otel.GetTextMapPropagator), which
// reads nothing until the application sets one, for example
// propagation.TraceContext{}.
func WithPropagator(p propagation.TextMapPropagator) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if p == nil {
			return errors.New("strand: topology.WithPropagator: nil propagator")
		}
		o.tel.prop = p
		return nil
	})
}

// WithEndOffsetInterval sets how often a running App asks each source for
// its partitions' end offsets, for the lag (stream.PartitionStats.Lag and
// the strand.lag metric); default 1 second. Only sources that implement
// connector.EndOffsetter are asked (connectors/iggy's do, in one round trip);
// for the others the end is what the readers polled up to.
func WithEndOffsetInterval(d time.Duration) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if d <= 0 {
			return fmt.Errorf("strand: topology.WithEndOffsetInterval: %v, want more than 0", d)
		}
		o.tel.endEvery = d
		return nil
	})
}

// startTelemetry makes the App's instruments and returns the processor
// options of a source.
func (a *App) startTelemetry(o *openOptions) error {
	if o.tel.mp == nil {
		o.tel.mp = otel.GetMeterProvider()
	}
	if o.tel.tp == nil {
		o.tel.tp = otel.GetTracerProvider()
	}
	if o.tel.prop == nil {
		o.tel.prop = otel.GetTextMapPropagator()
	}
	tel, err := telemetry.New(telemetry.Config{MeterProvider: o.tel.mp, TracerProvider: o.tel.tp,
		Propagator: o.tel.prop, Consumer: a.prog.Name()})
	if err != nil {
		return err
	}
	a.tel = tel
	a.endEvery = o.tel.endEvery
	return nil
}

func (a *App) telemetryOptions(source string) []pipeline.ProcessorOption {
	opts := []pipeline.ProcessorOption{pipeline.WithObserver(a.tel.Source(source))}
	if a.endEvery > 0 {
		opts = append(opts, pipeline.WithEndOffsetInterval(a.endEvery))
	}
	return opts
}

// observeTelemetry registers the observable instruments (lag, parked keys,
// reduced events, handler calls) once the processors exist.
func (a *App) observeTelemetry() error {
	return a.tel.Observe(telemetry.Gauges{Stats: a.Stats, RunCounts: a.prog.p.RunCounts, Standbys: a.standbyGauges})
}

// WaitCaughtUp returns nil once the App has caught up with its sources as
// they are when it is called: every partition's committed checkpoint has
// reached the partition's end offset as of the call, and no committed dead
// letter or To/KeyBy message is waiting to be published; the repartition
// topics of KeyBy steps, and the topics its To steps publish to that it
// reads itself (a join sent on and read back), count with what the
// topology forwarded to them until then. It needs Run to be running (or to be
// started) to make progress, and sources that report their end offsets
// (connector.EndOffsetter; connectors/iggy's do). It returns ctx's error if
// ctx ends first; a source that fails to report its end offsets (a lost
// connection) is asked again until then.
//
// "Caught up" means nothing waits: records the re-sequencer holds behind an
// open gap, keys parked for a retry or blocked behind a poison event (waiting
// for an Unblock), and outbox messages hold it back, although their records
// are behind the checkpoint (stream.PartitionStats.Waiting). A gap that
// never closes (stream.GapWait) or a key never released keeps it waiting
// until ctx ends.
func (a *App) WaitCaughtUp(ctx context.Context) error {
	type target struct {
		proc *pipeline.Processor
		ends []uint64
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	// endOffsets asks a source for its end offsets, retrying a failure
	// (a lost connection) until ctx is done.
	endOffsets := func(p *pipeline.Processor) ([]uint64, error) {
		for {
			ends, err := p.EndOffsets(ctx)
			if err == nil {
				return ends, nil
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("topology %q: wait caught up: %w (last: %w)", a.prog.Name(), ctx.Err(), err)
			case <-tick.C:
			}
		}
	}
	targets := make([]target, 0, len(a.procs))
	for _, p := range a.procs {
		ends, err := endOffsets(p)
		if err != nil {
			return err
		}
		targets = append(targets, target{p, ends})
	}
	for {
		caught := true
		for _, t := range targets {
			next := map[uint32]uint64{}
			for _, ps := range t.proc.Stats().Partitions {
				next[ps.Partition] = ps.Next
			}
			for pt, end := range t.ends {
				if !a.runsOf(t.proc.Source(), uint32(pt)) || end == 0 {
					continue
				}
				if n, ok := next[uint32(pt)]; !ok || n < end {
					caught = false
				}
			}
		}
		for _, t := range targets {
			if !caught {
				break
			}
			for _, ps := range t.proc.Stats().Partitions {
				if ps.Waiting() > 0 && a.runsOf(t.proc.Source(), ps.Partition) {
					caught = false // held, parked, or To/KeyBy messages still to publish
				}
			}
		}
		if caught {
			pending, err := a.PendingDeadLetters(ctx)
			if err != nil {
				return fmt.Errorf("topology %q: wait caught up: %w", a.prog.Name(), err)
			}
			// What the topology forwarded to itself (KeyBy) up to now is
			// part of what it must have processed: look at the
			// repartition topics' ends again.
			grew := false
			for i, t := range targets {
				if !a.prog.feedsItself(t.proc.Source()) {
					continue
				}
				ends, err := endOffsets(t.proc)
				if err != nil {
					return err
				}
				for pt, end := range ends {
					if pt < len(t.ends) && end > t.ends[pt] || pt >= len(t.ends) {
						grew = true
					}
				}
				targets[i].ends = ends
			}
			pending = slices.DeleteFunc(pending, func(d deadletter.Letter) bool { return !a.runs(d.Partition) })
			if len(pending) == 0 && !grew {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topology %q: wait caught up: %w", a.prog.Name(), ctx.Err())
		case <-tick.C:
		}
	}
}

// runs reports whether the App processes partition pt of its sources.
func (a *App) runs(pt uint32) bool {
	if a.grp != nil {
		return a.Phase(pt) == Serving
	}
	if len(a.partitions) == 0 {
		return true
	}
	for _, p := range a.partitions {
		if p == pt {
			return true
		}
	}
	return false
}
