// Package topology is strand's fluent builder and its front door. The
// builder declares what a read model reads (sources), which event types it
// handles and how (projections into tables, side effects); Open runs the
// built topology as one App over a connector (connectors/iggy's Client, or
// topologytest's in-memory topics), with one state directory, one
// dead-letter topic and one logger.
//
//	t := topology.New("accounts")
//	src := topology.Source[AccountID](t, "bank/accounts")
//	balances := topology.NewTable[AccountID, Account](t, "balances", stream.JSON[Account]())
//	topology.Project(topology.On(src, Opened), balances, func(a *Account, e AccountOpened) error { ... })
//	topology.Project(topology.On(src, Deposits), balances, func(a *Account, e Deposited) error { ... })
//	topology.On(src, Closed).ForEach("notify", notifyClosed, topology.WithMaxBatch(100))
//	app, err := topology.Open(ctx, t, client, dir)
//	defer app.Close()
//	go app.Run(ctx)
//	acct, ok, err := balances.Get(ctx, 42)
//
// # Words
//
// The words follow Kafka Streams where the concept is the same: Source (a
// KStream from a topic), Table (a materialized key-value store), Project
// (aggregate into a table), ForEach (a side effect). What is new in strand
// lives on the event declaration (package stream), because the publisher
// must agree on it: the key (stream.Declare's Key method or DeclareFunc's
// function), the fence (stream.WithFence, stream.WithFenceBy) and the algebra that
// reduces runs (stream.WithReduce). A "sink" is only ever a topic strand
// publishes to.
//
// Project is a package function, not a method of Stream, because Go methods
// cannot bring the table's value type parameter.
//
// # Options
//
// Every option type (Option, TableOption, ForEachOption, KeyByOption,
// ForeignOption, ResequenceOption, OpenOption, ResetOption) is an opaque
// interface made only by this package's With… functions, each of which
// checks its value: builder options report a bad value from Build,
// OpenOptions from Open, each error naming the option
// ("strand: topology.WithRetry: …"). Errors strand returns start with
// "strand: " once (docs/design.md §1).
//
// # Guarantees
//
// Tables get exactly-once: each batch's table writes commit atomically with
// the source checkpoint, and a run that fails leaves no trace. ForEach gets
// at-least-once. Failures park their key and are retried (WithRetry);
// records that cannot be applied are dead-lettered with their reason (see
// docs/design.md §2 and §8). Tests run a topology without a broker with
// package topologytest.
package topology

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
)

// Topology is a processor under construction: its sources, handlers and
// tables. Build checks and compiles it. A Topology is not safe for
// concurrent use while it is being built; build it once at start-up.
type Topology struct {
	name    string
	spec    executor.Spec
	sources []sourceNode
	tables  []tableNode
	timers  []timerNode // OnTimer (time.go)
	errs    []error
	// after runs at Build once every source's checks ran (join.go).
	after []func() error
	// windows are the window tables (window.go).
	windows []windowNode
}

// Option configures a Topology.
type Option interface {
	apply(*Topology)
}

// optionFunc adapts a function to Option.
type optionFunc func(*Topology)

func (f optionFunc) apply(c *Topology) { f(c) }

// WithPoisonPolicy sets what happens to a key's later events after one of
// its events turned out to be poison; the default is stream.PassPoison. An
// unknown policy is refused by Build.
func WithPoisonPolicy(p stream.PoisonPolicy) Option {
	return optionFunc(func(t *Topology) {
		if p != stream.PassPoison && p != stream.BlockPoisonedKey {
			t.errs = append(t.errs, fmt.Errorf("strand: topology.WithPoisonPolicy: unknown policy %d", uint8(p)))
			return
		}
		t.spec.Poison = p
	})
}

// WithWorkers bounds how many keys of one batch run at once (per partition);
// the default is GOMAXPROCS. A count below 1 is refused by Build.
func WithWorkers(n int) Option {
	return optionFunc(func(t *Topology) {
		if n < 1 {
			t.errs = append(t.errs, fmt.Errorf("strand: topology.WithWorkers: %d workers, want at least 1", n))
			return
		}
		t.spec.Workers = n
	})
}

// WithRetry sets how many tries a failing record gets before its run is
// dead-lettered (default 10), and the backoff before the first retry,
// doubling with each failed try of that record up to max (defaults 100ms
// and 1 minute). Tries are counted per failing record: the count is of the
// consecutive tries that stopped the key at the same record (the first
// unapplied record of the run that failed), and it starts again at 1 when a
// retry gets past that record and the key fails further on. Attempts below
// 1, a backoff of 0 or less, or max below backoff are refused by Build.
func WithRetry(attempts int, backoff, max time.Duration) Option {
	return optionFunc(func(t *Topology) {
		if attempts < 1 || backoff <= 0 || max < backoff {
			t.errs = append(t.errs, fmt.Errorf("strand: topology.WithRetry: %d attempts, backoff %v up to %v; want attempts >= 1 and 0 < backoff <= max",
				attempts, backoff, max))
			return
		}
		t.spec.MaxAttempts, t.spec.Backoff, t.spec.MaxBackoff = attempts, backoff, max
	})
}

// New starts a topology named name. The name is part of its fingerprint.
func New(name string, opts ...Option) *Topology {
	t := &Topology{name: name}
	t.spec.Name = name
	for _, o := range opts {
		if o != nil {
			o.apply(t)
		}
	}
	return t
}

// Name returns the topology's name.
func (t *Topology) Name() string { return t.name }

type sourceNode struct {
	name     string
	keyType  reflect.Type
	handlers []executor.Handler
	skip     []planner.Tag
	checks   []func() error // per-handler checks run at Build
	reseq    *executor.ResequenceSpec
	// outputs are the topics the source's To and KeyBy steps publish to;
	// feeder, for a KeyBy's repartition topic, is the source whose
	// events it carries (its partition count is the topic's).
	outputs []string
	feeder  string
	foreign *executor.ForeignSpec // ForeignSource (foreign.go)
	lookups []executor.LookupSpec // Reads (lookup.go)
	// trustKeys: a KeyByContext's repartition topic, whose records'
	// keys are taken from their headers (lookup.go).
	trustKeys bool
	// global: Global (lookup.go).
	global bool
}

type tableNode struct {
	name      string
	typ       string
	keyCodec  any
	hasKeys   bool
	hasValues bool
	attacher  state.Attacher
	keyErr    error
	// sources lists the sources whose events are projected into the
	// table; Open gives the table their partition count.
	sources     []string
	partitioner interface{ SetPartitions(uint32) }
	// time.go: the time to live (0: none), the typed delete of a row,
	// and the options' errors.
	ttl     time.Duration
	del     func(tx *state.Txn, partition uint32, key []byte) error
	optErrs []error
	// readers lists the sources whose functions read the table with
	// Lookup (lookup.go): they share its partition count and writer turns.
	readers []string
	// global: the table is fed by global sources alone (lookup.go): its
	// readers neither share its partition count nor take turns.
	global bool
}

// inputs returns the sources that write or read the table.
func (tn *tableNode) inputs() []string {
	out := slices.Clone(tn.sources)
	if tn.global {
		return out
	}
	for _, r := range tn.readers {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// SourceNode is one source of a topology: a partitioned log whose events
// have keys of type K. Make one with Source.
type SourceNode[K any] struct {
	t   *Topology
	idx int
}

// Source adds the source named name (the name a connector.Source reports; for
// Iggy "stream/topic") whose events are keyed by K. Declaring one source
// name twice with different key types is refused by Build.
func Source[K any](t *Topology, name string) *SourceNode[K] {
	kt := reflect.TypeFor[K]()
	for i := range t.sources {
		if t.sources[i].name == name {
			if t.sources[i].keyType != kt {
				t.errs = append(t.errs, fmt.Errorf("source %q declared with conflicting key types %s and %s",
					name, t.sources[i].keyType, kt))
			}
			return &SourceNode[K]{t: t, idx: i}
		}
	}
	t.sources = append(t.sources, sourceNode{name: name, keyType: kt})
	return &SourceNode[K]{t: t, idx: len(t.sources) - 1}
}

// Name returns the source's name.
func (s *SourceNode[K]) Name() string { return s.t.sources[s.idx].name }

// Skip declares type tags of this source that the topology deliberately
// ignores (another service handles them): their records are counted as
// skipped. Any other tag without a handler is poison and dead-lettered.
func (s *SourceNode[K]) Skip(tags ...planner.Tag) *SourceNode[K] {
	n := &s.t.sources[s.idx]
	n.skip = append(n.skip, tags...)
	return s
}

// Stream is the events of one declared type read from one source: the
// place to attach projections (Project) and side effects (ForEach).
type Stream[K, E any] struct {
	src  *SourceNode[K]
	decl *stream.Event[K, E]
}

// On selects the events of decl on src. decl must be a declaration made
// with stream.Declare or stream.DeclareFunc; a nil or bad declaration is
// refused by Build, naming it.
func On[K, E any](src *SourceNode[K], decl *stream.Event[K, E]) *Stream[K, E] {
	return &Stream[K, E]{src: src, decl: decl}
}

func (s *Stream[K, E]) node() *sourceNode { return &s.src.t.sources[s.src.idx] }

func (s *Stream[K, E]) check(what string) bool { return s.core().check(what) }

// ForEachOption configures a ForEach step.
type ForEachOption interface {
	apply(*forEachOptions) error
}

// forEachOptionFunc adapts a function to ForEachOption.
type forEachOptionFunc func(*forEachOptions) error

func (f forEachOptionFunc) apply(c *forEachOptions) error { return f(c) }

type forEachOptions struct{ maxBatch int }

// WithMaxBatch sets the most events a ForEach function gets in one call; runs
// longer than that are handed over in chunks, one after another. The
// default (0) hands each reduced run over whole. A negative n is refused by
// Build.
func WithMaxBatch(n int) ForEachOption {
	return forEachOptionFunc(func(o *forEachOptions) error {
		if n < 0 {
			return fmt.Errorf("strand: topology.WithMaxBatch: %d, want 0 (whole runs) or more", n)
		}
		o.maxBatch = n
		return nil
	})
}

// ForEach attaches fn, named name, to the stream: a side effect (Kafka
// Streams' foreach) such as a call to a web service. fn gets the events of
// one key and one run at a time, reduced by the type's algebra, in chunks
// of at most WithMaxBatch events. Delivery is at-least-once: after a crash, or
// when another handler of the same run fails and the run is retried, fn may
// see events again; keep exactly-once state in tables. fn runs concurrently
// for different keys. A panic in fn is turned into an error of its key.
// ForEach returns s for chaining.
func (s *Stream[K, E]) ForEach(name string, fn func(ctx context.Context, key K, events []E) error, opts ...ForEachOption) *Stream[K, E] {
	var handler func(maxBatch int) executor.Handler
	if fn != nil {
		handler = func(maxBatch int) executor.Handler { return executor.Handle(s.decl, name, maxBatch, fn) }
	}
	s.core().forEach(name, opts, handler)
	return s
}

// Project folds the events of s into table: for each run of one key it
// reads the key's value once (the zero value when absent), calls fold for
// every reduced event in log order, and writes the value once. If fold
// fails, nothing of its event is written: the run's events before it are
// applied, and the failing event is parked and retried (see WithRetry) or,
// for a Permanent error or when its tries run out, dead-lettered alone
// with its own error; the key goes on behind it.
// Exactly-once: the write commits atomically with the source checkpoint.
// Project returns s for chaining.
func Project[K, E, V any](s *Stream[K, E], table *Table[K, V], fold func(v *V, e E) error) *Stream[K, E] {
	if fold == nil {
		return project(s, table, nil)
	}
	return project(s, table, executor.Project(s.decl, tableOf(table), fold))
}

// ProjectContext is Project with a fold that is given a context: it is
// cancelled when the App stops for good (the drain timeout after a stop has
// passed, see WithDrainTimeout), so that a fold waiting on something slow
// can give up. A fold that does not return is abandoned then: its batch is
// not committed, the stop goes on, and the run is reported in
// stream.PartitionStats.Stuck.
func ProjectContext[K, E, V any](s *Stream[K, E], table *Table[K, V], fold func(ctx context.Context, v *V, e E) error) *Stream[K, E] {
	if fold == nil {
		return project(s, table, nil)
	}
	return project(s, table, executor.ProjectContext(s.decl, tableOf(table), fold))
}

func tableOf[K, V any](t *Table[K, V]) *state.Table[K, V] {
	if t == nil {
		return nil
	}
	return t.t
}

func project[K, E, V any](s *Stream[K, E], table *Table[K, V], h executor.Handler) *Stream[K, E] {
	var tab Readable
	if table != nil {
		tab = table
	}
	var declErr error
	var keys any
	if s.decl != nil {
		declErr, keys = s.decl.Err(), s.decl.KeyCodec()
	}
	s.core().project(tab, h, declErr, keys)
	return s
}

func (t *Topology) table(a state.Attacher) *tableNode {
	for i := range t.tables {
		if t.tables[i].attacher == a {
			return &t.tables[i]
		}
	}
	return nil
}

// TableOption configures a table (NewTable).
type TableOption interface {
	apply(*tableOptions)
}

// tableOptionFunc adapts a function to TableOption.
type tableOptionFunc func(*tableOptions)

func (f tableOptionFunc) apply(c *tableOptions) { f(c) }

type tableOptions struct {
	keys    any
	ttl     time.Duration // WithTTL (time.go)
	version uint32        // WithTableVersion
	errs    []error
}

// WithTableKeys sets the key codec of a table; the default is
// stream.DefaultKeyCodec[K](). It must encode keys like the declarations of
// the events projected into the table.
func WithTableKeys[K any](c stream.Codec[K]) TableOption {
	return tableOptionFunc(func(o *tableOptions) { o.keys = c })
}

// NewTable adds a table named name, with values of type V encoded by values
// and keys of type K (stream.DefaultKeyCodec[K], or WithTableKeys). Once an App
// of the topology is open, Get and Scan read it, consistent with the last
// commit. A nil values codec, a key type without a ready-made codec, or a
// name used twice is refused by Build.
func NewTable[K, V any](t *Topology, name string, values stream.Codec[V], opts ...TableOption) *Table[K, V] {
	o := tableOptionsOf(opts)
	var keys stream.Codec[K]
	var keyErr error
	if o.keys != nil {
		c, ok := o.keys.(stream.Codec[K])
		if !ok {
			keyErr = tableKeysErr(name, o.keys, reflect.TypeFor[K]())
		}
		keys = c
	} else {
		c, err := stream.DefaultKeyCodec[K]()
		if err != nil {
			keyErr = tableErr(name, err)
		}
		keys = c
	}
	var vc state.Codec[V]
	if values != nil {
		vc = values
	}
	var kc state.Codec[K]
	var keyCodec any
	if keys != nil {
		kc, keyCodec = keys, keys
	}
	tab := state.NewTable[K, V](name, kc, vc)
	tab.SetVersion(o.version) // evolve.go
	t.addTable(name, reflect.TypeFor[K](), reflect.TypeFor[V](), &o, tableNode{
		keyCodec: keyCodec, hasKeys: keys != nil, hasValues: values != nil, keyErr: keyErr,
		attacher: tab, partitioner: tab,
		del: func(tx *state.Txn, p uint32, key []byte) error { return tab.Delete(tx, p, key) },
	})
	return &Table[K, V]{t: tab}
}

// ErrBuild is wrapped by every error Build returns.
var ErrBuild = errors.New("strand: build refused")

// Build checks the topology and compiles it into a Program. It
// refuses, with one error naming every problem (and wrapping ErrBuild and
// stream.ErrBadTopology): bad event declarations (mistyped options, invalid
// fences), handlers for an undeclared (nil) type, duplicate type tags on one
// source, a projection without a table, a table without a codec or with a
// key codec different from its events', duplicate table names, one source
// name with conflicting key types, and a topology without sources or
// handlers.
//
// The program's Fingerprint covers sources, key types, event types with
// their fences and algebras, projections and tables (not sinks); the
// runtime stores it in the database and refuses a database written by an
// incompatible topology.
func (t *Topology) Build() (*Program, error) {
	errs := append([]error(nil), t.errs...)
	seen := map[string]bool{}
	var attach []state.Attacher
	for _, tn := range t.tables {
		if seen[tn.name] {
			errs = append(errs, fmt.Errorf("table %q declared twice", tn.name))
		}
		seen[tn.name] = true
		if tn.name == "" {
			errs = append(errs, errors.New("a table has no name"))
		}
		if !tn.hasValues {
			errs = append(errs, fmt.Errorf("table %q has no value codec", tn.name))
		}
		if tn.keyErr != nil {
			errs = append(errs, tn.keyErr)
		} else if !tn.hasKeys {
			errs = append(errs, fmt.Errorf("table %q has no key codec", tn.name))
		}
		attach = append(attach, tn.attacher)
	}
	spec := t.spec
	spec.Tables = attach
	spec.Sources = nil
	for _, n := range t.sources {
		for _, c := range n.checks {
			if err := c(); err != nil {
				errs = append(errs, err)
			}
		}
		if len(n.handlers) == 0 {
			errs = append(errs, fmt.Errorf("source %q has no handler", n.name))
		}
		spec.Sources = append(spec.Sources, executor.SourceSpec{Name: n.name, Handlers: n.handlers, Skip: n.skip, Resequence: n.reseq,
			Foreign: n.foreign, Lookups: n.lookups, TrustKeys: n.trustKeys, Global: n.global})
	}
	for _, c := range t.after {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	ttls, timers, terrs := t.timeSpecs()
	errs = append(errs, terrs...)
	spec.TTLs, spec.Timers = ttls, timers
	wspecs, werrs := t.windowSpecs()
	errs = append(errs, werrs...)
	spec.Windows = wspecs
	if len(errs) > 0 {
		// Report the program's own checks too, so one Build names every
		// problem; only table errors above would be duplicated.
		if _, err := executor.NewProgram(spec); err != nil {
			errs = append(errs, err)
		}
		return nil, fmt.Errorf("%w: topology %q: %w", ErrBuild, t.name, errors.Join(errs...))
	}
	p, err := executor.NewProgram(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBuild, err)
	}
	prog := &Program{p: p, tables: map[string]tableNode{}, feeders: map[string]string{}, global: map[string]bool{}}
	for _, n := range t.sources {
		if n.feeder != "" {
			prog.feeders[n.name] = n.feeder
		}
		if n.global {
			prog.global[n.name] = true
		}
	}
	for _, tn := range t.tables {
		tn.global = len(tn.sources) > 0 && !slices.ContainsFunc(tn.sources, func(sn string) bool { return !prog.global[sn] })
		prog.tables[tn.name] = tn
	}
	return prog, nil
}

// Program is a built topology: checked, compiled, ready to Open. It can be
// opened any number of times, one App at a time per state directory.
type Program struct {
	p      *executor.Program
	tables map[string]tableNode
	// feeders maps each repartition topic (KeyBy) to the source it
	// re-keys.
	feeders map[string]string
	// global holds the global sources (lookup.go).
	global map[string]bool
}

// Name returns the topology's name.
func (p *Program) Name() string { return p.p.Name() }

// Sources returns the names of the sources the topology reads, in the
// order they were declared.
func (p *Program) Sources() []string { return p.p.Sources() }

// Repartitions returns the repartition topics of the topology's KeyBy
// steps: sources it feeds itself, in the order they were declared.
func (p *Program) Repartitions() []string {
	var out []string
	for _, sn := range p.Sources() {
		if _, ok := p.feeders[sn]; ok {
			out = append(out, sn)
		}
	}
	return out
}

// Outputs returns the topics the topology publishes to with To and KeyBy
// (repartition topics included), in the order they were declared; the
// dead-letter topic is not among them.
func (p *Program) Outputs() []string {
	var out []string
	for _, sn := range p.Sources() {
		for _, d := range p.p.Outputs(sn) {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// Tables returns the names of the topology's tables.
func (p *Program) Tables() []string { return p.p.Tables() }

// Fingerprint returns a hash of what gives the topology's stored state its
// meaning (sources, key types, event types with their fences and algebras,
// projections, tables and their types). Open stores it in a new state
// directory and refuses one written by a topology with another.
func (p *Program) Fingerprint() []byte { return p.p.Fingerprint() }
