package topology

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/live"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/telemetry"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// Errors of the front door. They are the same values the store reports, so
// errors.Is works on every error Open, Run and the tables return.
var (
	// ErrNotOpen is wrapped by Table.Get and Table.Scan before an App of
	// the table's topology is open, and after it was closed.
	ErrNotOpen = errors.New("strand: table not open")
	// ErrIncompatibleTopology is wrapped by Open when the state directory
	// was written by a topology with another fingerprint (see
	// Program.Fingerprint).
	ErrIncompatibleTopology = stream.ErrIncompatibleTopology
	// ErrPartitionsChanged is wrapped by Open when a source's partition
	// count differs from the one its state was written with.
	ErrPartitionsChanged = state.ErrPartitionsChanged
	// ErrClosed is wrapped by the methods of an App after Close.
	ErrClosed = errors.New("strand: app closed")
	// ErrRunning is wrapped by Run when the App is already running.
	ErrRunning = errors.New("strand: app already running")
)

func wrapNotOpen(err error) error {
	if errors.Is(err, state.ErrNotAttached) || errors.Is(err, state.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrNotOpen, err)
	}
	return err
}

// Durability says when a commit returns; see WithDurability. It is
// stream.Durability (one definition for the App and its store).
type Durability = stream.Durability

const (
	// Sync makes a commit return only after it is fsynced (stream.Sync);
	// the default.
	Sync = stream.Sync
	// NoSync makes a commit return once it is in the write-ahead log
	// buffer (stream.NoSync).
	NoSync = stream.NoSync
)

// OpenOption configures Open. An invalid value makes Open fail with an
// error naming the option.
type OpenOption interface {
	apply(*openOptions) error
}

// openOptionFunc adapts a function to OpenOption.
type openOptionFunc func(*openOptions) error

func (f openOptionFunc) apply(c *openOptions) error { return f(c) }

type openOptions struct {
	inPlaceOff bool // WithInPlaceChanges(false) (build.go)
	log        *slog.Logger
	dlq        string
	pollSize   int
	prefetch   int
	partitions []uint32
	durability Durability
	cacheSize  int64
	valueCache int64
	drain      time.Duration
	clock      Clock
	tel        telemetryOptions // see telemetry.go
	liveOn     bool             // see live.go
	group      connector.Group  // see group.go
	queryAddr  string
	snapEvery  *int
	standbys   int            // WithStandbys (standby.go)
	reserve    *int64         // WithDiskReserve (world.go)
	faults     *Faults        // WithFaults (faults.go)
	grace      *time.Duration // WithOutboxGrace (faults.go)
}

// Clock is the time an App's retries run on (stream.Clock). The default
// is the wall clock; package topologytest drives an App on a clock of its
// own.
type Clock = stream.Clock

// WithClock runs the App's retry backoff on c instead of the wall clock
// (tests: see package topologytest).
func WithClock(c Clock) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if c == nil {
			return errors.New("strand: topology.WithClock: nil clock")
		}
		o.clock = c
		return nil
	})
}

// WithLogger sets the logger of everything the App runs (failures of keys,
// dead letters, the store's messages); the default is slog.Default(). Log
// lines never carry payload bytes.
func WithLogger(l *slog.Logger) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if l == nil {
			return errors.New("strand: topology.WithLogger: nil logger")
		}
		o.log = l
		return nil
	})
}

// WithDeadLetterTopic sets the topic dead letters of every source are
// published to (created by the connector if missing); the default is the
// first source's name followed by ".dlq".
func WithDeadLetterTopic(topic string) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if topic == "" {
			return errors.New("strand: topology.WithDeadLetterTopic: empty topic name")
		}
		o.dlq = topic
		return nil
	})
}

// WithPollSize sets the most records one poll of a partition returns
// (default 4096).
func WithPollSize(n int) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if n < 1 {
			return fmt.Errorf("strand: topology.WithPollSize: %d, want at least 1", n)
		}
		o.pollSize = n
		return nil
	})
}

// WithPrefetch sets how many polled batches a partition may read ahead of
// the one being processed (default 1; 0 polls only when idle).
func WithPrefetch(n int) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if n < 0 {
			return fmt.Errorf("strand: topology.WithPrefetch: %d, want 0 or more", n)
		}
		o.prefetch = n
		return nil
	})
}

// WithPartitions makes the App process only the given partitions of every
// source (default: all). Several Apps with disjoint partitions and their
// own state directories can share the work; nothing coordinates them.
func WithPartitions(ps ...uint32) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if len(ps) == 0 {
			return errors.New("strand: topology.WithPartitions: no partition")
		}
		seen := map[uint32]bool{}
		for _, p := range ps {
			if seen[p] {
				return fmt.Errorf("strand: topology.WithPartitions: partition %d given twice", p)
			}
			seen[p] = true
		}
		o.partitions = append([]uint32(nil), ps...)
		return nil
	})
}

// WithDurability sets when a commit returns (default Sync).
func WithDurability(d Durability) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if d != Sync && d != NoSync {
			return fmt.Errorf("strand: topology.WithDurability: unknown durability %d", uint8(d))
		}
		o.durability = d
		return nil
	})
}

// WithCacheSize sets the store's block cache in bytes (default 64 MiB,
// at least 4 MiB).
func WithCacheSize(bytes int64) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if bytes < 4<<20 {
			return fmt.Errorf("strand: topology.WithCacheSize: %d bytes, want at least 4 MiB", bytes)
		}
		o.cacheSize = bytes
		return nil
	})
}

// WithValueCacheSize bounds the cache of decoded table values that saves
// hot keys a read and a decode (default 64 MiB, counting what each entry
// really holds; 0 turns it off).
func WithValueCacheSize(bytes int64) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if bytes < 0 {
			return fmt.Errorf("strand: topology.WithValueCacheSize: %d bytes, want 0 or more", bytes)
		}
		o.valueCache = bytes
		return nil
	})
}

// WithDrainTimeout bounds how long Run, once its context is done, waits for
// the batches in flight to commit and the dead letters to be published
// (default 30 seconds).
func WithDrainTimeout(d time.Duration) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if d <= 0 {
			return fmt.Errorf("strand: topology.WithDrainTimeout: %v, want more than 0", d)
		}
		o.drain = d
		return nil
	})
}

// App runs a built topology: every partition of every source, one state
// directory, one dead-letter topic, one logger. Open one with Open (or
// Program.Open), run it with Run, query its tables while it runs, and
// Close it. Its methods are safe for concurrent use.
type App struct {
	prog *Program
	dir  string
	db   *state.DB
	// gdb is the store of the global tables of an instance of a group,
	// or nil (global_group.go); reportsEnds: the global sources that can
	// report their end offsets.
	gdb         *state.DB
	reportsEnds map[string]bool
	dlq         connector.Sink
	sinks       map[string]connector.Sink // To and KeyBy destinations
	procs       []*pipeline.Processor
	log         *slog.Logger

	tel        *telemetry.Telemetry // see telemetry.go
	endEvery   time.Duration
	partitions []uint32            // WithPartitions, or nil for all
	live       *live.Server        // see live.go
	grp        *group              // WithGroup (group.go), or nil
	evo        *executor.Evolution // tables built in the background (build.go), or nil

	mu      sync.Mutex
	closed  bool
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// Open builds t (see Build) and opens an App of it; see Program.Open.
func Open(ctx context.Context, t *Topology, conn connector.Connector, dir string, opts ...OpenOption) (*App, error) {
	p, err := t.Build()
	if err != nil {
		return nil, err
	}
	return p.Open(ctx, conn, dir, opts...)
}

// Open opens an App of the program over the topics of conn, with its state
// in dir (created if missing; one App at a time may use it). It refuses,
// with an error that says what changed, a state directory written by an
// incompatible topology (ErrIncompatibleTopology) or with another partition
// count of a source (ErrPartitionsChanged), a table fed by sources of
// different partition counts, a missing source topic, and invalid options.
// Open reads each source's partition count from the connector, stores it
// in dir on the first start, and opens the dead-letter topic. It also
// refuses a source that is not the log the state was built from
// (ErrSourceChanged: recreated, or ending before a checkpoint) and a state
// directory whose files are missing or damaged (ErrStoreDamaged); see
// docs/design.md §16.
func (p *Program) Open(ctx context.Context, conn connector.Connector, dir string, opts ...OpenOption) (*App, error) {
	o := openOptions{log: slog.Default(), pollSize: pipeline.DefaultPollSize, prefetch: 1,
		cacheSize: state.DefaultCacheSize, valueCache: state.DefaultValueCacheSize, drain: 30 * time.Second}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	if conn == nil {
		return nil, errors.New("strand: Open: nil connector")
	}
	name := p.Name()
	fail := func(err error) error { return fmt.Errorf("topology %q: open: %w", name, err) }

	// Sources first: nothing is created before the topics are known.
	sources := make([]connector.Source, 0, len(p.Sources()))
	counts := map[string]uint32{}
	sinks := map[string]connector.Sink{} // To and KeyBy destinations
	opened := false
	defer func() {
		if !opened {
			closeSinks(sinks)
		}
	}()
	openSink := func(topic string, partitions uint32) error {
		if sinks[topic] != nil {
			return nil
		}
		sk, err := conn.OpenSink(ctx, topic, partitions)
		if err != nil {
			return fmt.Errorf("output topic %q: %w", topic, err)
		}
		sinks[topic] = sk
		return nil
	}
	for _, sn := range p.Sources() {
		if feeder, ok := p.feeders[sn]; ok {
			// A KeyBy's repartition topic: created (with its feeder's
			// partition count, known since feeders come first) before it
			// is read.
			if err := openSink(sn, counts[feeder]); err != nil {
				return nil, fail(err)
			}
		}
		src, err := p.openSource(ctx, conn, sn) // foreign.go
		if err != nil {
			return nil, fail(fmt.Errorf("source %q: %w", sn, err))
		}
		n, err := src.Partitions(ctx)
		if err != nil {
			return nil, fail(fmt.Errorf("source %q: partition count: %w", sn, err))
		}
		if n == 0 {
			return nil, fail(fmt.Errorf("source %q has no partitions", sn))
		}
		for _, pt := range o.partitions {
			if pt >= n {
				return nil, fail(fmt.Errorf("strand: topology.WithPartitions: source %q has %d partitions, no partition %d", sn, n, pt))
			}
		}
		if feeder, ok := p.feeders[sn]; ok && n != counts[feeder] {
			return nil, fail(fmt.Errorf("repartition topic %q has %d partitions, its source %q %d", sn, n, feeder, counts[feeder]))
		}
		sources = append(sources, src)
		counts[sn] = n
	}
	for _, sn := range p.Sources() {
		for _, topic := range p.p.Outputs(sn) {
			if err := openSink(topic, counts[sn]); err != nil {
				return nil, fail(err)
			}
		}
	}
	for _, tn := range p.tables {
		var n uint32
		for _, sn := range tn.inputs() {
			switch {
			case n == 0:
				n = counts[sn]
			case counts[sn] != n:
				return nil, fail(fmt.Errorf("table %q is fed by sources of %d and %d partitions (%q, readers with Lookup included); a table's keys must be partitioned one way",
					tn.name, n, counts[sn], tn.inputs()))
			}
		}
		tn.partitioner.SetPartitions(n)
	}

	sopts := []state.Option{state.WithDurability(o.durability), state.WithCacheSize(o.cacheSize),
		state.WithValueCacheSize(o.valueCache), state.WithLogger(o.log)}
	if o.reserve != nil {
		sopts = append(sopts, state.WithDiskReserve(*o.reserve))
	}
	db, err := state.Open(dir, sopts...)
	if err != nil {
		return nil, fail(lockHint(dir, err))
	}
	a := &App{prog: p, dir: dir, db: db, log: o.log, partitions: o.partitions, sinks: sinks}
	ok := false
	defer func() {
		if !ok {
			_ = db.Close()
			if a.gdb != nil {
				_ = a.gdb.Close()
			}
			if a.dlq != nil {
				closeSinks(map[string]connector.Sink{"": a.dlq})
			}
		}
	}()
	if o.group != nil && len(p.global) > 0 {
		if err := a.openGlobalStore(dir, sopts); err != nil { // global_group.go
			return nil, fail(err)
		}
	}
	a.noteEnds(sources)
	if err := a.startTelemetry(&o); err != nil {
		return nil, fail(err)
	}
	if err := a.attachEvolving(ctx, &o, counts, sources); err != nil { // build.go
		return nil, fail(err)
	}
	for _, sn := range p.Sources() {
		if err := a.storeOf(sn).EnsureSource(sn, counts[sn]); err != nil {
			return nil, fail(err)
		}
	}
	identities, err := a.checkSources(ctx, sources, counts) // world.go
	if err != nil {
		return nil, fail(err)
	}
	dlqTopic := o.dlq
	if dlqTopic == "" {
		dlqTopic = p.Sources()[0] + ".dlq"
	}
	a.dlq, err = conn.OpenSink(ctx, dlqTopic, counts[p.Sources()[0]])
	if err != nil {
		return nil, fail(fmt.Errorf("dead-letter topic %q: %w", dlqTopic, err))
	}
	if o.group != nil {
		if err := a.openGroup(ctx, conn, &o, counts); err != nil {
			return nil, fail(err)
		}
	} else if o.queryAddr != "" || o.snapEvery != nil || o.standbys > 0 {
		return nil, fail(errors.New("topology.WithQueryAddr, topology.WithSnapshotEvery and topology.WithStandbys need topology.WithGroup"))
	}
	popts := []pipeline.ProcessorOption{
		pipeline.WithDeadLetterSink(a.dlq), pipeline.WithPollSize(o.pollSize), pipeline.WithPrefetch(o.prefetch),
		pipeline.WithProcessorLogger(o.log), pipeline.WithDrainTimeout(o.drain), pipeline.WithOutboxSinks(sinks),
	}
	if o.clock != nil {
		popts = append(popts, pipeline.WithProcessorClock(o.clock))
	}
	writers := p.writerGroups()
	for _, src := range sources {
		base := popts
		if len(o.partitions) > 0 && !p.global[src.Name()] { // every instance reads all of a global source
			base = append(slices.Clip(popts), pipeline.WithPartitions(o.partitions...))
		}
		if a.grp != nil && !p.global[src.Name()] { // a global source's rows are not the group's (global_group.go)
			base = append(slices.Clip(base), pipeline.WithPublishGate(a.grp.gate, a.grp.check), pipeline.WithPublishDeadline(a.grp.sendDeadline))
		}
		sopts := slices.Concat(base, a.telemetryOptions(src.Name()), o.processorFaults(src.Name()),
			[]pipeline.ProcessorOption{pipeline.WithSourceExtent(counts[src.Name()], identities[src.Name()])})
		if w := writers[src.Name()]; w != nil {
			sopts = append(sopts, pipeline.WithWriters(w))
		}
		db := a.storeOf(src.Name())
		sopts = append(sopts, pipeline.WithStoreTables(a.storeTables(db)))
		if a.evo != nil {
			sopts = append(sopts, pipeline.WithBuilds(a.evo))
		}
		proc, err := pipeline.NewProcessor(p.p, db, src, sopts...)
		if err != nil {
			return nil, fail(err)
		}
		a.procs = append(a.procs, proc)
	}
	if err := a.observeTelemetry(); err != nil {
		return nil, fail(err)
	}
	ok, opened = true, true
	a.startLive(o.liveOn)
	return a, nil
}

// closeSinks closes the sinks that have a Close method.
func closeSinks(sinks map[string]connector.Sink) {
	for _, sk := range sinks {
		if c, ok := sk.(interface{ Close(context.Context) error }); ok {
			ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
			_ = c.Close(ctx)
			stop()
		}
	}
}

// Run processes every source until ctx is done or a partition fails, and
// returns only when everything it started has stopped: batches in flight
// committed (within the drain timeout), dead letters published or left
// durably for the next run. It returns nil after a stop caused by ctx, the
// error of the first partition that failed (the others are stopped, and
// their work committed), or an error wrapping ErrRunning or ErrClosed. Run
// may be called again after it returned; it resumes from the committed
// checkpoints.
func (a *App) Run(ctx context.Context) error {
	a.mu.Lock()
	switch {
	case a.closed:
		a.mu.Unlock()
		return fmt.Errorf("topology %q: run: %w", a.prog.Name(), ErrClosed)
	case a.running:
		a.mu.Unlock()
		return fmt.Errorf("topology %q: run: %w", a.prog.Name(), ErrRunning)
	}
	ctx, cancel := context.WithCancel(ctx)
	a.running, a.cancel, a.done = true, cancel, make(chan struct{})
	done := a.done
	a.mu.Unlock()
	defer func() {
		cancel()
		a.mu.Lock()
		a.running, a.cancel = false, nil
		a.mu.Unlock()
		close(done)
	}()

	if a.grp != nil {
		return a.runGroup(ctx)
	}
	// The global sources first: the others start once the global tables
	// caught up to the ends of their topics (global_group.go).
	globalDone := a.startGlobal(ctx, cancel)
	if err := a.waitGlobal(ctx); err != nil && ctx.Err() == nil {
		cancel()
		return fmt.Errorf("topology %q: run: %w", a.prog.Name(), errors.Join(err, globalDone()))
	}
	errs := make([]error, len(a.procs))
	if ctx.Err() == nil {
		var wg sync.WaitGroup
		for i, proc := range a.procs {
			if a.prog.global[proc.Source()] {
				continue
			}
			wg.Go(func() {
				errs[i] = proc.Run(ctx)
				if errs[i] != nil {
					cancel() // one source failed: stop the others, committing their work
				}
			})
		}
		wg.Wait()
	}
	cancel()
	return errors.Join(append(errs, globalDone())...)
}

// Close stops Run if it is running (as if its context were done) and waits
// for it to return, then closes the state directory and the dead-letter
// sink. Tables answer ErrNotOpen afterwards. Close is idempotent and may be
// called at any time, from any goroutine: there is no wrong order.
func (a *App) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	cancel, done := a.cancel, a.done
	a.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	a.live.Stop()
	var errs []error
	closers := []connector.Sink{a.dlq}
	for _, topic := range a.prog.Outputs() {
		closers = append(closers, a.sinks[topic])
	}
	if a.grp != nil {
		closers = append(closers, a.grp.sink)
	}
	for _, sk := range closers {
		if c, ok := sk.(interface{ Close(context.Context) error }); ok {
			ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
			errs = append(errs, c.Close(ctx))
			stop()
		}
	}
	errs = append(errs, a.tel.Close(), a.db.Close())
	if a.gdb != nil {
		errs = append(errs, a.gdb.Close())
	}
	return errors.Join(errs...)
}

// Stats returns a snapshot of every source's progress, in the order the
// sources were declared. It is cheap and safe to call at any time. In a
// group (WithGroup) a source's Partitions are only those the instance
// serves now (Phase), and ParkedKeys and ParkedRecords sum theirs: what a
// partition that moved away holds is its new owner's. Total still counts
// the work done on such a partition while it was served here (counters
// never go back).
func (a *App) Stats() []stream.Stats {
	out := make([]stream.Stats, len(a.procs))
	for i, p := range a.procs {
		out[i] = a.servedStats(p.Stats())
	}
	return out
}

// Checkpoint returns the committed next offset of a source partition (where
// processing resumes), and false when nothing was committed for it.
func (a *App) Checkpoint(source string, partition uint32) (uint64, bool, error) {
	return a.storeOf(source).Checkpoint(source, partition)
}

// Unblock lets a key blocked behind a poison event (stream.BlockPoisonedKey)
// go on: its parked events are retried at once. It needs Run to be running.
func (a *App) Unblock(ctx context.Context, source string, partition uint32, key []byte) error {
	for _, p := range a.procs {
		if p.Source() == source {
			return p.Unblock(ctx, partition, key)
		}
	}
	return fmt.Errorf("strand: topology %q: unblock key %q: no source %q", a.prog.Name(), key, source)
}

// PendingDeadLetters returns the committed dead letters not yet published
// to the dead-letter topic, of every source.
func (a *App) PendingDeadLetters(ctx context.Context) ([]deadletter.Letter, error) {
	var out []deadletter.Letter
	for _, p := range a.procs {
		d, err := p.PendingDeadLetters(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	return out, nil
}

// writerGroups returns the writer turns of the sources that share tables
// (docs/design.md §2, one writer per row): sources linked by a table they
// both write, directly or through other sources, share one pipeline.Writers;
// a source that shares no table with another has none.
func (p *Program) writerGroups() map[string]*pipeline.Writers {
	parent := map[string]string{}
	var find func(s string) string
	find = func(s string) string {
		for parent[s] != "" && parent[s] != s {
			s = parent[s]
		}
		return s
	}
	for _, tn := range p.tables {
		inputs := tn.inputs() // readers (Lookup) take turns with the writers
		for _, sn := range inputs {
			if parent[sn] == "" {
				parent[sn] = sn
			}
			if r, r0 := find(sn), find(inputs[0]); r != r0 {
				parent[r] = r0
			}
		}
	}
	size := map[string]int{}
	for sn := range parent {
		size[find(sn)]++
	}
	out := map[string]*pipeline.Writers{}
	groups := map[string]*pipeline.Writers{}
	for sn := range parent {
		root := find(sn)
		if size[root] < 2 {
			continue
		}
		if groups[root] == nil {
			groups[root] = pipeline.NewWriters()
		}
		out[sn] = groups[root]
	}
	return out
}
