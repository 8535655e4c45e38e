package executor

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/strand-io/strand/stream"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/planner"
)

// ErrBadTopology is wrapped by every error NewProgram (and so topology
// Build) returns: the topology cannot work, and the message names why.
var ErrBadTopology = errors.New("strand: bad topology")

// Spec describes a program for NewProgram. Package topology fills one from
// its fluent builder; most users never write one by hand.
type Spec struct {
	// Name names the topology. It is part of the fingerprint.
	Name string
	// Sources lists the logs the program reads, with their handlers.
	Sources []SourceSpec
	// Tables lists tables to attach even though no handler projects into
	// them (tables that handlers use are attached anyway).
	Tables []state.Attacher
	// Poison says what happens to a key's events after a poison event.
	Poison stream.PoisonPolicy
	// Workers bounds how many keys of one batch run at once; 0 means
	// runtime.GOMAXPROCS(0).
	Workers int
	// MaxAttempts is how many tries a failing record gets (the first
	// included) before its run is dead-lettered and the key goes on; 0
	// means 10. Tries are counted per failing record: the count is of the
	// consecutive tries that stopped the key at the same record (the first
	// unapplied record of the failing run), and it starts again at 1 when
	// a retry gets past that record and the key fails further on.
	MaxAttempts int
	// Backoff is the wait before the first retry of a parked key; it
	// doubles with each failed try of the same record up to MaxBackoff. 0 means 100ms and 1 minute.
	Backoff, MaxBackoff time.Duration
	// TTLs and Timers give tables a time to live and timer handlers
	// (timers.go).
	TTLs   []TTLSpec
	Timers []TimerSpec
	// Hooks keep derived tables (table-table joins) up to date with
	// their inputs (derive.go).
	Hooks []HookSpec
	// Windows are the window tables (windows.go).
	Windows []WindowSpec
}

// SourceSpec is one source of a program and the handlers of its events.
type SourceSpec struct {
	// Name is the source's stable name (Source.Name), part of checkpoint
	// keys.
	Name string
	// Handlers consume the source's events; several may share a type.
	Handlers []Handler
	// Skip lists type tags the program deliberately ignores on this
	// source: records with them are counted as skipped, never dead-
	// lettered. Any other tag without a handler is poison.
	Skip []planner.Tag
	// Resequence, when set, turns the re-sequencer on for the source's
	// sequenced types (docs/design.md §10). NewProgram fills its defaults
	// in a copy.
	Resequence *ResequenceSpec
	// Foreign, when set, makes the source foreign: its records carry no
	// strand headers and are classified (foreign.go).
	Foreign *ForeignSpec
	// Lookups lists the tables the source's handlers read (lookup.go).
	Lookups []LookupSpec
	// TrustKeys: the source's records are keyed by their headers alone;
	// an event's own key is not checked against them (the repartition
	// topic of a KeyBy whose key function read tables, lookup.go).
	TrustKeys bool
	// Global makes the source global (lookup.go): every instance reads
	// all of its partitions, and the tables it feeds (it alone) are read
	// by lookups at any key.
	Global bool
}

// Program is a compiled topology: per source, the declared event types and
// their handlers, the tables, the policies and a fingerprint. It is
// immutable and safe for concurrent use; a processor runtime makes one Task
// per source partition from it.
type Program struct {
	name        string
	sources     map[string]*programSource
	sourceNames []string
	tables      []state.Attacher
	tableNames  []string
	fingerprint []byte
	// legacyFingerprint is the fingerprint without the description's newer
	// lines; description the fingerprint's lines (describe.go).
	legacyFingerprint []byte
	description       string
	poison            stream.PoisonPolicy
	workers           int
	maxAttempts       int
	backoff           time.Duration
	maxBackoff        time.Duration
	// times holds the tables with a TTL or a timer handler, by name
	// (timers.go); nil when none has.
	times map[string]*tableTime
	// hooks: per input table, the derived tables its writes update
	// (derive.go).
	hooks map[string][]hook
	// windows holds the window tables by name (windows.go).
	windows map[string]*windowTime
}

// programSource is one source of a program, with routes by type tag.
type programSource struct {
	name   string
	routes map[planner.Tag]*route
	skip   map[planner.Tag]bool
	reseq  *ResequenceSpec // nil: off
	// emits: the source has emitting handlers (To, KeyBy), publishing to
	// dests.
	emits bool
	dests []string
	// foreign classifies the source's records (foreign.go); nil: they
	// carry strand headers.
	foreign *ForeignSpec
	// sweeps are the tables whose deadlines the source's Tasks sweep
	// (timers.go).
	sweeps []*tableTime
	// wins are the window tables whose stream time the source's Tasks
	// keep (windows.go).
	wins []*windowTime
	// lookups: per type tag, the tables its handlers read and how
	// (lookup.go).
	lookups map[planner.Tag]map[string]lookupRule
	// trustKeys: SourceSpec.TrustKeys.
	trustKeys bool
	// global: SourceSpec.Global.
	global bool
}

// route is everything the executor needs for one type tag.
type route struct {
	tag  planner.Tag
	name string
	// handlers names the type's handlers, for logs and stats
	// ("project into \"balances\", ForEach \"notify\"").
	handlers string
	fence    planner.Ordering // static fence, or 0 when the type uses FenceBy
	kind     algebra.Kind
	runner   runner
	// sequenced: the type has a Sequence and the source re-sequences.
	sequenced bool
}

// runner runs the runs of one event type.
type runner interface {
	run(rc *runCtx, recs []int) runResult
}

// runResult says how a run ended, so that runOne decides what happens to
// the key without inspecting the error.
type runResult struct {
	end runEnd
	err error
	// at is the record the run failed at (an index into the batch's
	// records; runFailed only), or -1 when unknown: retries are counted
	// for it.
	at int
}

// runEnd is the way a run ended.
type runEnd uint8

const (
	// runOK: every record was applied or dead-lettered; the key goes on.
	runOK runEnd = iota
	// runBadKey: the key bytes do not decode with the type's key codec;
	// nothing of the run can be applied.
	runBadKey
	// runBlocked: a poison record under BlockPoisonedKey: what came before it
	// was applied, the rest waits behind it.
	runBlocked
	// runFailed: a handler, fold or reduction failed.
	runFailed
	// runFatal: the store failed; the batch is abandoned.
	runFatal
)

// NewProgram checks spec and compiles it. It refuses, with an error
// wrapping ErrBadTopology that names the problem: an empty name, no
// sources, duplicate source names, a bad declaration, two declarations
// sharing a type tag on one source, handlers of one source with different
// key types, a projection without a table, two projections of one type
// into one table, and tables with duplicate names. All problems are
// reported together.
func NewProgram(spec Spec) (*Program, error) {
	c := &compiler{tables: map[string]string{}, steps: map[string]string{}}
	fail := c.fail
	if spec.Name == "" {
		fail("topology has no name")
	}
	if len(spec.Sources) == 0 {
		fail("topology %q has no source", spec.Name)
	}
	p := &Program{
		name:        spec.Name,
		sources:     make(map[string]*programSource),
		poison:      spec.Poison,
		workers:     spec.Workers,
		maxAttempts: spec.MaxAttempts,
		backoff:     spec.Backoff,
		maxBackoff:  spec.MaxBackoff,
	}
	if p.workers <= 0 {
		p.workers = runtime.GOMAXPROCS(0)
	}
	if p.maxAttempts <= 0 {
		p.maxAttempts = 10
	}
	if p.backoff <= 0 {
		p.backoff = 100 * time.Millisecond
	}
	if p.maxBackoff <= 0 {
		p.maxBackoff = time.Minute
	}
	if p.poison != stream.PassPoison && p.poison != stream.BlockPoisonedKey {
		fail("unknown poison policy %d", uint8(p.poison))
	}

	c.p, c.fp = p, newFingerprint(spec.Name)
	fp, tables, addTable := c.fp, c.tables, c.addTable
	for _, t := range spec.Tables {
		if t == nil {
			fail("nil table")
			continue
		}
		name := tableName(t)
		addTable(name, fmt.Sprintf("%T", t), t)
	}

	for si, src := range spec.Sources {
		c.compileSource(si, src)
	}
	for _, src := range spec.Sources {
		if ps := p.sources[src.Name]; ps != nil && ps.reseq != nil && src.Resequence != nil {
			seqd := false
			for _, rt := range ps.routes {
				seqd = seqd || rt.sequenced
			}
			if !seqd && len(ps.routes) > 0 {
				fail("source %q: Resequence is on, but none of its event types is declared with stream.WithSequence", src.Name)
			}
		}
	}
	c.compileTimes(spec)
	c.compileWindows(spec)
	c.compileHooks(spec)
	c.compileLookups(spec)
	names := slices.Clone(p.tableNames)
	sort.Strings(names)
	for _, n := range names {
		fp.add("table", n, tables[n])
		c.describeTable(n)
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadTopology, spec.Name, errors.Join(c.errs...))
	}
	p.fingerprint, p.legacyFingerprint, p.description = fp.sum(), fp.legacySum(), fp.b.String()
	return p, nil
}

// compiler is NewProgram's state while it checks and compiles a Spec: the
// program so far, the problems found (all reported at once), the tables by
// name and Go type, and the fingerprint.
type compiler struct {
	p      *Program
	errs   []error
	tables map[string]string // name -> Go type
	steps  map[string]string // emitting step name -> where it is
	fp     *fingerprint
}

func (c *compiler) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// addTable registers a table once; the same name with another type is a
// problem.
func (c *compiler) addTable(name, typ string, a state.Attacher) {
	if prev, ok := c.tables[name]; ok {
		if prev != typ {
			c.fail("table %q declared twice, as %s and as %s", name, prev, typ)
		}
		return
	}
	c.tables[name] = typ
	c.p.tables = append(c.p.tables, a)
	c.p.tableNames = append(c.p.tableNames, name)
}

// compileSource checks one source of the spec and compiles its routes:
// its handlers grouped by type tag (one declaration per tag, one key type
// per source, one projection per table and tag), its skipped tags, its
// re-sequencing, and their lines of the fingerprint.
func (c *compiler) compileSource(si int, src SourceSpec) {
	p, fp, fail, addTable := c.p, c.fp, c.fail, c.addTable
	if src.Name == "" {
		fail("source %d has no name", si)
		return
	}
	if _, dup := p.sources[src.Name]; dup {
		fail("source %q declared twice", src.Name)
		return
	}
	ps := &programSource{name: src.Name, routes: map[planner.Tag]*route{}, skip: map[planner.Tag]bool{}, trustKeys: src.TrustKeys,
		global: src.Global}
	p.sources[src.Name] = ps
	p.sourceNames = append(p.sourceNames, src.Name)

	type group struct {
		d        declaration
		handlers []Handler
	}
	groups := map[planner.Tag]*group{}
	var tags []planner.Tag
	var keyType, keyFrom string
	for _, h := range src.Handlers {
		if h == nil {
			fail("source %q: nil handler", src.Name)
			continue
		}
		d := h.decl()
		hi := h.info()
		if d == nil {
			fail("source %q: handler %q has no event declaration", src.Name, hi.name)
			continue
		}
		if err := d.Err(); err != nil {
			fail("source %q: %w", src.Name, err)
			continue
		}
		if hi.kind == "project" && hi.attacher == nil {
			fail("source %q: type tag %d (%s): a projection without a table", src.Name, d.Tag(), d.Name())
			continue
		}
		if kt := d.keyType().String(); keyType == "" {
			keyType, keyFrom = kt, fmt.Sprintf("type tag %d (%s)", d.Tag(), d.Name())
		} else if kt != keyType {
			fail("source %q: conflicting key types: %s has key type %s, %s has %s",
				src.Name, keyFrom, keyType, fmt.Sprintf("type tag %d (%s)", d.Tag(), d.Name()), kt)
		}
		g, ok := groups[d.Tag()]
		if !ok {
			g = &group{d: d}
			groups[d.Tag()] = g
			tags = append(tags, d.Tag())
		} else if g.d != d {
			fail("source %q: duplicate type tag %d: declared for %s and for %s",
				src.Name, d.Tag(), g.d.Name(), d.Name())
			continue
		}
		if hi.kind == "emit" {
			if prev, dup := c.steps[hi.name]; dup {
				fail("source %q: step name %q used twice (also %s)", src.Name, hi.name, prev)
			}
			c.steps[hi.name] = fmt.Sprintf("on source %q", src.Name)
			switch {
			case hi.name == "":
				fail("source %q: type tag %d (%s): a step without a name", src.Name, d.Tag(), d.Name())
			case hi.dest == "":
				fail("source %q: step %q has no destination topic", src.Name, hi.name)
			case hi.dest == src.Name && hi.mode == EmitKeyBy:
				fail("source %q: KeyBy %q forwards into the topic it reads", src.Name, hi.name)
			}
			ps.emits = true
			if !slices.Contains(ps.dests, hi.dest) {
				ps.dests = append(ps.dests, hi.dest)
			}
		}
		if hi.kind == "project" {
			for _, other := range g.handlers {
				if oi := other.info(); oi.kind == "project" && oi.table == hi.table {
					fail("source %q: type tag %d (%s) projects into table %q twice; fold both in one projection",
						src.Name, d.Tag(), d.Name(), hi.table)
				}
			}
			addTable(hi.table, hi.tableType, hi.attacher)
		}
		g.handlers = append(g.handlers, h)
	}
	for _, tag := range src.Skip {
		if _, handled := groups[tag]; handled {
			fail("source %q: type tag %d is both handled and skipped", src.Name, tag)
		}
		ps.skip[tag] = true
	}
	if src.Resequence != nil {
		rs := *src.Resequence
		for _, err := range rs.check() {
			fail("source %q: %w", src.Name, err)
		}
		ps.reseq = &rs
	}
	slices.Sort(tags)
	fp.add("source", src.Name, keyType)
	if ps.reseq != nil {
		fp.add("resequence", src.Name, ps.reseq.Start.String())
	}
	c.compileForeign(ps, src)
	for _, tag := range tags {
		g := groups[tag]
		r, err := g.d.newRunner(g.handlers)
		if err != nil {
			fail("source %q: %w", src.Name, err)
			continue
		}
		fence, static := g.d.StaticOrdering()
		if !static {
			fence = 0 // plan by each record's header
		}
		names := make([]string, 0, len(g.handlers))
		for _, h := range g.handlers {
			names = append(names, h.info().describe())
		}
		ps.routes[tag] = &route{tag: tag, name: g.d.Name(), fence: fence, kind: g.d.algebraKind(), runner: r,
			sequenced: ps.reseq != nil && g.d.sequenced(), handlers: strings.Join(names, ", ")}
		if ps.routes[tag].sequenced {
			fp.add("sequenced", fmt.Sprint(tag))
		}
		typeLine := false
		for _, h := range g.handlers {
			hi := h.info()
			if hi.kind != "project" {
				continue
			}
			if !typeLine {
				fp.add("type", fmt.Sprint(tag), g.d.eventType().String(), fence.String(), g.d.algebraKind().String())
				typeLine = true
			}
			fp.add("project", fmt.Sprint(tag), hi.table)
		}
		for _, h := range g.handlers {
			// The outbox's rows name their destinations, and a KeyBy's
			// destination is a source: both are part of what the state
			// means.
			if hi := h.info(); hi.kind == "emit" {
				fp.add("emit", fmt.Sprint(tag), hi.name, hi.dest, hi.mode.String())
			}
		}
	}
}

// tableName returns the name of a table known only as an Attacher.
func tableName(a state.Attacher) string {
	if n, ok := a.(interface{ Name() string }); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", a)
}

// fingerprint hashes the parts of a topology that give its stored state its
// meaning: sources and their key types, event types with fence and algebra,
// which types project into which tables, and the tables with their Go
// types. Plain handlers (Handle) are not part of it: adding or removing one
// does not change what the tables hold.
//
// Its lines are also the topology's readable description (describe.go),
// which the store keeps: a refused start lists what changed. Lines added
// after the first stores were written (addNew: the tables' codecs and
// versions) are left out of the legacy hash, which a store written before
// them still carries and is accepted with.
type fingerprint struct{ b, legacy strings.Builder }

func newFingerprint(name string) *fingerprint {
	f := &fingerprint{}
	f.add("strand-topology-v1", name)
	return f
}

func (f *fingerprint) add(parts ...string) {
	appendLine(&f.b, parts)
	appendLine(&f.legacy, parts)
}

// addNew adds a line that the legacy hash leaves out.
func (f *fingerprint) addNew(parts ...string) { appendLine(&f.b, parts) }

func appendLine(b *strings.Builder, parts []string) {
	for _, p := range parts {
		fmt.Fprintf(b, "%d:%s;", len(p), p)
	}
	b.WriteByte('\n')
}

func (f *fingerprint) sum() []byte {
	s := sha256.Sum256([]byte(f.b.String()))
	return s[:]
}

func (f *fingerprint) legacySum() []byte {
	s := sha256.Sum256([]byte(f.legacy.String()))
	return s[:]
}

// Name returns the topology's name.
func (p *Program) Name() string { return p.name }

// Sources returns the names of the sources the program reads, in the order
// they were declared.
func (p *Program) Sources() []string { return slices.Clone(p.sourceNames) }

// Outputs returns the topics the To and KeyBy steps of source publish to,
// in the order they were declared (nil for an unknown source).
func (p *Program) Outputs(source string) []string {
	if ps := p.sources[source]; ps != nil {
		return slices.Clone(ps.dests)
	}
	return nil
}

// Tables returns the names of the program's tables.
func (p *Program) Tables() []string { return slices.Clone(p.tableNames) }

// Fingerprint returns a hash of what gives the program's stored state its
// meaning (sources, key types, event types with their fences and algebras,
// projections, tables and their types). Attach stores it in a new database
// and refuses a database with another one. The slice is a copy.
func (p *Program) Fingerprint() []byte { return slices.Clone(p.fingerprint) }

// Attach binds the program's tables to db and checks the fingerprint
// (state.DB.EnsureTopology, which keeps the program's description): a
// database written by an incompatible topology is refused with a
// *TopologyChangedError (wrapping state.ErrIncompatibleTopology) that lists
// what changed.
// Call it once per opened database, before NewTask.
//
// A store with a table being built in the background (AttachEvolving) is
// refused: only a processor given the builds (WithBuilds) keeps it right.
func (p *Program) Attach(db *state.DB) error {
	if err := p.attach(db); err != nil {
		return err
	}
	return refuseBuilds(db, p.name)
}

func (p *Program) attach(db *state.DB) error {
	if err := p.ensureTopology(db); err != nil { // global.go
		return err
	}
	if err := db.Attach(p.tables...); err != nil {
		return strerr.Errorf("strand: topology %q: attach tables: %w", p.name, err)
	}
	return nil
}
