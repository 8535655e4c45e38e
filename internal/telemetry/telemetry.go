// Package telemetry turns the measurements of strand's partition pipelines
// into OpenTelemetry metrics and spans (docs/design.md §9). It depends on
// the OpenTelemetry API only: an application that installs no SDK pays
// next to nothing (no-op instruments, non-recording spans).
//
// Metrics follow the messaging semantic conventions (semconv v1.43.0)
// where they exist; strand's own are named strand.*. Spans: one "process
// <source>" consumer span per commit of a partition, linked to the spans
// the events were published in (their traceparent header).
package telemetry

import (
	"context"
	"errors"

	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// ScopeName is the instrumentation scope of strand's meters and tracers.
const ScopeName = "github.com/strand-io/strand"

// System is the messaging.system attribute value.
const System = "iggy"

// MaxLinks bounds the links of one process span (the SDK's default
// LinkCountLimit).
const MaxLinks = 128

// Names of strand's own metrics and attributes (docs/design.md §9).
const (
	MetricEventsApplied  = "strand.events.applied"
	MetricEventsSkipped  = "strand.events.skipped"
	MetricEventsReduced  = "strand.events.reduced"
	MetricHandlerCalls   = "strand.handler.calls"
	MetricDeadLetters    = "strand.dead_letters"
	MetricFailures       = "strand.failures"
	MetricCommits        = "strand.commits"
	MetricCommitDuration = "strand.commit.duration"
	MetricCommitSize     = "strand.commit.size"
	MetricBatchSize      = "strand.batch.size"
	MetricLag            = "strand.lag"
	MetricParkedKeys     = "strand.parked.keys"
	MetricParkedRecords  = "strand.parked.records"
	MetricHeldKeys       = "strand.resequencer.held.keys"
	MetricHeldRecords    = "strand.resequencer.held.records"
	MetricOldestHold     = "strand.resequencer.oldest_hold"
	MetricResequenced    = "strand.resequencer.released"
	MetricDuplicates     = "strand.resequencer.duplicates"
	MetricGaps           = "strand.resequencer.gaps"
	// Standby copies (topology.WithStandbys, docs/design.md §15).
	MetricStandbyLag       = "strand.standby.lag"
	MetricStandbyStaleness = "strand.standby.staleness"

	AttrReason     = attribute.Key("strand.dead_letter.reason")
	AttrCommitKind = attribute.Key("strand.commit.kind")
	AttrEventType  = attribute.Key("strand.event.type")
	AttrOffset     = attribute.Key("iggy.message.offset")
	AttrNext       = attribute.Key("strand.checkpoint")
)

// Config says where telemetry goes. Every field is required (the front
// door fills in the global providers as defaults).
type Config struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// Consumer names the consumer (the topology): the
	// messaging.consumer.group.name attribute.
	Consumer string
}

// Telemetry holds the instruments of one App.
type Telemetry struct {
	cfg    Config
	tracer trace.Tracer
	meter  metric.Meter

	process  messagingconv.ProcessDuration
	consumed messagingconv.ClientConsumedMessages
	pollDur  messagingconv.ClientOperationDuration

	applied, skipped, dead, failures, commits metric.Int64Counter
	commitDur                                 metric.Float64Histogram
	commitSize, batchSize                     metric.Int64Histogram

	lag, parkedKeys, parkedRecords metric.Int64ObservableGauge
	reduced, calls                 metric.Int64ObservableCounter
	heldKeys, heldRecords          metric.Int64ObservableGauge
	standbyLag                     metric.Int64ObservableGauge
	standbyStaleness               metric.Float64ObservableGauge
	oldestHold                     metric.Float64ObservableGauge
	resequenced, duplicates, gaps  metric.Int64ObservableCounter

	mu   sync.Mutex
	regs []metric.Registration
	sets map[string]attribute.Set // observable attribute sets, by source/partition or source/type
}

// New makes the instruments of cfg's providers.
func New(cfg Config) (*Telemetry, error) {
	if cfg.MeterProvider == nil || cfg.TracerProvider == nil || cfg.Propagator == nil {
		return nil, errors.New("strand: nil meter provider, tracer provider or propagator")
	}
	t := &Telemetry{cfg: cfg, sets: map[string]attribute.Set{}}
	t.tracer = cfg.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
	t.meter = cfg.MeterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	m := t.meter
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	t.process, err = messagingconv.NewProcessDuration(m)
	add(err)
	t.consumed, err = messagingconv.NewClientConsumedMessages(m)
	add(err)
	t.pollDur, err = messagingconv.NewClientOperationDuration(m)
	add(err)
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		add(err)
		return c
	}
	t.applied = counter(MetricEventsApplied, "{event}", "Records applied by every handler of their type.")
	t.skipped = counter(MetricEventsSkipped, "{event}", "Records of type tags the topology skips.")
	t.dead = counter(MetricDeadLetters, "{event}", "Dead letters committed, by reason.")
	t.failures = counter(MetricFailures, "{run}", "Runs of a key that failed (parked, held or dead-lettered).")
	t.commits = counter(MetricCommits, "{commit}", "Commits of a partition, by kind (batch or retry).")
	t.commitDur, err = m.Float64Histogram(MetricCommitDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of the store commit of a batch (write and, with Sync, fsync)."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1))
	add(err)
	t.commitSize, err = m.Int64Histogram(MetricCommitSize, metric.WithUnit("By"),
		metric.WithDescription("Size of the store batch of a commit."),
		metric.WithExplicitBucketBoundaries(1<<10, 4<<10, 16<<10, 64<<10, 256<<10, 1<<20, 4<<20, 16<<20))
	add(err)
	t.batchSize, err = m.Int64Histogram(MetricBatchSize, metric.WithUnit("{message}"),
		metric.WithDescription("Records in a polled batch."),
		metric.WithExplicitBucketBoundaries(1, 10, 100, 500, 1000, 2000, 4096, 8192, 16384))
	add(err)
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		add(err)
		return g
	}
	t.lag = gauge(MetricLag, "{message}", "Records of a partition not yet committed: source end offset - checkpoint.")
	t.parkedKeys = gauge(MetricParkedKeys, "{key}", "Keys of a partition waiting for a retry or a release.")
	t.parkedRecords = gauge(MetricParkedRecords, "{event}", "Records held by parked keys.")
	t.reduced, err = m.Int64ObservableCounter(MetricEventsReduced, metric.WithUnit("{event}"),
		metric.WithDescription("Events reduced away: decoded events minus the events their reduction handed to handlers."))
	add(err)
	t.calls, err = m.Int64ObservableCounter(MetricHandlerCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Handler calls: one per projection per run, one per chunk of a Handle handler."))
	add(err)
	t.heldKeys = gauge(MetricHeldKeys, "{key}", "Keys of a partition the re-sequencer holds records of.")
	t.heldRecords = gauge(MetricHeldRecords, "{event}", "Records the re-sequencer holds until their predecessors arrive.")
	t.oldestHold, err = m.Float64ObservableGauge(MetricOldestHold, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest record the re-sequencer holds in a partition (0 when none)."))
	add(err)
	obsCounter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		add(err)
		return c
	}
	t.resequenced = obsCounter(MetricResequenced, "{event}", "Records the re-sequencer held and later released (or dead-lettered behind a gap).")
	t.duplicates = obsCounter(MetricDuplicates, "{event}", "Records the re-sequencer found already applied or held; never applied.")
	t.gaps = obsCounter(MetricGaps, "{gap}", "Gaps the re-sequencer gave up waiting for (skipped or dead-lettered).")
	t.standbyLag = gauge(MetricStandbyLag, "{message}", "Changelog records a standby copy of a partition has not applied yet.")
	t.standbyStaleness, err = m.Float64ObservableGauge(MetricStandbyStaleness, metric.WithUnit("s"),
		metric.WithDescription("How long ago a standby copy of a partition last held every commit of its changelog (absent until it first did)."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, strerr.Errorf("strand: instruments: %w", err)
	}
	return t, nil
}

// Gauges is what the observable instruments read at each collection.
type Gauges struct {
	// Stats returns every source's stats (App.Stats).
	Stats func() []stream.Stats
	// RunCounts returns a source's run totals (Program.RunCounts).
	RunCounts func(source string) []executor.RunCounts
	// Standbys returns the standby copies kept now (may be nil).
	Standbys func() []StandbyGauge
}

// StandbyGauge is one standby copy of a partition (of the topology whose
// first source is Source): its lag in changelog records and its
// staleness (negative: not current yet).
type StandbyGauge struct {
	Source    string
	Partition uint32
	Lag       uint64
	Staleness time.Duration
}

// Observe registers the callback of the observable instruments; Close
// unregisters it.
func (t *Telemetry) Observe(g Gauges) error {
	reg, err := t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range g.Stats() {
			for _, ps := range s.Partitions {
				set := t.partitionSet(s.Source, ps.Partition)
				o.ObserveInt64(t.lag, int64(ps.Lag()), metric.WithAttributeSet(set))
				o.ObserveInt64(t.parkedKeys, int64(ps.ParkedKeys), metric.WithAttributeSet(set))
				o.ObserveInt64(t.parkedRecords, int64(ps.ParkedRecords), metric.WithAttributeSet(set))
				o.ObserveInt64(t.heldKeys, int64(ps.HeldKeys), metric.WithAttributeSet(set))
				o.ObserveInt64(t.heldRecords, int64(ps.HeldRecords), metric.WithAttributeSet(set))
				age := 0.0
				if !ps.OldestHold.IsZero() {
					age = max(time.Since(ps.OldestHold).Seconds(), 0)
				}
				o.ObserveFloat64(t.oldestHold, age, metric.WithAttributeSet(set))
				o.ObserveInt64(t.resequenced, int64(ps.Resequenced), metric.WithAttributeSet(set))
				o.ObserveInt64(t.duplicates, int64(ps.Duplicates), metric.WithAttributeSet(set))
				o.ObserveInt64(t.gaps, int64(ps.Gaps), metric.WithAttributeSet(set))
			}
			for _, rc := range g.RunCounts(s.Source) {
				set := t.typeSet(s.Source, rc)
				o.ObserveInt64(t.reduced, int64(rc.Events-rc.Reduced), metric.WithAttributeSet(set))
				o.ObserveInt64(t.calls, int64(rc.Calls), metric.WithAttributeSet(set))
			}
		}
		if g.Standbys != nil {
			for _, sb := range g.Standbys() {
				set := t.partitionSet(sb.Source, sb.Partition)
				o.ObserveInt64(t.standbyLag, int64(sb.Lag), metric.WithAttributeSet(set))
				if sb.Staleness >= 0 {
					o.ObserveFloat64(t.standbyStaleness, sb.Staleness.Seconds(), metric.WithAttributeSet(set))
				}
			}
		}
		return nil
	}, t.lag, t.parkedKeys, t.parkedRecords, t.reduced, t.calls,
		t.heldKeys, t.heldRecords, t.oldestHold, t.resequenced, t.duplicates, t.gaps, t.standbyLag, t.standbyStaleness)
	if err != nil {
		return strerr.Errorf("strand: register callback: %w", err)
	}
	t.mu.Lock()
	t.regs = append(t.regs, reg)
	t.mu.Unlock()
	return nil
}

// Close unregisters the callbacks of Observe.
func (t *Telemetry) Close() error {
	t.mu.Lock()
	regs := t.regs
	t.regs = nil
	t.mu.Unlock()
	var errs []error
	for _, r := range regs {
		errs = append(errs, r.Unregister())
	}
	return errors.Join(errs...)
}

func (t *Telemetry) partitionSet(source string, partition uint32) attribute.Set {
	k := source + "\x00" + strconv.FormatUint(uint64(partition), 10)
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.sets[k]
	if !ok {
		s = attribute.NewSet(t.base(source, partition)...)
		t.sets[k] = s
	}
	return s
}

func (t *Telemetry) typeSet(source string, rc executor.RunCounts) attribute.Set {
	k := source + "\x01" + rc.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.sets[k]
	if !ok {
		s = attribute.NewSet(semconv.MessagingSystemKey.String(System), semconv.MessagingDestinationName(source),
			semconv.MessagingConsumerGroupName(t.cfg.Consumer), AttrEventType.String(rc.Name))
		t.sets[k] = s
	}
	return s
}

func (t *Telemetry) base(source string, partition uint32) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String(System),
		semconv.MessagingDestinationName(source),
		semconv.MessagingDestinationPartitionID(strconv.FormatUint(uint64(partition), 10)),
		semconv.MessagingConsumerGroupName(t.cfg.Consumer),
	}
}

// Source returns the pipeline.Observer of one source's processor.
func (t *Telemetry) Source(name string) *SourceObserver {
	return &SourceObserver{t: t, source: name, spanName: "process " + name, parts: map[uint32]*partSets{}}
}

// SourceObserver is the pipeline.Observer of one source: it records the
// metrics of polls and commits and makes the process spans.
type SourceObserver struct {
	t        *Telemetry
	source   string
	spanName string

	mu    sync.Mutex
	parts map[uint32]*partSets
}

var _ pipeline.Observer = (*SourceObserver)(nil)

// partSets are the precomputed attribute sets of one partition.
type partSets struct {
	base    []attribute.KeyValue
	process attribute.Set // + operation process
	poll    attribute.Set // + operation poll (receive)
	plain   attribute.Set // base only
	batch   attribute.Set // + commit kind batch
	retry   attribute.Set // + commit kind retry
	reasons map[deadletter.Reason]attribute.Set
	pollErr attribute.Set
}

func (so *SourceObserver) sets(partition uint32) *partSets {
	so.mu.Lock()
	defer so.mu.Unlock()
	ps, ok := so.parts[partition]
	if ok {
		return ps
	}
	base := so.t.base(so.source, partition)
	with := func(kv ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), kv...)...)
	}
	ps = &partSets{
		base:    base,
		process: with(semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess),
		poll:    with(semconv.MessagingOperationName("poll"), semconv.MessagingOperationTypeReceive),
		pollErr: with(semconv.MessagingOperationName("poll"), semconv.MessagingOperationTypeReceive, semconv.ErrorTypeKey.String("_OTHER")),
		plain:   with(),
		batch:   with(AttrCommitKind.String("batch")),
		retry:   with(AttrCommitKind.String("retry")),
		reasons: map[deadletter.Reason]attribute.Set{},
	}
	for r := deadletter.ReasonBadHeaders; r <= deadletter.ReasonKeyMismatch; r++ {
		ps.reasons[r] = with(AttrReason.String(r.String()))
	}
	so.parts[partition] = ps
	return ps
}

// Polled records a poll: its duration and the records it consumed.
func (so *SourceObserver) Polled(partition uint32, records int, start time.Time, err error) {
	ctx := context.Background()
	ps := so.sets(partition)
	d := time.Since(start).Seconds()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return // shutdown, not a failed poll
		}
		so.t.pollDur.RecordSet(ctx, d, ps.pollErr)
		return
	}
	so.t.pollDur.RecordSet(ctx, d, ps.poll)
	if records > 0 {
		so.t.consumed.AddSet(ctx, int64(records), ps.poll)
	}
}

// Committed records a commit's metrics and its process span.
func (so *SourceObserver) Committed(partition uint32, c pipeline.Commit) {
	ctx := context.Background()
	ps := so.sets(partition)
	t := so.t
	res := &c.Result
	kind := ps.batch
	if c.Retry {
		kind = ps.retry
	}
	t.commits.Add(ctx, 1, metric.WithAttributeSet(kind))
	if !c.Retry {
		t.process.RecordSet(ctx, c.End.Sub(c.Start).Seconds(), ps.process)
		t.batchSize.Record(ctx, int64(len(c.Records)), metric.WithAttributeSet(ps.plain))
	}
	if !c.Store.Start.IsZero() && c.Store.Bytes > 0 {
		t.commitDur.Record(ctx, c.Store.Duration().Seconds(), metric.WithAttributeSet(ps.plain))
		t.commitSize.Record(ctx, int64(c.Store.Bytes), metric.WithAttributeSet(ps.plain))
	}
	if n := len(res.Applied); n > 0 {
		t.applied.Add(ctx, int64(n), metric.WithAttributeSet(ps.plain))
	}
	if n := len(res.Skipped); n > 0 {
		t.skipped.Add(ctx, int64(n), metric.WithAttributeSet(ps.plain))
	}
	if n := len(res.Failures); n > 0 {
		t.failures.Add(ctx, int64(n), metric.WithAttributeSet(ps.plain))
	}
	for i := 0; i < len(res.DeadLetters); {
		r := res.DeadLetters[i].Reason
		j := i + 1
		for j < len(res.DeadLetters) && res.DeadLetters[j].Reason == r {
			j++
		}
		set, ok := ps.reasons[r]
		if !ok {
			set = ps.plain
		}
		t.dead.Add(ctx, int64(j-i), metric.WithAttributeSet(set))
		i = j
	}
	so.span(ps, c)
}

// span makes the commit's process span after the fact, from c.Start to
// c.End, linked to the spans its records were published in.
func (so *SourceObserver) span(ps *partSets, c pipeline.Commit) {
	_, span := so.t.tracer.Start(context.Background(), so.spanName,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(c.Start))
	if !span.IsRecording() {
		span.End()
		return
	}
	res := &c.Result
	span.SetAttributes(ps.base...)
	span.SetAttributes(
		semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess,
		AttrNext.Int64(int64(res.Next)), AttrCommitKind.String(commitKind(c.Retry)),
		attribute.Int("strand.applied", len(res.Applied)), attribute.Int("strand.dead_letters", len(res.DeadLetters)),
		attribute.Int("strand.failures", len(res.Failures)),
	)
	if len(c.Records) > 0 {
		span.SetAttributes(semconv.MessagingBatchMessageCount(len(c.Records)), AttrOffset.Int64(int64(c.Records[0].Offset)))
	}
	links := 0
	var prev []byte
	for i := range c.Records {
		tp := c.Records[i].Headers.TraceParent
		if len(tp) == 0 || string(tp) == string(prev) {
			continue
		}
		prev = tp
		sc := trace.SpanContextFromContext(so.t.cfg.Propagator.Extract(context.Background(), traceCarrier(tp)))
		if !sc.IsValid() {
			continue
		}
		span.AddLink(trace.Link{SpanContext: sc})
		if links++; links == MaxLinks {
			break
		}
	}
	span.End(trace.WithTimestamp(c.End))
}

// traceCarrier is a propagation.TextMapCarrier holding one traceparent.
type traceCarrier []byte

func (c traceCarrier) Get(key string) string {
	if key == connector.HeaderTraceParent {
		return string(c)
	}
	return ""
}
func (c traceCarrier) Set(string, string) {}
func (c traceCarrier) Keys() []string     { return []string{connector.HeaderTraceParent} }

func commitKind(retry bool) string {
	if retry {
		return "retry"
	}
	return "batch"
}
