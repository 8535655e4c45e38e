package pipeline

import (
	"github.com/strand-io/strand/internal/outbox"

	"cmp"
	"github.com/strand-io/strand/internal/executor"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
)

// Processor is the production runtime of one source of a Program: it drives
// one Task per source partition over a Source (an Iggy topic through
// connectors/iggy), and publishes dead letters to a Sink.
//
// # Data flow (docs/design.md §3)
//
// Each partition has its own pipeline of three goroutines. A reader polls the
// partition from the Task's checkpoint (read from the store at Run, never from
// the broker) into a bounded queue; the pipeline hands each polled batch to
// Task.Submit, which plans, executes and starts the commit of it (table
// writes, the checkpoint, parked events and dead letters in one state
// transaction); the commit runs while the next batch executes (that batch
// reads the committing one's writes, and commits only after it; a failed
// commit stops the partition before anything built on it commits). An
// advisor then tells the broker the committed offset (PartitionReader.Advise,
// for monitoring only; at most every 200ms per partition, and once more at
// shutdown). The reader polls the next batch while the pipeline executes
// and commits the current one; a batch counts against WithPrefetch until its
// commit is done, so the reader never holds more than prefetch+1 uncommitted
// batches and memory stays bounded (by about (prefetch+1) × poll size
// records per partition) however far the processor lags: that is the
// backpressure. Parked keys are retried on their schedule (Task.NextRetry)
// when no batch is flowing, and ahead of every batch.
//
// One more goroutine publishes dead letters (see WithDeadLetterSink).
//
// # Guarantees
//
// Tables get exactly-once: after any crash or restart every table equals the
// fold of exactly the events up to the committed checkpoints (docs/design.md §2).
// A batch is committed whole or not at all; Run never leaves half a batch
// applied.
//
// Dead letters are written by the Task as rows of the same commit as the
// batch that refused them (an outbox), so a crash never loses one. After the
// commit the processor publishes them to the sink (the rows of one source
// partition in offset order, up to 512 per Send), each with a message ID
// derived from source, partition and offset (deadletter.Letter.ID), and then
// deletes their rows in a later commit. Before a Send it makes the store's
// write-ahead log durable (state.DB.SyncWAL), so that with NoSync
// durability too no dead letter becomes visible for a batch that a crash
// could still undo. A crash between publishing and deleting leaves rows
// that may already be
// published: on restart (and after any failed Send, which may have sent a
// prefix), before sending such rows again the processor asks the sink which
// IDs it already holds, if the sink implements connector.SentChecker, and sends only
// the others. So with a connector.SentChecker sink every dead letter is published
// exactly once (as far as the checker sees: connectors/iggy's Sink looks at
// the end of the destination partition); with a plain Sink, at least once,
// a repeat always carrying the same message ID. A sink that is down does not
// stop processing: dead letters wait in the store, durably, and are retried
// with backoff.
//
// # Shutdown and failures
//
// When Run's context is done, each pipeline finishes and commits the batch
// it is executing (within WithDrainTimeout; past it the batch is abandoned
// atomically), polled batches not yet started are dropped (they are read
// again from the checkpoint next time), pending dead letters get one last
// publication attempt, readers are closed, every goroutine has returned, and
// Run returns nil.
//
// If a pipeline fails for good (the store cannot commit, the source reports a
// permanent error, a hook returns an error), Run stops the other pipelines
// the same graceful way and returns a *PartitionError naming the source,
// partition and offset. Transient source failures never reach Run: the
// PartitionReader retries them. Handler failures never stop Run either: the
// Task parks or dead-letters them (docs/design.md §8).
//
// # Concurrency
//
// Run may be called again after it returned (it resumes from the committed
// checkpoints) but not concurrently. Stats and Release are safe to call from
// any goroutine, also while Run is running. Several Processors (one per
// source of a Program) may share one database.
type Processor struct {
	prog   *executor.Program
	db     *state.DB
	src    connector.Source
	name   string
	opts   processorOptions
	log    *slog.Logger
	checks connector.SentChecker // opts.sink as a connector.SentChecker, or nil

	running atomic.Bool

	mu    sync.Mutex
	stats map[uint32]*stream.PartitionStats // by partition; guarded by mu
	live  map[uint32]*pipeline              // pipelines of the current Run; guarded by mu
	// outboxBase[pt] is the outbox rows of pt found when Run started,
	// less the counted ones then; guarded by mu.
	outboxBase map[uint32]int64
}

// ProcessorOption configures NewProcessor.
type ProcessorOption func(*processorOptions)

type processorOptions struct {
	tables       func(table string) bool // WithStoreTables (global.go), or nil: all
	writers      *Writers
	sink         connector.Sink
	pollSize     int
	prefetch     int
	partitions   []uint32
	log          *slog.Logger
	taskOpts     []executor.TaskOption
	clock        Clock
	hooks        Hooks
	drainTimeout time.Duration
	dlqBackoff   [2]time.Duration
	outboxSinks  map[string]connector.Sink
	outboxGrace  time.Duration
	observe      observeOptions // see observe.go
	extent       extentOptions  // see extent.go
	// gate, when set, is called before an outbox sends rows of a
	// partition that it read from the store: it returns once their
	// commits may be published (scale-out: once they are confirmed in the
	// partition's changelog), or an error (ErrFenced: never).
	gate func(ctx context.Context, partition uint32) error
	// check, when set, is called right before an outbox sends rows of a
	// partition: an error (ErrFenced) stops the outbox instead.
	check func(partition uint32) error
	// sendDeadline, when set, bounds an outbox's send after check
	// (WithPublishDeadline).
	sendDeadline func(partition uint32) (time.Time, bool, error)
	// builds: the tables built in the background (build.go), or nil.
	builds *executor.Evolution
}

// WithBuilds makes the processor build, beside its pipelines, the tables
// of its source that ev (Program.AttachEvolving) builds in the
// background; nil builds none.
func WithBuilds(ev *executor.Evolution) ProcessorOption {
	return func(o *processorOptions) { o.builds = ev }
}

// DefaultPollSize is the most records one poll asks for, unless
// WithWriters makes the processor take its partitions' writer turns from
// w, which the processors of every other source that writes the same
// tables share (see Writers). Without it the processor's pipelines assume
// they are their partitions' only writers.
func WithWriters(w *Writers) ProcessorOption {
	return func(o *processorOptions) { o.writers = w }
}

// WithPollSize says otherwise.
const DefaultPollSize = 4096

// WithDeadLetterSink makes the processor publish dead letters to s (for
// example an Iggy "<topic>.dlq" topic through connectors/iggy.NewSink). If s
// also implements connector.SentChecker, publication is exactly-once across crashes;
// otherwise at-least-once. Without a sink dead letters stay in the store as
// rows (see Processor.PendingDeadLetters) and are counted, never dropped.
func WithDeadLetterSink(s connector.Sink) ProcessorOption {
	return func(o *processorOptions) { o.sink = s }
}

// DefaultOutboxGrace is how long a restarted processor waits, once, before
// it looks again for the rows of the run before it that a SentChecker did
// not find: a send of a killed process can still be in a socket buffer on
// its way to the broker when its successor first looks.
const DefaultOutboxGrace = 500 * time.Millisecond

// WithOutboxGrace sets the wait of DefaultOutboxGrace (0: none, for sinks
// that have no sends in flight across a restart, such as in-memory ones).
func WithOutboxGrace(d time.Duration) ProcessorOption {
	return func(o *processorOptions) { o.outboxGrace = max(d, 0) }
}

// WithOutboxSinks gives the processor the sinks of the topics its
// source's To and KeyBy steps publish to, by topic name (Program.Outputs).
// NewProcessor refuses a processor whose source publishes to a topic
// without a sink. Sinks that also implement connector.SentChecker get
// exactly-once publication across crashes; others at-least-once.
func WithOutboxSinks(sinks map[string]connector.Sink) ProcessorOption {
	return func(o *processorOptions) { o.outboxSinks = sinks }
}

// WithPublishGate makes every outbox of the processor call gate before it
// sends rows of a partition, after it read them: the rows are sent only
// once gate returned nil. An error wrapping ErrFenced stops the processor;
// other errors are retried like a failed send. check, if not nil, is
// called at the last moment before the send (after the hooks): an error
// stops the processor without sending (scale-out: the owner's lease).
func WithPublishGate(gate func(ctx context.Context, partition uint32) error, check func(partition uint32) error) ProcessorOption {
	return func(o *processorOptions) { o.gate, o.check = gate, check }
}

// WithPublishDeadline makes every outbox of the processor ask deadline,
// after the check of WithPublishGate, until when the rows of a partition
// may reach their topic (scale-out: the end of the owner's lease), and
// send them under connector.WithSendDeadline: a sink that honours it
// fails what it did not write by then instead of writing it later (an
// owner paused with messages queued in its sink). An error wrapping
// ErrFenced stops the processor without sending, as check's does.
func WithPublishDeadline(deadline func(partition uint32) (time.Time, bool, error)) ProcessorOption {
	return func(o *processorOptions) { o.sendDeadline = deadline }
}

// WithPollSize sets the most records one poll of a partition returns
// (default DefaultPollSize). Bigger polls make bigger batches: fewer commits
// and more reduction per key, at the cost of latency and memory.
func WithPollSize(n int) ProcessorOption {
	return func(o *processorOptions) { o.pollSize = n }
}

// WithPrefetch sets how many polled batches a partition's reader may hold
// ahead of the batch being processed (default 1: the next poll overlaps the
// current execution, and the next batch's execution overlaps the current
// commit). 0 polls only after the previous batch committed, so nothing
// overlaps. Memory per partition is bounded by about (n+1) × poll size
// records.
func WithPrefetch(n int) ProcessorOption {
	return func(o *processorOptions) { o.prefetch = n }
}

// WithPartitions restricts the processor to the given partitions of the
// source (default: all of them, 0..Partitions-1). Run refuses a partition
// the source does not have.
func WithPartitions(ps ...uint32) ProcessorOption {
	return func(o *processorOptions) { o.partitions = slices.Clone(ps) }
}

// WithProcessorLogger sets the processor's logger (default slog.Default()).
// Tasks log to it too unless WithTaskOptions sets their own.
func WithProcessorLogger(l *slog.Logger) ProcessorOption {
	return func(o *processorOptions) { o.log = l }
}

// WithTaskOptions adds options for every partition's Task (OnDeadLetter,
// WithLogger, WithClock).
func WithTaskOptions(opts ...executor.TaskOption) ProcessorOption {
	return func(o *processorOptions) { o.taskOpts = append(o.taskOpts, opts...) }
}

// Clock is the time a processor runs on: stream.Clock, the wall clock by
// default, a test's clock in the broker-free driver.
type Clock = stream.Clock

// WithProcessorClock runs the processor's retry backoff on c instead of the wall
// clock.
func WithProcessorClock(c Clock) ProcessorOption {
	return func(o *processorOptions) { o.clock = c }
}

// WithHooks installs test and measurement hooks (see Hooks).
func WithHooks(h Hooks) ProcessorOption {
	return func(o *processorOptions) { o.hooks = h }
}

// WithDrainTimeout bounds how long Run, once its context is done, waits for
// in-flight batches to commit and for the last publication of pending dead
// letters (default 30s). A batch still executing then is abandoned as a
// whole: nothing of it is committed.
func WithDrainTimeout(d time.Duration) ProcessorOption {
	return func(o *processorOptions) { o.drainTimeout = d }
}

// WithDeadLetterBackoff sets the bounds of the backoff between failed
// attempts to publish dead letters (default 100ms doubling up to 10s).
func WithDeadLetterBackoff(minWait, maxWait time.Duration) ProcessorOption {
	return func(o *processorOptions) { o.dlqBackoff = [2]time.Duration{minWait, maxWait} }
}

// Hooks are called at the points of a pipeline where tests kill the process
// (crash tests) or take measurements. Every hook is optional. Hooks of
// different partitions run concurrently, on the goroutines named below; a
// hook must not call Run.
//
// A hook that returns an error stops the work it was called from at once,
// as a crash would there (nothing more of that step happens: no commit, no
// send, no delete), and Run then stops as after any pipeline failure and
// returns a *PartitionError wrapping the hook's error.
type Hooks struct {
	// AfterPoll is called on a partition's reader goroutine with every
	// polled batch, before it is queued for the pipeline.
	AfterPoll func(partition uint32, records []connector.Record) error
	// BeforeProcess is called on the pipeline goroutine before Task.Process
	// (records is the batch) or Task.Retry (records is nil).
	BeforeProcess func(partition uint32, records []connector.Record) error
	// AfterCommit is called on the pipeline goroutine after Task.Process or
	// Task.Retry committed, with its result (res.Next is the new
	// checkpoint), before the offset is advised and dead letters are
	// published.
	AfterCommit func(partition uint32, res executor.Result) error
	// BeforeDeadLetterSend is called on the dead-letter goroutine with the
	// dead letters of one source partition about to be sent (those a
	// SentChecker found already published are not in it), after their
	// commit is durable.
	BeforeDeadLetterSend func(partition uint32, letters []deadletter.Letter) error
	// AfterDeadLetterSend is called after the sink accepted them, before
	// their rows are deleted.
	AfterDeadLetterSend func(partition uint32, letters []deadletter.Letter) error
	// AfterDeadLetterDelete is called after the rows of published dead
	// letters were deleted (committed); letters includes those a
	// SentChecker found already published.
	AfterDeadLetterDelete func(partition uint32, letters []deadletter.Letter) error
	// BeforeOutboxSend is called on the outbox goroutine with the outbox
	// messages of one source partition about to be sent, after their
	// commit is durable; AfterOutboxSend after the sinks accepted them,
	// before their rows are deleted.
	BeforeOutboxSend, AfterOutboxSend func(partition uint32, msgs []connector.Message) error
}

// ErrRunning is returned by Run when the processor is already running.
var ErrRunning = errors.New("strand: processor already running")

// ErrNotRunning is returned by Release when Run is not running or does not
// own the partition.
var ErrNotRunning = errors.New("strand: processor not running")

// PartitionError is stream.PartitionError: the engine reports failed
// partitions with the vocabulary's type, so users can errors.As it.
type PartitionError = stream.PartitionError

// addCounters adds o to c.
func addCounters(c *stream.Counters, o stream.Counters) {
	c.Polled += o.Polled
	c.Records += o.Records
	c.Applied += o.Applied
	c.Skipped += o.Skipped
	c.DeadLettered += o.DeadLettered
	c.Published += o.Published
	c.PublishErrors += o.PublishErrors
	c.Failures += o.Failures
	c.Batches += o.Batches
	c.Retries += o.Retries
	c.Resequenced += o.Resequenced
	c.Duplicates += o.Duplicates
	c.Readmitted += o.Readmitted
	c.Gaps += o.Gaps
	c.OutboxCommitted += o.OutboxCommitted
	c.OutboxPublished += o.OutboxPublished
	c.OutboxErrors += o.OutboxErrors
	c.Redelivered += o.Redelivered
	c.Expired += o.Expired
	c.TimersFired += o.TimersFired
	c.TimerFailures += o.TimerFailures
	c.LateEvents += o.LateEvents
	c.WindowsClosed += o.WindowsClosed
}

// NewProcessor returns a processor of src for prog on db. It attaches the
// program's tables to db and checks the program's fingerprint against the
// one stored there (an error wrapping state.ErrIncompatibleTopology refuses
// a store written by another topology), and refuses a source whose name the
// program does not know or invalid options. It does no I/O on src: Run does.
func NewProcessor(prog *executor.Program, db *state.DB, src connector.Source, opts ...ProcessorOption) (*Processor, error) {
	if prog == nil || db == nil || src == nil {
		return nil, errors.New("strand: NewProcessor: nil program, database or source")
	}
	o := processorOptions{
		pollSize:     DefaultPollSize,
		prefetch:     1,
		drainTimeout: 30 * time.Second,
		dlqBackoff:   [2]time.Duration{100 * time.Millisecond, 10 * time.Second},
		outboxGrace:  DefaultOutboxGrace,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	name := src.Name()
	if !prog.HasSource(name) {
		return nil, fmt.Errorf("strand: NewProcessor: topology %q has no source %q (it has %q)", prog.Name(), name, prog.Sources())
	}
	switch {
	case o.pollSize < 1:
		return nil, fmt.Errorf("strand: NewProcessor: source %q: poll size %d, want at least 1", name, o.pollSize)
	case o.prefetch < 0:
		return nil, fmt.Errorf("strand: NewProcessor: source %q: prefetch %d, want at least 0", name, o.prefetch)
	case o.drainTimeout <= 0:
		return nil, fmt.Errorf("strand: NewProcessor: source %q: drain timeout %v, want more than 0", name, o.drainTimeout)
	case o.dlqBackoff[0] <= 0 || o.dlqBackoff[1] < o.dlqBackoff[0]:
		return nil, fmt.Errorf("strand: NewProcessor: source %q: dead-letter backoff %v..%v, want 0 < min <= max", name, o.dlqBackoff[0], o.dlqBackoff[1])
	}
	for _, dest := range prog.Outputs(name) {
		if o.outboxSinks[dest] == nil {
			return nil, fmt.Errorf("strand: NewProcessor: source %q publishes to %q (To or KeyBy), but WithOutboxSinks has no sink for it", name, dest)
		}
	}
	seen := map[uint32]bool{}
	for _, pt := range o.partitions {
		if seen[pt] {
			return nil, fmt.Errorf("strand: NewProcessor: source %q: partition %d given twice", name, pt)
		}
		seen[pt] = true
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	switch {
	case o.builds == nil:
		if err := prog.AttachSome(db, o.tables); err != nil { // global.go
			return nil, strerr.Errorf("strand: NewProcessor: source %q: %w", name, err)
		}
	case !o.builds.Of(prog, db): // attached by AttachEvolving (build.go)
		return nil, fmt.Errorf("strand: NewProcessor: source %q: WithBuilds of another program or store", name)
	}
	p := &Processor{
		prog: prog, db: db, src: src, name: name, opts: o,
		log:        o.log.With(slog.String("component", "strand/processor"), slog.String("source", name)),
		stats:      map[uint32]*stream.PartitionStats{},
		live:       map[uint32]*pipeline{},
		outboxBase: map[uint32]int64{},
	}
	if c, ok := o.sink.(connector.SentChecker); ok {
		p.checks = c
	}
	return p, nil
}

// Source returns the name of the processor's source.
func (p *Processor) Source() string { return p.name }

// Stats returns a snapshot of the processor's progress per partition and
// in total. It is cheap and safe to call at any time.
func (p *Processor) Stats() stream.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := stream.Stats{Source: p.name}
	for pt, ps := range p.stats {
		cp := *ps
		// What waits: the rows found at Run plus those committed since,
		// less those published since (published rows may be counted
		// before the commit that wrote them is).
		cp.OutboxPending = int(max(p.outboxBase[pt]+int64(ps.OutboxCommitted)-int64(ps.OutboxPublished), 0))
		s.Partitions = append(s.Partitions, cp)
		addCounters(&s.Total, ps.Counters)
		s.ParkedKeys += ps.ParkedKeys
		s.ParkedRecords += ps.ParkedRecords
	}
	slices.SortFunc(s.Partitions, func(a, b stream.PartitionStats) int { return cmp.Compare(a.Partition, b.Partition) })
	for _, bp := range p.opts.builds.Progress() { // build.go
		if bp.Source == p.name {
			s.Builds = append(s.Builds, bp)
		}
	}
	return s
}

// update applies fn to one partition's stats under the lock.
func (p *Processor) update(partition uint32, fn func(ps *stream.PartitionStats)) {
	p.mu.Lock()
	ps, ok := p.stats[partition]
	if !ok {
		ps = &stream.PartitionStats{Partition: partition}
		p.stats[partition] = ps
	}
	fn(ps)
	p.mu.Unlock()
}

// Unblock makes a parked key of a partition due now and clears its
// attempts (Task.Unblock): how a key blocked behind a poison event
// (BlockPoisonedKey) goes on. It is executed by the partition's pipeline
// between two batches and committed before Unblock returns. It returns an
// error wrapping ErrNotRunning when Run is not running that partition.
func (p *Processor) Unblock(ctx context.Context, partition uint32, key []byte) error {
	p.mu.Lock()
	pl := p.live[partition]
	p.mu.Unlock()
	if pl == nil {
		return strerr.Errorf("strand: unblock key %q of source %q partition %d: %w", key, p.name, partition, ErrNotRunning)
	}
	req := unblockReq{key: key, done: make(chan error, 1)}
	select {
	case pl.unblock <- req:
	case <-pl.stopped:
		return strerr.Errorf("strand: unblock key %q of source %q partition %d: %w", key, p.name, partition, ErrNotRunning)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PendingDeadLetters returns the committed dead letters of the processor's
// source whose rows are not yet deleted (not yet published, or published
// and not yet confirmed), ordered by partition and offset. Without a sink
// they accumulate here.
func (p *Processor) PendingDeadLetters(ctx context.Context) ([]deadletter.Letter, error) {
	parts, err := p.pendingPartitions(ctx)
	if err != nil {
		return nil, err
	}
	var out []deadletter.Letter
	for _, pt := range parts {
		letters, err := outbox.PendingDeadLetters(ctx, p.db, p.name, pt)
		if err != nil {
			return nil, err
		}
		out = append(out, letters...)
	}
	return out, nil
}

// pendingPartitions returns the partitions to look at for dead-letter rows
// outside Run: the configured ones, or those seen by stats, or 0..n-1 of the
// source.
func (p *Processor) pendingPartitions(ctx context.Context) ([]uint32, error) {
	if len(p.opts.partitions) > 0 {
		return slices.Sorted(slices.Values(p.opts.partitions)), nil
	}
	n, err := p.src.Partitions(ctx)
	if err != nil {
		return nil, strerr.Errorf("strand: source %q: partitions: %w", p.name, err)
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out, nil
}
