package executor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream"
)

// Background builds (docs/design.md §19); the build readers and the
// hand-over are internal/pipeline's (build.go). A topology that gains a table,
// or declares a table with a new version (or changes what a table folds),
// starts on its store: every such table is built from its source's oldest
// retained records by a build reader per source partition, while the
// partition's main pipeline goes on with everything else and skips the
// table. The build reader is a Task of its own (its checkpoint and runtime
// rows live under a source name of their own, state.BuildSourceName) that
// applies the table's projections only and publishes nothing (its replay
// mark is infinite: To, KeyBy and dead letters were published when the
// main pipeline first read the records; ForEach is not called).
//
// Hand-over, per partition: once the build reader has reached the main
// pipeline's committed checkpoint, it asks the pipeline, which at a batch
// boundary (its commit finished, no parked key) answers with its
// checkpoint m and waits; the reader applies the records up to m, commits,
// and records the hand-over at m (state.DB.HandOver); the pipeline then
// applies the table's projections from m on. Every record is applied by
// exactly one of them: below m by the build, from m on by the pipeline.
// When the last partition is handed over, state.DB.FinishBuild switches
// the table to its built rows in one batch, and the old ones are removed
// right after it in the background (the next start, if a crash comes
// first).

// Evolution is what AttachEvolving decided about a store: the tables being
// built in the background, and the tables it dropped.
type Evolution struct {
	builds  []*TableBuild
	dropped []string
	db      *state.DB
	prog    *Program
}

// Of reports whether e is p's AttachEvolving on db: p is attached to db.
func (e *Evolution) Of(p *Program, db *state.DB) bool { return e != nil && e.prog == p && e.db == db }

// TableBuild is one table being built (Evolution.BuildsOf).
type TableBuild struct {
	table  string
	att    state.Attacher
	source string
	alias  string // the build reader's source name
	hasOld bool
	parts  uint32

	mu       sync.Mutex
	left     map[uint32]bool // partitions not handed over
	finished bool

	built  []atomic.Uint64 // per partition: the build reader's checkpoint
	target []atomic.Uint64 // per partition: the main pipeline's
}

// BuildProgress is the progress of one table's build: the public
// stream.BuildStats, defined once there.
type BuildProgress = stream.BuildStats

// Progress returns the progress of every build, by table name.
func (e *Evolution) Progress() []BuildProgress {
	if e == nil {
		return nil
	}
	out := make([]BuildProgress, 0, len(e.builds))
	for _, tb := range e.builds {
		bp := BuildProgress{Table: tb.table, Source: tb.source, Replacing: tb.hasOld, Partitions: int(tb.parts)}
		for i := range tb.built {
			b, t := tb.built[i].Load(), tb.target[i].Load()
			bp.Built += min(b, t)
			bp.Target += t
		}
		tb.mu.Lock()
		bp.Left, bp.Done = len(tb.left), tb.finished
		tb.mu.Unlock()
		if bp.Done {
			bp.Built = bp.Target
		}
		out = append(out, bp)
	}
	return out
}

// Dropped names the tables AttachEvolving removed from the store.
func (e *Evolution) Dropped() []string {
	if e == nil {
		return nil
	}
	return slices.Clone(e.dropped)
}

// Building reports whether some table is still being built.
func (e *Evolution) Building() bool {
	for _, bp := range e.Progress() {
		if !bp.Done {
			return true
		}
	}
	return false
}

// AttachEvolving is Attach that starts a changed topology on its store
// when every change can be made in place: tables added, tables removed
// (their rows are dropped), tables to rebuild (a new version, a changed
// projection, type, codec or event type) each fed by one source that is
// not re-sequenced, with no TTL, timers, joins or lookups involving them;
// steps (To, KeyBy) added, removed or changed; sources added. Other
// changes are refused with the *TopologyChangedError of Attach, whose
// InPlace says why. partitions gives each source's partition count.
//
// The tables to build are built by the processors given WithBuilds.
func (p *Program) AttachEvolving(ctx context.Context, db *state.DB, partitions map[string]uint32) (*Evolution, error) {
	return p.AttachEvolvingChecked(ctx, db, partitions, nil)
}

// AttachEvolvingChecked is AttachEvolving that first checks, with starts,
// that the sources still hold every record each build needs: a build whose
// records the retention removed is refused with an error wrapping
// ErrBuildRetention, a new one before the store changes. A nil starts
// checks nothing (the build's first read does).
func (p *Program) AttachEvolvingChecked(ctx context.Context, db *state.DB, partitions map[string]uint32, starts StartsFunc) (*Evolution, error) {
	ev := &Evolution{db: db, prog: p}
	if err := db.DropRetired(ctx); err != nil { // rows of tables rebuilt before this start
		return nil, strerr.Errorf("strand: topology %q: %w", p.name, err)
	}
	start := map[string]bool{} // tables to start building: has old rows
	err := p.attach(db)
	var te *TopologyChangedError
	switch {
	case err == nil:
	case errors.As(err, &te) && te.Described:
		var drop []string
		var why string
		start, drop, why = p.planEvolution(te.Changes, partitions)
		if why != "" {
			te.InPlace = why
			return nil, te
		}
		for _, name := range slices.Sorted(keysOf(start)) {
			src := p.feeders(name)[0]
			if err := p.checkRetention(ctx, db, starts, name, src, partitions[src], true); err != nil {
				return nil, err
			}
		}
		if err := db.Attach(p.tables...); err != nil {
			return nil, strerr.Errorf("strand: topology %q: attach tables: %w", p.name, err)
		}
		for _, name := range drop {
			if err := db.DropTable(ctx, name, maxPartitions(partitions)); err != nil {
				return nil, strerr.Errorf("strand: topology %q: %w", p.name, err)
			}
			ev.dropped = append(ev.dropped, name)
		}
		for _, name := range slices.Sorted(keysOf(start)) {
			src := p.feeders(name)[0]
			alias := state.BuildSourceName(name, src)
			if _, err := db.BeginBuild(ctx, p.tableAttacher(name), start[name], partitions[src], []string{alias}, buildPrefixes(alias)); err != nil {
				return nil, strerr.Errorf("strand: topology %q: %w", p.name, err)
			}
		}
		if err := db.ReplaceTopology(p.fingerprint, p.description); err != nil {
			return nil, strerr.Errorf("strand: topology %q: %w", p.name, err)
		}
	default:
		return nil, err
	}
	builds, err := db.Builds()
	if err != nil {
		return nil, strerr.Errorf("strand: topology %q: %w", p.name, err)
	}
	for _, b := range builds {
		att := p.tableAttacher(b.Table)
		feeders := p.feeders(b.Table)
		if att == nil || len(feeders) != 1 {
			continue // not a table of this topology: dropped by the next change
		}
		if _, begun := start[b.Table]; !begun {
			if err := p.checkRetention(ctx, db, starts, b.Table, feeders[0], partitions[feeders[0]], false); err != nil {
				return nil, err
			}
			if err := db.ResumeBuild(att, b); err != nil {
				return nil, strerr.Errorf("strand: topology %q: %w", p.name, err)
			}
		}
		src := feeders[0]
		n := partitions[src]
		tb := &TableBuild{table: b.Table, att: att, source: src, alias: state.BuildSourceName(b.Table, src),
			hasOld: b.HasOld, parts: n, left: map[uint32]bool{},
			built: make([]atomic.Uint64, n), target: make([]atomic.Uint64, n)}
		for pt := range n {
			if _, ok, err := db.HandedOver(b.Table, pt); err != nil {
				return nil, strerr.Errorf("strand: topology %q: %w", p.name, err)
			} else if !ok {
				tb.left[pt] = true
			}
		}
		ev.builds = append(ev.builds, tb)
	}
	return ev, nil
}

func keysOf(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func maxPartitions(counts map[string]uint32) uint32 {
	n := uint32(0)
	for _, c := range counts {
		n = max(n, c)
	}
	return n
}

// buildPrefixes are the rows a build reader writes under its source name
// besides its checkpoint: parked records and origins.
func buildPrefixes(alias string) state.BuildPrefixes {
	return state.BuildPrefixes{
		state.FamilyParked:  rows.AppendString(nil, alias),
		state.FamilyOrigins: rows.OriginsPrefix(alias),
	}
}

// planEvolution decides how the changes are made in place: the tables to
// build (true: they have rows to serve meanwhile) and the tables to drop,
// or why they cannot be.
func (p *Program) planEvolution(changes []Change, partitions map[string]uint32) (build map[string]bool, drop []string, why string) {
	build = map[string]bool{}
	for _, c := range changes {
		if strings.HasPrefix(c.Subject, "source ") && c.Kind != ChangeAdded {
			return nil, nil, fmt.Sprintf("%s: a source's key type, classification or re-sequencing, or its removal, changes what every table it feeds holds", c)
		}
		for _, t := range c.Rebuild {
			build[t] = true
		}
	}
	have := map[string]bool{}
	for _, t := range p.tableNames {
		have[t] = true
	}
	stored := map[string]bool{}
	for _, c := range changes {
		if c.Kind == ChangeAdded && isTableSubject(c.Subject) {
			if name := tableOfSubject(c.Subject); have[name] {
				if _, ok := build[name]; !ok {
					build[name] = false
				}
			}
		}
		if c.Kind == ChangeRemoved && isTableSubject(c.Subject) {
			stored[tableOfSubject(c.Subject)] = true
		}
	}
	for name := range stored {
		if !have[name] {
			drop = append(drop, name)
		}
	}
	sort.Strings(drop)
	for _, name := range slices.Sorted(keysOf(build)) {
		if why := p.buildable(name); why != "" {
			return nil, nil, fmt.Sprintf("table %q cannot be built in the background: %s", name, why)
		}
	}
	return build, drop, ""
}

func isTableSubject(s string) bool {
	return strings.HasPrefix(s, "table \"") && strings.HasSuffix(s, "\"")
}

func tableOfSubject(s string) string {
	name := s[len("table "):]
	if u, err := strconv.Unquote(name); err == nil {
		return u
	}
	return name
}

// buildable says why table name cannot be built in the background ("":
// it can).
func (p *Program) buildable(name string) string {
	if p.tableAttacher(name) == nil {
		return "the topology has no such table"
	}
	feeders := p.feeders(name)
	switch {
	case len(feeders) == 0:
		return "no projection writes it"
	case len(feeders) > 1:
		return fmt.Sprintf("it is fed by %d sources (%s); a build reads one", len(feeders), quoteList(feeders))
	}
	src := p.sources[feeders[0]]
	switch {
	case src.reseq != nil:
		return fmt.Sprintf("its source %q is re-sequenced", src.name)
	case len(src.lookups) > 0:
		return fmt.Sprintf("the handlers of its source %q read tables (lookups read the tables' current rows, not the rows of the build's past)", src.name)
	case p.times[name] != nil:
		return "it has a TTL or timers"
	}
	if _, ok := p.hooks[name]; ok {
		return "a join is kept from it"
	}
	for in, hs := range p.hooks {
		for _, h := range hs {
			if h.derived == name {
				return fmt.Sprintf("it is the join of %q", in)
			}
		}
	}
	for _, s := range p.sources {
		for _, l := range s.lookups {
			if _, ok := l[name]; ok {
				return fmt.Sprintf("handlers of source %q read it", s.name)
			}
		}
	}
	return ""
}

// feeders returns the sources whose events project into table name.
func (p *Program) feeders(name string) []string {
	d := parseDescription(p.description)
	var out []string
	for sn, s := range d.sources {
		if slices.Contains(s.tablesOf(""), name) {
			out = append(out, sn)
		}
	}
	sort.Strings(out)
	return out
}

func (p *Program) tableAttacher(name string) state.Attacher {
	if i := slices.Index(p.tableNames, name); i >= 0 {
		return p.tables[i]
	}
	return nil
}

// BuildsOf returns the builds of source's tables not yet handed over in
// partition pt.
func (e *Evolution) BuildsOf(source string, pt uint32) []*TableBuild {
	if e == nil {
		return nil
	}
	var out []*TableBuild
	for _, tb := range e.builds {
		if tb.source != source {
			continue
		}
		tb.mu.Lock()
		left := tb.left[pt]
		tb.mu.Unlock()
		if left {
			out = append(out, tb)
		}
	}
	return out
}

// FinishReady finishes the builds whose every partition was handed over
// (a stop came between the last hand-over and the switch).
func (e *Evolution) FinishReady(ctx context.Context) error {
	if e == nil {
		return nil
	}
	for _, tb := range e.builds {
		if err := tb.finishIfDone(ctx, e.db); err != nil {
			return err
		}
	}
	return nil
}

func (tb *TableBuild) finishIfDone(ctx context.Context, db *state.DB) error {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.finished || len(tb.left) > 0 {
		return nil
	}
	if err := db.FinishBuild(ctx, tb.att, tb.parts); err != nil {
		return err
	}
	tb.finished = true
	return nil
}

// NewBuildTask makes the Task of the build reader of tb in a partition of
// its source: the Task of that partition under the build's own source
// name, applying the projections into the table only and publishing
// nothing.
func (p *Program) NewBuildTask(ctx context.Context, db *state.DB, tb *TableBuild, partition uint32, opts ...TaskOption) (*Task, error) {
	source, alias, table := tb.source, tb.alias, tb.table
	src, ok := p.sources[source]
	if !ok {
		return nil, fmt.Errorf("strand: topology %q has no source %q", p.name, source)
	}
	cp := *src
	cp.name, cp.sweeps = alias, nil
	t, err := p.newTask(ctx, db, &cp, partition, opts...)
	if err != nil {
		return nil, err
	}
	t.only = map[string]bool{table: true}
	// A key the main pipeline blocks behind a poison record (BlockPoisonedKey)
	// is not handed over before it is unblocked; the build must not block it
	// for an Unblock that only the main pipeline gets.
	t.passPoison = true
	t.replayMark = math.MaxUint64 // every output was published by the main pipeline
	return t, nil
}

// activeProjects returns the projections of ps the Task applies: during
// builds, the main pipeline's Task skips the tables being built, a build
// reader's applies its table only.
func activeProjects[E any](t *Task, ps []projector[E]) []projector[E] {
	if t.only == nil && len(t.building) == 0 {
		return ps
	}
	out := make([]projector[E], 0, len(ps))
	for _, p := range ps {
		n := p.tableName()
		if (t.only != nil && !t.only[n]) || t.building[n] {
			continue
		}
		out = append(out, p)
	}
	return out
}

// poisonPolicy is the policy a batch of the Task follows.
func (t *Task) poisonPolicy() stream.PoisonPolicy {
	if t.passPoison {
		return stream.PassPoison
	}
	return t.prog.poison
}

// ErrBuilding is wrapped by Attach of a store with a table being built in
// the background: open it as before (topology.Open without WithGroup,
// WithPartitions or WithInPlaceChanges(false)) until the build finishes,
// or reset it.
var ErrBuilding = errors.New("strand: a table of the store is being built in the background")

func refuseBuilds(db *state.DB, topology string) error {
	builds, err := db.Builds()
	if err != nil {
		return strerr.Errorf("strand: topology %q: %w", topology, err)
	}
	if len(builds) > 0 {
		names := make([]string, len(builds))
		for i, b := range builds {
			names[i] = b.Table
		}
		return fmt.Errorf("%w: table %s; open the store the way that started the build (topology.Open without WithGroup, WithPartitions or WithInPlaceChanges(false)) until it finishes (App.Builds), or reset it (strand reset)",
			ErrBuilding, quoteList(names))
	}
	return nil
}

// Table names the table being built.
func (tb *TableBuild) Table() string { return tb.table }

// Alias is the source name the build's readers keep their rows under.
func (tb *TableBuild) Alias() string { return tb.alias }

// Prefixes are the rows a build reader writes besides its checkpoint
// (state.DB.HandOver deletes them).
func (tb *TableBuild) Prefixes() state.BuildPrefixes { return buildPrefixes(tb.alias) }

// Progress records a partition's progress: the build reader's checkpoint
// and the main pipeline's.
func (tb *TableBuild) Progress(pt uint32, built, target uint64) {
	if int(pt) < len(tb.built) {
		tb.built[pt].Store(built)
		tb.target[pt].Store(target)
	}
}

// HandedOver notes that partition pt was handed over (state.DB.HandOver
// returned) and, when it was the last one, switches the table to its
// built rows (state.DB.FinishBuild).
func (tb *TableBuild) HandedOver(ctx context.Context, db *state.DB, pt uint32) error {
	tb.mu.Lock()
	delete(tb.left, pt)
	tb.mu.Unlock()
	return tb.finishIfDone(ctx, db)
}

// SetBuilding says whether the Task skips the projections into table
// (a table built in the background, not handed over yet in its
// partition). Call it between batches, from the Task's goroutine.
func (t *Task) SetBuilding(table string, on bool) {
	if !on {
		delete(t.building, table)
		return
	}
	if t.building == nil {
		t.building = map[string]bool{}
	}
	t.building[table] = true
}

// Now is the Task's clock.
func (t *Task) Now() time.Time { return t.clock() }

// Resumed reports whether the Task's partition had a checkpoint when the
// Task was made.
func (t *Task) Resumed() bool { return t.hasNext }
