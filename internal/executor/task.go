package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"

	"github.com/hashicorp/go-multierror"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/planner"
)

// Task processes the batches of one partition of one source of a Program,
// end to end: it plans a batch, executes it, and commits the table writes,
// the source checkpoint, the parked events and the dead letters in one
// state transaction. It is the single place where strand processes a batch:
// the processor runtime and the test driver both drive Tasks.
//
// # Failures
//
// A run that fails is run again record by record (runOne, isolate), so a
// failure stays with its event: the healthy records of the run are applied
// and the key stops at the failing record, which with every later event of
// the key in the batch is parked (written to state.FamilyParked in the same
// commit); other keys go on.
// Later batches park the key's new events behind them. A parked key is
// retried, in log order, by the first Process or Retry call after its
// backoff (Spec.Backoff, doubling up to Spec.MaxBackoff); when the
// Spec.MaxAttempts-th try of the same failing record fails too, that record
// alone is dead-lettered (ReasonExhausted) and the key goes on. Tries are counted
// per failing record: a retry that gets past it starts the count again.
//
// A failing run leaves no trace in state: whatever its folds did to the
// values they were handed (in place or not), every table value of the key
// is put back as it was before the run, so retries, later runs and the
// commit see exactly the events applied. A handler error
// wrapped with Permanent dead-letters its record at once and the key goes on.
// Parked events and attempts survive restarts: NewTask reloads them.
//
// Poison records (bad headers, unknown type tag, undecodable payload or
// key) are never applied and always dead-lettered; what happens to their
// key's later events is the program's PoisonPolicy.
//
// # Headers versus declarations
//
// The planner works from headers alone, but the consumer's declaration of
// a type wins where the two disagree: a type with a static fence is planned
// with that fence whatever the record's strand-props say, and every run is
// reduced with the declaration's algebra, not the header's kind. Only types
// declared with FenceBy are planned by each record's header ordering (the
// consumer cannot know it without decoding). Disagreements are counted in
// Result.Mismatches, not dead-lettered: during a rolling upgrade of the
// declarations the new consumer applies its own, consistent semantics to
// old and new records alike.
//
// # Concurrency
//
// A Task is not safe for concurrent use: one goroutine (the partition's
// pipeline) calls its methods. Inside Process, keys run concurrently on up
// to Spec.Workers goroutines; one key's runs always run one after another
// (head, body runs in plan order, tail), so handlers and projections of
// one key never race. Tasks of different partitions may run concurrently on
// one database.
type Task struct {
	prog      *Program
	src       *programSource
	db        *state.DB
	partition uint32
	next      uint64
	hasNext   bool
	// replayMark: records below it were processed before a reset; their
	// outputs are not published again (replaymark.go). 0: none.
	replayMark uint64
	// Builds (build.go): building names the tables whose projections the
	// Task skips (built by a build reader, not handed over yet); only,
	// when set, the tables whose projections it alone applies (a build
	// reader's Task). The pipeline goroutine changes building between
	// batches.
	building map[string]bool
	only     map[string]bool
	// passPoison: the Task passes poison records whatever the program's
	// policy (a build reader's: the main pipeline holds the keys).
	passPoison bool

	clock        func() time.Time
	log          *slog.Logger
	onDeadLetter func(deadletter.Letter)

	planner planner.Planner[string]
	parked  map[string]*parkedKey

	// re-sequencer (src.reseq != nil): keys loaded, keys with holds, held
	// records of the partition, the oldest hold, and the held records whose
	// payloads are still in memory (their rows may not be committed).
	seq        map[string]*seqState
	heldKeys   map[string]*seqState
	heldTotal  int
	oldestHold int64
	hasHold    bool
	seqFresh   bool   // no sequence row of the source partition predates the Task
	seqGen     uint64 // batches re-sequenced
	// delta rows of next numbers (resequencer.go): numbers [deltaFirst,
	// deltaNext) are written, and the keys they name (possibly repeated).
	deltaFirst, deltaNext uint64
	deltaDirty            []*seqState
	memHeld               []*holdEntry

	// outbox (outbox_stage.go; layouts in internal/rows/outbox.go): the next sequence number of the partition's
	// outbox messages, the origin stream they carry, and the highest
	// sequence applied per origin stream read (nil: none yet).
	outNext uint64
	origin  [8]byte
	origins map[[8]byte]uint64
	// replayed holds the replay origins applied (replay.go; nil: none).
	replayed map[[rows.OriginLen]byte]struct{}

	// pipelining (Submit): the batch whose commit may be in flight, and the
	// error that broke the Task when a commit failed.
	pending *Pending
	broken  error
	// due is the earliest deadline (timers.go) that may be due, in Unix
	// nanoseconds; MaxInt64: none.
	due atomic.Int64
	// dueParked: the last sweep left deadlines of parked keys behind.
	dueParked bool
	// wms: the stream time of each window table the Task keeps (windows.go).
	wms   []wmState
	stuck []stream.StuckRun // runs of the last abandoned batch (stuck.go)

	// scratch reused by Process
	in      []connector.Record
	fromRow []bool
	status  []status
	planRec []planner.Record[string]
	planIdx []int
}

// TaskOption configures NewTask.
type TaskOption func(*taskOptions)

type taskOptions struct {
	clock        func() time.Time
	log          *slog.Logger
	onDeadLetter func(deadletter.Letter)
}

// WithClock sets the clock used for retry backoff (tests).
func WithClock(now func() time.Time) TaskOption {
	return func(o *taskOptions) { o.clock = now }
}

// WithLogger sets the logger for key failures and dead letters (Warn
// level); the default is slog.Default(), nil discards.
func WithLogger(l *slog.Logger) TaskOption {
	return func(o *taskOptions) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		o.log = l
	}
}

// OnDeadLetter sets a function called, after each successful commit, with
// every dead letter that commit wrote. It runs on the Task's goroutine and
// must not block for long. It is a notification: the durable record is the
// dead-letter row the commit wrote, which a runtime publishes.
func OnDeadLetter(fn func(deadletter.Letter)) TaskOption {
	return func(o *taskOptions) { o.onDeadLetter = fn }
}

// NewTask makes the Task of one partition of source. It reads the
// partition's checkpoint and parked events from db. Call Program.Attach on
// db first.
func (p *Program) NewTask(ctx context.Context, db *state.DB, source string, partition uint32, opts ...TaskOption) (*Task, error) {
	src, ok := p.sources[source]
	if !ok {
		return nil, fmt.Errorf("strand: topology %q has no source %q", p.name, source)
	}
	return p.newTask(ctx, db, src, partition, opts...)
}

func (p *Program) newTask(ctx context.Context, db *state.DB, src *programSource, partition uint32, opts ...TaskOption) (*Task, error) {
	source := src.name
	o := taskOptions{clock: time.Now, log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	t := &Task{
		prog: p, src: src, db: db, partition: partition,
		clock: o.clock, log: o.log, onDeadLetter: o.onDeadLetter,
		parked: map[string]*parkedKey{},
		seq:    map[string]*seqState{}, heldKeys: map[string]*seqState{},
	}
	next, ok, err := db.Checkpoint(source, partition)
	if err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: read checkpoint: %w", source, partition, err)
	}
	t.next, t.hasNext = next, ok
	if err := t.loadReplayMark(); err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: read replay mark: %w", source, partition, err)
	}
	if err := t.loadParked(ctx); err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: load parked events: %w", source, partition, err)
	}
	if err := t.loadHolds(ctx); err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: load held records: %w", source, partition, err)
	}
	if err := t.loadOutbox(ctx); err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: load outbox: %w", source, partition, err)
	}
	if err := t.loadDue(ctx); err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: %w", source, partition, err)
	}
	return t, nil
}

// Source returns the task's source name.
func (t *Task) Source() string { return t.src.name }

// Partition returns the task's partition.
func (t *Task) Partition() uint32 { return t.partition }

// Next returns the offset of the first record not yet committed: where to
// read from. It is 0 for a partition never committed. After Submit it
// counts the submitted batch as if committed (the next batch to submit
// starts there), whether or not its commit has finished.
func (t *Task) Next() uint64 { return t.next }

// Result is what one Process or Retry call did. Offsets are record offsets
// of the task's partition.
type Result struct {
	// Next is the checkpoint after the commit: the next offset to read.
	Next uint64
	// Records counts the records looked at: the batch's records that were
	// not already committed, plus the parked ones retried.
	Records int
	// Applied lists, in ascending order, the offsets of the records that
	// every handler of their type applied in this commit.
	Applied []uint64
	// Held lists, in ascending order, the offsets of the records parked
	// by this commit, not applied: behind a failure, a key being retried
	// later, or a poison record under BlockPoisonedKey. They stay parked.
	Held []uint64
	// Skipped lists the offsets of records whose type tag the program
	// skips.
	Skipped []uint64
	// Stale counts batch records below the checkpoint, ignored as already
	// committed.
	Stale int
	// Mismatches counts records whose strand-props header disagreed with
	// the consumer's declaration of their type (another static fence, or
	// another algebra kind). They were planned and reduced by the
	// declaration, as documented on Task; the count shows producers that
	// run another version of the declarations.
	Mismatches int
	// DeadLetters lists the records dead-lettered by this commit.
	DeadLetters []deadletter.Letter
	// Resequenced lists, in ascending order, the offsets of the records
	// the re-sequencer held by this commit (they wait in its rows for
	// their predecessors); LetThrough counts the records it let through
	// from its holds (applied, parked or dead-lettered behind a gap); Duplicates
	// counts the records it found already applied or held, never applied;
	// Gaps lists the gaps it gave up.
	Resequenced []uint64
	LetThrough  int
	Duplicates  int
	Gaps        []stream.GapNotice
	// Readmitted counts the replayed events (strand dlq replay) the
	// re-sequencer let pass at their key's current position.
	Readmitted int
	// Emitted counts the outbox messages (To, KeyBy) this commit wrote;
	// Redelivered counts the records dropped because they are outbox
	// messages applied before (published twice).
	Emitted, Redelivered int
	// Expired counts the rows of TTL tables this commit removed; Fired
	// the timers whose handlers it applied; TimerFailures the failed tries
	// of timer handlers (timer_failure.go) and of windows' final results.
	Expired, Fired, TimerFailures int
	// Late counts the late events of window tables this commit counted;
	// WindowsClosed the windows it closed (windows.go).
	Late, WindowsClosed int
	// Swept: the commit swept the deadlines (its Task's NextRetry moved).
	Swept bool
	// Outbox holds the outbox messages the commit wrote, in seq order, for
	// the partition's message outbox (it sends them from memory).
	Outbox []OutboxRow
	// Failures lists the keys whose processing stopped at a failing run.
	Failures []Failure
}

// Err returns the failures' errors aggregated in a *multierror.Error, or
// nil when no key failed.
func (r Result) Err() error {
	var merr *multierror.Error
	for _, f := range r.Failures {
		merr = multierror.Append(merr, f)
	}
	return merr.ErrorOrNil()
}

// Failure is one key whose processing stopped at a failing run.
type Failure struct {
	// Key is the key's bytes.
	Key []byte
	// Tag is the type tag of the failing run.
	Tag planner.Tag
	// Offsets are the failing run's records that were not applied.
	Offsets []uint64
	// Attempt is the try that failed (1 for the first).
	Attempt int
	// Action says what was done: "parked", "blocked" (poison, waits for
	// Unblock) or "dead-lettered".
	Action string
	// Err is the handler's error.
	Err error
}

// Error describes the failure with key, tag, offsets and action.
func (f Failure) Error() string {
	return fmt.Sprintf("key %q type tag %d offsets %v (attempt %d, %s): %v", f.Key, f.Tag, f.Offsets, f.Attempt, f.Action, f.Err)
}

// Unwrap returns the handler's error.
func (f Failure) Unwrap() error { return f.Err }

type status uint8

const (
	statusPending status = iota
	statusApplied
	statusDead
	statusHeld
	statusSkipped
	statusStale
	// statusDuplicate: an outbox message applied before (outbox_stage.go; layouts in internal/rows/outbox.go).
	statusDuplicate
)

// batch is the executor's view of one Process call.
type batch struct {
	t       *Task
	ctx     context.Context
	tx      *state.Txn
	records []connector.Record
	status  []status
	attempt []int // per record: the try this is (1 + the key's failed tries)
	fromRow []bool
	due     map[string]bool // parked keys retried by this batch
	poison  stream.PoisonPolicy
	notes   []seqNote // re-sequencer notes per record; nil when off
	// emits holds, per record, what the source's emitting handlers (To,
	// KeyBy) publish if the record is applied; nil when it has none.
	emits [][]emitted
	// origins are the highest outbox sequence numbers per origin stream
	// among the batch's records (nil: none carried one); outNext is the
	// partition's next outbox sequence number after the batch (0: no
	// outbox rows). Both are taken over by the Task after the commit.
	origins map[[8]byte]uint64
	outNext uint64
	// replays are the replay origins (replay.go) the batch applies.
	replays [][rows.OriginLen]byte
	// replayMark is the Task's (replaymark.go): nothing is published for
	// records below it.
	replayMark uint64

	mismatches int       // written by prepare only
	now        time.Time // the clock when the batch was staged (timers.go)
	// expired: keys whose row the sweep of one table expired (timers.go)
	expired map[string]bool
	// timerEmits: what the sweep's timer handlers publish (timers.go)
	timerEmits []emitted
	// timerStops: keys the sweep leaves parked at a failing timer; their
	// records wait (timer_failure.go). timerSeen: keys whose due timer the
	// sweep tried; timersGone: keys whose timer an expiry removed.
	timerStops map[string]timerStop
	// last: the offset of the batch's last new record, if any.
	last struct {
		offset uint64
		ok     bool
	}
	timerSeen, timersGone map[string]bool
	// win: the batch's view of the window tables (windows.go).
	win []winBatch

	mu       sync.Mutex
	dead     []deadEntry
	failures []failureEntry
	fatal    error       // guarded by mu
	stop     atomic.Bool // set with fatal: workers stop taking keys
	// abandoned: a handler did not return before ctx was done; the
	// workers may still run, so the Txn is discarded when they end.
	abandoned bool

	// What each worker runs now, for the report of a batch abandoned
	// because a handler did not return (stuck.go): keys are the plan's
	// keys, active one slot per worker.
	keys   []planner.KeyPlan[string]
	active []activeRun
	start  time.Time
}

type deadEntry struct {
	idx    int
	reason deadletter.Reason
	err    error
}

type failureEntry struct {
	key    string
	tag    planner.Tag
	recs   []int
	at     int // the record that failed (parked failures)
	err    error
	action string
}

func (b *batch) deadLetter(i int, reason deadletter.Reason, err error) {
	b.status[i] = statusDead
	b.mu.Lock()
	b.dead = append(b.dead, deadEntry{i, reason, err})
	b.mu.Unlock()
}

func (b *batch) fail(f failureEntry) {
	b.mu.Lock()
	b.failures = append(b.failures, f)
	b.mu.Unlock()
}

func (b *batch) setFatal(err error) {
	b.mu.Lock()
	if b.fatal == nil {
		b.fatal = err
	}
	b.mu.Unlock()
	b.stop.Store(true)
}

// runCtx is what a run needs: one key of one batch.
type runCtx struct {
	ctx       context.Context
	tx        *state.Txn
	partition uint32
	key       []byte
	b         *batch
	slot      *activeRun   // the worker's: what it runs now (stuck.go)
	scope     *lookupScope // the key's lookups (lookup.go); nil: none
	win       *runWin      // the run's unreduced events, for window aggregations (windows.go)
}

// Process processes one batch of the task's partition, records in offset
// order as a PartitionReader returns them, and commits the result with the
// checkpoint after the batch's last record. It first retries, ahead of the
// batch, every parked key whose backoff has passed.
//
// Records below the checkpoint are ignored as already committed (counted in
// Result.Stale). Handler failures do not make Process fail: they are in
// Result.Failures and their events are parked in the same commit. Process
// returns an error, and commits nothing, only when the store fails or ctx
// is done; then calling Process again with the same records is safe (sinks
// may see some events again, tables never).
//
// Cancelling ctx abandons the batch; to finish an in-flight batch on
// shutdown, pass a context that stays alive until Process returns.
//
// If a batch was given to Submit before, Process first waits for its
// commit; if that commit failed, Process returns an error wrapping
// ErrTaskBroken and does nothing.
func (t *Task) Process(ctx context.Context, records []connector.Record) (Result, error) {
	if err := t.finishPending(); err != nil {
		return Result{Next: t.next}, err
	}
	return t.process(ctx, records)
}

// ErrTaskBroken is wrapped by every call to a Task after a commit of a
// batch given to Submit failed: later batches may have been executed on top
// of the failed one, so none of them is committed and the Task cannot go
// on. Make a new Task with NewTask, which resumes from the committed
// checkpoint.
var ErrTaskBroken = errors.New("strand: task stopped after a failed commit")

// Pending is a batch given to Task.Submit: executed, with its commit
// possibly still in flight.
type Pending struct {
	t        *Task
	done     chan struct{}
	res      Result
	err      error
	reported bool
	txn      *state.Txn
}

// Wait waits for the batch's commit and returns its Result, as Process
// would have; after a failed commit it returns an error wrapping
// ErrTaskBroken. It runs the batch's OnDeadLetter callbacks and failure
// logs (once, on the first call that finds it committed; a later Submit or
// Process that waits for the commit runs them if Wait has not). Call it
// from the Task's goroutine.
func (p *Pending) Wait() (Result, error) {
	<-p.done
	if p.err != nil {
		return Result{Next: p.res.Next}, p.err
	}
	p.report()
	return p.res, nil
}

func (p *Pending) report() {
	if p.reported {
		return
	}
	p.reported = true
	p.t.report(&p.res)
}

// finishPending waits for the pending commit of Submit, if any, and breaks
// the Task if it failed.
func (t *Task) finishPending() error {
	if t.broken != nil {
		return t.broken
	}
	p := t.pending
	if p == nil {
		return nil
	}
	<-p.done
	t.pending = nil
	if p.err != nil {
		t.broken = p.err
		return p.err
	}
	p.report()
	return nil
}

// Submit processes one batch like Process, but returns once the batch is
// executed and its commit has started, so that the caller can submit the
// next batch while this one commits (docs/design.md §3: the commit of one batch
// overlaps the work of the next). Pending.Wait returns the batch's Result.
//
// Batches commit in submission order, each in its own atomic commit with
// its checkpoint, exactly as with Process. A batch reads the table writes
// of the batch before it, whose commit may still be in flight, and its own
// commit waits for that one: if a commit fails, no later batch commits, and
// the Task is broken (every later call returns an error wrapping
// ErrTaskBroken; make a new Task). Submit itself waits for the previous
// batch's commit after executing its batch and before starting its commit,
// so at most one commit is in flight.
//
// Next, NextRetry and Parked count submitted batches as committed. Process,
// Retry and Unblock wait for the pending commit first. If Submit returns
// an error, nothing of its batch was committed; the pending commit of the
// previous batch, if any, goes on (its Wait says how it ended).
func (t *Task) Submit(ctx context.Context, records []connector.Record) (*Pending, error) {
	if t.broken != nil {
		return nil, t.broken
	}
	if t.pending != nil && t.deadlineDue(t.clock()) {
		// A sweep reads the committed deadlines: none may be in flight.
		if err := t.finishPending(); err != nil {
			return nil, err
		}
	}
	prev := t.pending
	var prevTx *state.Txn
	if prev != nil {
		prevTx = prev.tx()
	}
	st, err := t.stage(ctx, records, prevTx)
	if err != nil {
		return nil, err
	}
	p := &Pending{t: t, done: make(chan struct{})}
	if st == nil { // nothing to do
		if err := t.finishPending(); err != nil {
			return nil, err
		}
		p.res = Result{Next: t.next}
		close(p.done)
		return p, nil
	}
	// The previous commit must have succeeded before this one starts:
	// this batch was built on it.
	if err := t.finishPending(); err != nil {
		st.b.tx.Discard()
		if st.seq != nil {
			st.seq.rollback()
		}
		return nil, err
	}
	t.applyStaged(st)
	p.res = st.res
	tx := st.b.tx
	p.txn = tx
	t.pending = p
	go func() {
		if err := tx.Commit(ctx); err != nil {
			p.err = fmt.Errorf("%w: source %q partition %d: commit of the batch ending at offset %d: %w",
				ErrTaskBroken, t.src.name, t.partition, st.res.Next, err)
		}
		close(p.done)
	}()
	return p, nil
}

// tx returns the transaction of a pending batch while its commit may be
// in flight, or nil once it is done.
func (p *Pending) tx() *state.Txn {
	select {
	case <-p.done:
		return nil
	default:
		return p.txn
	}
}

// Retry retries every parked key whose backoff has passed and commits the
// result; it reads no new records and leaves the checkpoint alone. It does
// nothing when no key is due. Call it when NextRetry comes and no batch is
// flowing.
func (t *Task) Retry(ctx context.Context) (Result, error) {
	if err := t.finishPending(); err != nil {
		return Result{Next: t.next}, err
	}
	return t.process(ctx, nil)
}

// NextRetry returns when the earliest parked key becomes due, and false
// when no key waits for a retry (keys blocked by BlockPoisonedKey wait for
// Unblock, not for time).
//
// With the re-sequencer on it is also when the earliest gap times out
// (Task.HeldStats): Retry gives it up.
func (t *Task) NextRetry() (time.Time, bool) {
	at, found := t.nextGapTimeout()
	if d, ok := t.nextDeadline(); ok && (!found || d.Before(at)) {
		at, found = d, true
	}
	for _, pk := range t.parked {
		if pk.manual {
			continue
		}
		if !found || pk.next.Before(at) {
			at, found = pk.next, true
		}
	}
	return at, found
}

// Parked returns how many keys are parked and how many records they hold.
func (t *Task) Parked() (keys, records int) {
	for _, pk := range t.parked {
		keys++
		records += len(pk.records)
	}
	return keys, records
}

// Unblock makes a parked key due now, clearing its attempts: the next
// Process or Retry tries its events again. It is how a key blocked behind a
// poison event (BlockPoisonedKey) goes on. It commits at once; unblocking a
// key that is not parked does nothing.
func (t *Task) Unblock(ctx context.Context, key []byte) error {
	if err := t.finishPending(); err != nil {
		return err
	}
	pk, ok := t.parked[string(key)]
	if !ok {
		return nil
	}
	upd := *pk
	upd.manual, upd.attempts, upd.next = false, 0, t.clock()
	tx := t.db.NewTxn()
	tx.PutRow(state.FamilyParked, t.partition, t.parkedKeyRow(pk.key), upd.metaValue())
	if err := tx.Commit(ctx); err != nil {
		return strerr.Errorf("strand: source %q partition %d: unblock key %q: %w", t.src.name, t.partition, key, err)
	}
	*pk = upd
	t.releasedTimer(pk)
	return nil
}

func (t *Task) process(ctx context.Context, records []connector.Record) (Result, error) {
	st, err := t.stage(ctx, records, nil)
	if err != nil {
		return Result{Next: t.next}, err
	}
	if st == nil {
		return Result{Next: t.next}, nil
	}
	if err := st.b.tx.Commit(ctx); err != nil {
		if st.seq != nil {
			st.seq.rollback() // the same records may be processed again
		}
		return Result{Next: t.next}, strerr.Errorf("strand: source %q partition %d: commit: %w", t.src.name, t.partition, err)
	}
	t.applyStaged(st)
	t.report(&st.res)
	return st.res, nil
}

// staged is a batch executed and written into its transaction, not yet
// committed.
type staged struct {
	b       *batch
	res     Result
	changes map[string]*parkedKey
	hasLast bool
	seq     *seqBatch // nil when the re-sequencer is off
}

// stage runs a batch up to its commit: input, plan, execute, write the outcome, with
// the transaction following prev (nil: none). It returns nil when there is
// nothing to do. On error the transaction is discarded.
func (t *Task) stage(ctx context.Context, records []connector.Record, prev *state.Txn) (st *staged, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.classifyForeign(records) // before anything reads their headers
	now := t.clock()
	res := Result{Next: t.next}

	// Input: the parked events of due keys first (they are older than the
	// batch), then the batch.
	var due []*parkedKey
	for _, pk := range t.parked {
		if !pk.manual && !pk.next.After(now) {
			due = append(due, pk)
		}
	}
	slices.SortFunc(due, func(a, b *parkedKey) int { return bytes.Compare(a.key, b.key) })
	gapDue := false
	if at, ok := t.nextGapTimeout(); ok && !at.After(now) {
		gapDue = true
	}
	// A sweep reads committed deadlines: never with a commit in flight
	// (Submit settles it first when a deadline is due).
	sweepDue := prev == nil && t.deadlineDue(now)
	due = t.timerDue(due, prev == nil, &sweepDue) // a key parked at its timer: the timer first
	if len(due) == 0 && len(records) == 0 && !gapDue && !sweepDue {
		return nil, nil
	}
	reseq := t.src.reseq != nil
	in := t.in[:0]
	fromRow := t.fromRow[:0]
	attempt := make([]int, 0, len(records))
	for _, pk := range due {
		recs := pk.records
		if reseq {
			recs = t.canonicalParked(recs)
		}
		for _, r := range recs {
			in = append(in, r)
			fromRow = append(fromRow, true)
			attempt = append(attempt, pk.attemptOf(r.Offset))
		}
	}
	nParked := len(in)
	last, hasLast := uint64(0), false
	var sb *seqBatch
	var tx *state.Txn
	if reseq {
		tx = t.db.NewTxnAfter(prev)
		notes := make([]seqNote, len(in), len(in)+len(records))
		t.seqGen++
		in, fromRow, attempt = slices.Grow(in, len(records)), slices.Grow(fromRow, len(records)), slices.Grow(attempt, len(records))
		sb = &seqBatch{t: t, tx: tx, now: now, gen: t.seqGen, heldNow: t.heldTotal,
			in: in, fromRow: fromRow, attempt: attempt, notes: notes}
		if err := t.resequence(sb, records); err != nil {
			sb.rollback()
			tx.Discard()
			return nil, strerr.Errorf("strand: source %q partition %d: re-sequence: %w", t.src.name, t.partition, err)
		}
		in, fromRow, attempt = sb.in, sb.fromRow, sb.attempt
		if n := len(records); n > 0 {
			last, hasLast = records[n-1].Offset, true
		}
	} else {
		for i := range records {
			in = append(in, records[i])
			fromRow = append(fromRow, false)
			attempt = append(attempt, 1)
			last, hasLast = records[i].Offset, true
		}
	}
	t.in, t.fromRow = in, fromRow

	status := t.status[:0]
	for range in {
		status = append(status, statusPending)
	}
	t.status = status
	if tx == nil {
		tx = t.db.NewTxnAfter(prev)
	}
	b := &batch{
		t: t, ctx: ctx, tx: tx, records: in, status: status,
		attempt: attempt, fromRow: fromRow, due: make(map[string]bool, len(due)), poison: t.poisonPolicy(),
		now:        now,
		replayMark: t.replayMark,
	}
	if sb != nil {
		b.notes = sb.notes
	}
	b.last.offset, b.last.ok = last, hasLast
	if t.src.emits {
		b.emits = make([][]emitted, len(in))
	}
	for _, pk := range due {
		b.due[string(pk.key)] = true
	}
	defer func() {
		if err != nil && !b.abandoned {
			b.tx.Discard()
			if sb != nil {
				sb.rollback()
			}
		}
		if err != nil && sweepDue {
			t.due.Store(math.MinInt64) // sweep again: what this one found is not committed
		}
	}()

	t.windowsStart(b)
	if sweepDue {
		if err := t.sweep(b, &res); err != nil {
			return nil, strerr.Errorf("strand: source %q partition %d: %w", t.src.name, t.partition, err)
		}
		res.Swept = true
	}
	t.windowsPrepass(b)
	t.prepare(b, nParked)
	if err := t.executeOrAbandon(b, sb); err != nil {
		return nil, err
	}

	if b.fatal != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: batch abandoned: %w", t.src.name, t.partition, b.fatal)
	}
	if err := ctx.Err(); err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: batch abandoned: %w", t.src.name, t.partition, err)
	}

	// Write parked rows, dead letters and the checkpoint, and work out the
	// new parked state; apply it to memory only after the commit.
	t.windowsFinish(b, &res)
	changes := t.writeOutcome(b, now, &res)
	res.Mismatches = b.mismatches
	if sb != nil {
		res.Resequenced = slices.Clone(sb.heldOffs)
		slices.Sort(res.Resequenced)
		res.LetThrough, res.Duplicates, res.Gaps, res.Readmitted = sb.letThrough, sb.dups, sb.gaps, sb.readmitted
		res.Records += len(sb.heldOffs) + sb.dropped
		if sb.letThrough > 0 {
			slices.Sort(res.Applied)
			slices.Sort(res.Held)
		}
	}
	if hasLast && (!t.hasNext || last+1 > t.next) {
		res.Next = last + 1
		b.tx.SetCheckpoint(t.src.name, t.partition, res.Next)
	}
	clear(t.in) // drop payload references
	return &staged{b: b, res: res, changes: changes, hasLast: hasLast, seq: sb}, nil
}

// applyStaged applies a committed (or, with Submit, committing) batch to
// the Task's memory: checkpoint and parked keys.
func (t *Task) applyStaged(st *staged) {
	if st.hasLast && st.res.Next != t.next {
		t.next, t.hasNext = st.res.Next, true
	}
	for k, pk := range st.changes {
		if pk == nil {
			if t.dueParked {
				t.due.Store(math.MinInt64) // its deadlines may go now
			}
			delete(t.parked, k)
		} else {
			t.parked[k] = pk
		}
	}
	if st.seq != nil {
		t.applySeq(st.seq)
	}
	t.applyOutbox(st.b)
	t.windowsApply(st.b)
}

// report logs a committed batch's failures and dead letters and calls
// OnDeadLetter.
func (t *Task) report(res *Result) {
	for _, f := range res.Failures {
		t.log.Warn("strand: key stopped at a failing run",
			slog.String("source", t.src.name), slog.Uint64("partition", uint64(t.partition)),
			slog.String("key", fmt.Sprintf("%q", f.Key)), slog.Uint64("tag", uint64(f.Tag)),
			slog.Any("offsets", f.Offsets), slog.Int("attempt", f.Attempt), slog.String("action", f.Action),
			slog.Any("err", f.Err))
	}
	for _, d := range res.DeadLetters {
		t.log.Warn("strand: dead letter",
			slog.String("source", d.Source), slog.Uint64("partition", uint64(d.Partition)),
			slog.Uint64("offset", d.Offset), slog.String("reason", d.Reason.String()), slog.Any("err", d.Err))
		if t.onDeadLetter != nil {
			t.onDeadLetter(d)
		}
	}
	if res.Readmitted > 0 {
		t.log.Info("strand: replayed events re-admitted at their keys' current positions (their strand-seq is the producer's, not a new one)",
			slog.String("source", t.src.name), slog.Uint64("partition", uint64(t.partition)), slog.Int("events", res.Readmitted))
	}
	for _, g := range res.Gaps {
		t.log.Warn("stream: sequence gap given up",
			slog.String("source", g.Source), slog.Uint64("partition", uint64(g.Partition)),
			slog.String("key", fmt.Sprintf("%q", g.Key)), slog.Uint64("from", g.From), slog.Uint64("to", g.To),
			slog.Duration("age", g.Age), slog.String("cause", g.Cause.String()), slog.String("policy", g.Policy.String()))
		if fn := t.src.reseq.OnGap; fn != nil {
			fn(g)
		}
	}
}

// prepare routes every input record: stale, poison, skipped, held behind a
// parked key, or planned. It fills t.planRec / t.planIdx.
func (t *Task) prepare(b *batch, nParked int) {
	planRec, planIdx := t.planRec[:0], t.planIdx[:0]
	var poisoned map[string]bool // BlockPoisonedKey: keys behind a poison record
	for i := range b.records {
		r := &b.records[i]
		letThrough := false
		if b.notes != nil {
			switch n := b.notes[i]; n.kind {
			case noteDead:
				b.deadLetter(i, n.reason, n.err)
				continue
			case noteLetThrough:
				letThrough = true
			}
		}
		if i >= nParked && !letThrough && t.hasNext && r.Offset < t.next {
			b.status[i] = statusStale
			continue
		}
		if r.HeaderErr != nil {
			b.deadLetter(i, headerErrReason(r.HeaderErr), r.HeaderErr)
			continue
		}
		if r.Headers.Origin != nil && !b.fromRow[i] && b.duplicate(r) {
			b.status[i] = statusDuplicate
			continue
		}
		if err := r.Headers.Validate(); err != nil {
			b.deadLetter(i, deadletter.ReasonBadHeaders, err)
			continue
		}
		key := unsafe.String(unsafe.SliceData(r.Headers.Key), len(r.Headers.Key))
		rt, known := t.src.routes[r.Headers.Tag]
		if !known && t.src.skip[r.Headers.Tag] {
			b.status[i] = statusSkipped
			continue
		}
		if i >= nParked && !b.due[key] {
			if _, ok := t.parked[key]; ok {
				b.status[i] = statusHeld
				continue
			}
		}
		if _, ok := b.timerStops[key]; ok { // behind its failing timer
			b.status[i] = statusHeld
			continue
		}
		if poisoned[key] {
			b.status[i] = statusHeld
			continue
		}
		if !known {
			b.deadLetter(i, deadletter.ReasonUnknownType, fmt.Errorf("%w: type tag %d", ErrUnknownType, r.Headers.Tag))
			if b.poison == stream.BlockPoisonedKey {
				if poisoned == nil {
					poisoned = map[string]bool{}
				}
				poisoned[key] = true
				b.fail(failureEntry{key: key, tag: r.Headers.Tag, err: ErrUnknownType, action: "blocked"})
			}
			continue
		}
		o := rt.fence
		if o == 0 {
			o = r.Headers.Ordering
		}
		if o != r.Headers.Ordering || rt.kind != r.Headers.Algebra {
			b.mismatches++
		}
		planRec = append(planRec, planner.Record[string]{Key: key, Tag: r.Headers.Tag, Ordering: o})
		planIdx = append(planIdx, i)
	}
	t.planRec, t.planIdx = planRec, planIdx
}

// ErrUnknownType is wrapped by the error of a record whose type tag has no
// handler in the topology (and is not skipped).
var ErrUnknownType = errors.New("strand: unknown type tag")

// execute plans the routed records and runs the keys on the worker pool.
func (t *Task) execute(b *batch) {
	if len(t.planRec) == 0 {
		return
	}
	plan := t.planner.Plan(t.planRec)
	keys := plan.Keys()
	workers := min(t.prog.workers, len(keys))
	b.keys, b.active = keys, make([]activeRun, max(workers, 1))
	if workers <= 1 {
		var scratch []int
		rc := &runCtx{slot: &b.active[0]}
		for n, k := range keys {
			b.active[0].key.Store(int32(n + 1))
			scratch = t.runKey(b, plan, k, scratch, rc)
			b.active[0].key.Store(0)
			if b.ctx.Err() != nil {
				return
			}
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var scratch []int
			rc := &runCtx{slot: &b.active[w]} // one per worker: the handlers' interface calls make it escape
			for {
				n := int(next.Add(1) - 1)
				if n >= len(keys) || b.ctx.Err() != nil {
					return
				}
				b.active[w].key.Store(int32(n + 1))
				scratch = t.runKey(b, plan, keys[n], scratch, rc)
				b.active[w].key.Store(0)
				if b.stop.Load() {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// runKey runs one key's segments in order and, inside a segment, the head
// run, the body runs one after another (in plan order: a key's projections
// never race), then the tail run. When a run stops the key, every record of
// the key not yet applied or dead-lettered is held. rc is the worker's
// run context, reset for the key.
func (t *Task) runKey(b *batch, plan *planner.Plan[string], k planner.KeyPlan[string], scratch []int, rc *runCtx) []int {
	segs := plan.Segments(k)
	*rc = runCtx{slot: rc.slot}
	run := func(r planner.Run) bool {
		recs := scratch[:0]
		for _, pi := range plan.Records(r) {
			recs = append(recs, t.planIdx[pi])
		}
		scratch = recs
		if rc.b == nil {
			*rc = runCtx{ctx: b.ctx, tx: b.tx, partition: t.partition, key: b.records[recs[0]].Headers.Key, b: b, slot: rc.slot}
			t.scopeLookups(rc)
		}
		return t.runOne(b, rc, r.Tag(), recs)
	}
	stopped := false
segments:
	for _, seg := range segs {
		if h, ok := plan.Head(seg); ok && !run(h) {
			stopped = true
			break
		}
		for _, r := range plan.Body(seg) {
			if !run(r) {
				stopped = true
				break segments
			}
		}
		if tl, ok := plan.Tail(seg); ok && !run(tl) {
			stopped = true
			break
		}
	}
	if stopped {
		hold := func(r planner.Run) {
			for _, pi := range plan.Records(r) {
				if i := t.planIdx[pi]; b.status[i] == statusPending {
					b.status[i] = statusHeld
				}
			}
		}
		for _, seg := range segs {
			if h, ok := plan.Head(seg); ok {
				hold(h)
			}
			for _, r := range plan.Body(seg) {
				hold(r)
			}
			if tl, ok := plan.Tail(seg); ok {
				hold(tl)
			}
		}
	}
	return scratch
}

// runOne runs one run and deals with its failure; it returns false when
// the key must stop.
//
// A run of several records that fails is run again record by record
// (isolate), so that a failure stays with its event: the healthy records
// are applied, the failing one alone is parked or dead-lettered with its
// own error, and tables and dead letters do not depend on how the log was
// batched (docs/design.md §8).
func (t *Task) runOne(b *batch, rc *runCtx, tag planner.Tag, recs []int) bool {
	rt := t.src.routes[tag]
	if rc.slot != nil {
		rc.slot.tag.Store(uint32(tag))
	}
	if rc.scope != nil {
		rc.scope.tag = tag
	}
	res := rt.runner.run(rc, recs)
	if res.end == runFailed && b.ctx.Err() == nil {
		var pending []int
		for _, i := range recs {
			if b.status[i] == statusPending {
				pending = append(pending, i)
			}
		}
		if len(pending) > 1 {
			return t.isolate(b, rc, tag, rt, pending)
		}
	}
	return t.endRun(b, rc, tag, recs, res)
}

// isolate runs the pending records of a failed run one at a time, in log
// order. A record that fails for good (Permanent, retries exhausted) is
// dead-lettered alone and the others go on; one that fails otherwise stops
// the key there, and it and the rest are parked. The records applied so far
// stay applied: a failed single-record run leaves no trace (runner.run
// reverts it).
func (t *Task) isolate(b *batch, rc *runCtx, tag planner.Tag, rt *route, pending []int) bool {
	one := make([]int, 1)
	for n, i := range pending {
		if b.status[i] != statusPending {
			continue
		}
		one[0] = i
		res := rt.runner.run(rc, one)
		switch {
		case res.end == runOK:
			continue
		case res.end == runFailed && b.ctx.Err() == nil && t.fatalFor(b, i, res.err):
			// Dead-lettered alone; the run goes on.
			t.endRun(b, rc, tag, one, res)
			continue
		}
		return t.endRun(b, rc, tag, pending[n:], res)
	}
	return true
}

// fatalFor reports whether a run of record i that failed with err ends in
// a dead letter (Permanent, or the record's last allowed try).
func (t *Task) fatalFor(b *batch, i int, err error) bool {
	return errors.Is(err, stream.ErrPermanent) || b.attempt[i] >= t.prog.maxAttempts
}

// endRun deals with how a run of recs ended; it returns false when the key
// must stop.
func (t *Task) endRun(b *batch, rc *runCtx, tag planner.Tag, recs []int, res runResult) bool {
	err := res.err
	switch res.end {
	case runOK:
		return true
	case runFatal:
		b.setFatal(err)
		return false
	}
	if b.ctx.Err() != nil {
		b.setFatal(b.ctx.Err())
		return false
	}
	key := string(rc.key)
	var pending []int
	for _, i := range recs {
		if b.status[i] == statusPending {
			pending = append(pending, i)
		}
	}
	switch res.end {
	case runBadKey:
		for _, i := range pending {
			b.deadLetter(i, deadletter.ReasonBadKey, errors.Unwrap(err))
		}
		if b.poison == stream.BlockPoisonedKey {
			b.fail(failureEntry{key: key, tag: tag, recs: pending, err: err, action: "blocked"})
			return false
		}
		return true
	case runBlocked:
		b.fail(failureEntry{key: key, tag: tag, recs: pending, err: err, action: "blocked"})
		return false
	}
	// The run's try: how many times in a row the key has stopped at the
	// record that failed, this time included.
	at := res.at
	if at < 0 && len(pending) > 0 {
		at = pending[0]
	}
	attempt := 1
	if at >= 0 {
		attempt = b.attempt[at]
	}
	switch {
	case errors.Is(err, stream.ErrPermanent):
		for _, i := range pending {
			b.attempt[i] = attempt
			b.deadLetter(i, deadletter.ReasonPermanent, err)
		}
		b.fail(failureEntry{key: key, tag: tag, recs: pending, err: err, action: "dead-lettered"})
		return true
	case attempt >= t.prog.maxAttempts:
		for _, i := range pending {
			b.attempt[i] = attempt
			b.deadLetter(i, deadletter.ReasonExhausted, err)
		}
		b.fail(failureEntry{key: key, tag: tag, recs: pending, err: err, action: "dead-lettered"})
		return true
	}
	for _, i := range pending {
		b.attempt[i] = attempt
	}
	b.fail(failureEntry{key: key, tag: tag, recs: pending, at: at, err: err, action: "parked"})
	return false
}

// writeOutcome writes what a batch's execution decided into its transaction,
// next to the table writes the handlers made, in one place and in this
// order: the tally of the records (res), the rows of parked records, the
// metadata of parked keys (attempts, next retry), and the dead letters; it
// then lists the failures in res. The checkpoint is set by stage after it,
// and the re-sequencer's rows by resequence before the batch runs. It returns the parked
// keys to update in memory once the commit is done (nil value: unpark).
func (t *Task) writeOutcome(b *batch, now time.Time, res *Result) map[string]*parkedKey {
	tallyRecords(b, res)
	ps := t.newParkedSet(b)
	t.parkRecords(b, ps)
	t.writeParkedKeys(b, ps, now)
	t.writeDeadLetters(b, res)
	t.writeOutbox(b, res)
	reportFailures(b, res)
	return ps.changes
}

// parkedSet is the new parked state of every key a batch touched (nil: the
// key is no longer parked), applied to the Task after the commit.
type parkedSet struct {
	changes map[string]*parkedKey
	get     func(key []byte) *parkedKey
}

// newParkedSet starts the parked state of b's keys from the Task's. A
// retried (due) key starts empty: all its records were in the batch and the
// held ones come back.
func (t *Task) newParkedSet(b *batch) *parkedSet {
	changes := map[string]*parkedKey{}
	get := func(key []byte) *parkedKey {
		k := string(key)
		if pk, ok := changes[k]; ok && pk != nil {
			return pk
		}
		pk := &parkedKey{key: []byte(k)}
		if old, ok := t.parked[k]; ok {
			cp := *old
			cp.records = nil
			if !b.due[k] {
				cp.records = slices.Clone(old.records)
			}
			pk = &cp
		}
		changes[k] = pk
		return pk
	}
	return &parkedSet{changes: changes, get: get}
}

// tallyRecords fills res with what happened to each record of b.
func tallyRecords(b *batch, res *Result) {
	var parkedApplied, parkedHeld []uint64
	res.Applied = make([]uint64, 0, len(b.records))
	for i := range b.records {
		r := &b.records[i]
		switch b.status[i] {
		case statusApplied:
			if b.fromRow[i] {
				parkedApplied = append(parkedApplied, r.Offset)
			} else {
				res.Applied = append(res.Applied, r.Offset)
			}
		case statusHeld:
			if b.fromRow[i] {
				parkedHeld = append(parkedHeld, r.Offset)
			} else {
				res.Held = append(res.Held, r.Offset)
			}
		case statusSkipped:
			res.Skipped = append(res.Skipped, r.Offset)
		case statusStale:
			res.Stale++
			continue
		case statusDuplicate:
			res.Redelivered++
		case statusPending:
			// Not reached by the plan: cannot happen, but never lose it.
			b.status[i] = statusHeld
			res.Held = append(res.Held, r.Offset)
		}
		res.Records++
	}
	res.Applied = mergeSorted(parkedApplied, res.Applied)
	res.Held = mergeSorted(parkedHeld, res.Held)

}

// parkRecords writes the rows of parked records: the ones that left the
// parked set are deleted, new held ones are added.
func (t *Task) parkRecords(b *batch, ps *parkedSet) {
	get := ps.get
	for i := range b.records {
		r := &b.records[i]
		st := b.status[i]
		if st == statusStale {
			continue
		}
		if b.fromRow[i] {
			if st == statusHeld {
				pk := get(r.Headers.Key)
				pk.records = append(pk.records, *r)
			} else {
				b.tx.DeleteRow(state.FamilyParked, t.partition, t.parkedRecordRow(r.Headers.Key, r.Offset))
			}
			continue
		}
		if st == statusHeld {
			own := ownRecord(*r)
			pk := get(own.Headers.Key)
			pk.records = append(pk.records, own)
			b.tx.PutRow(state.FamilyParked, t.partition, t.parkedRecordRow(own.Headers.Key, own.Offset), encodeParkedRecord(own))
		}
	}
}

// writeParkedKeys writes the metadata row of every parked key the batch
// touched (attempts, next retry, last error), or deletes it when the key is
// no longer parked.
func (t *Task) writeParkedKeys(b *batch, ps *parkedSet, now time.Time) {
	changes := ps.changes
	failed := map[string]failureEntry{}
	for _, f := range b.failures {
		if f.action == "parked" || f.action == "blocked" {
			failed[f.key] = f
		}
	}
	for k := range b.timerStops {
		ps.get([]byte(k))
	}
	// Every retried key gets its metadata rewritten or deleted.
	for k := range b.due {
		if _, touched := changes[k]; !touched {
			changes[k] = nil
		}
	}
	for k, pk := range changes {
		if ts, ok := b.timerStops[k]; ok {
			t.writeTimerStop(b, pk, ts)
			continue
		}
		if pk == nil || len(pk.records) == 0 {
			changes[k] = nil
			b.tx.DeleteRow(state.FamilyParked, t.partition, t.parkedKeyRow([]byte(k)))
			continue
		}
		_, wasParked := t.parked[k]
		f, failedNow := failed[k]
		switch {
		case failedNow && f.action == "blocked":
			pk.manual = true
			pk.lastErr = f.err.Error()
		case failedNow:
			// Attempts count the tries of the failing record: another
			// failure at the same record is one more, a failure further on
			// is the first try of that record.
			at := pk.failedAt
			if f.at >= 0 && f.at < len(b.records) {
				at = b.records[f.at].Offset
			}
			if wasParked && pk.attempts > 0 && at == pk.failedAt {
				pk.attempts++
			} else {
				pk.attempts = 1
			}
			pk.failedAt = at
			pk.next = now.Add(t.backoff(pk.attempts))
			pk.lastErr = f.err.Error()
		case wasParked && !b.due[k]:
			// Only new records queued behind the key: metadata unchanged.
			continue
		default:
			// Retried without failing, yet records remain (cannot happen
			// with a correct plan): try them again at once.
			pk.next = now
		}
		b.tx.PutRow(state.FamilyParked, t.partition, t.parkedKeyRow([]byte(k)), pk.metaValue())
	}

}

// writeDeadLetters writes the batch's dead-letter rows and lists them in
// res, in offset order.
func (t *Task) writeDeadLetters(b *batch, res *Result) {
	for _, d := range b.dead {
		if b.replayed(d.idx) {
			continue // dead-lettered before a reset (replaymark.go)
		}
		r := &b.records[d.idx]
		dl := deadletter.Letter{
			Source: t.src.name, Partition: t.partition, Offset: r.Offset, Timestamp: r.Timestamp,
			Reason: d.reason, Err: d.err, Headers: r.Headers, Payload: r.Payload,
		}
		if d.reason == deadletter.ReasonPermanent || d.reason == deadletter.ReasonExhausted {
			dl.Attempts = b.attempt[d.idx]
		} else if b.fromRow[d.idx] {
			dl.Attempts = b.attempt[d.idx] - 1
		}
		if r.HeaderErr != nil {
			dl.Headers = connector.Headers{}
		}
		dl.Headers.Key = bytes.Clone(dl.Headers.Key)
		dl.Payload = bytes.Clone(dl.Payload)
		t.foreignDeadLetter(&dl, r)
		row := rows.AppendLetter(nil, dl)
		b.tx.PutRow(state.FamilyDeadLetters, t.partition, rows.DeadLetterKey(t.src.name, r.Offset), row)
		res.DeadLetters = append(res.DeadLetters, dl)
	}
	slices.SortFunc(res.DeadLetters, func(a, b deadletter.Letter) int { return cmpU64(a.Offset, b.Offset) })

}

// reportFailures lists the keys that stopped at a failing run in res.
func reportFailures(b *batch, res *Result) {
	for _, f := range b.failures {
		fl := Failure{Key: []byte(f.key), Tag: f.tag, Err: f.err, Action: f.action, Attempt: 1}
		for _, i := range f.recs {
			fl.Offsets = append(fl.Offsets, b.records[i].Offset)
			fl.Attempt = max(fl.Attempt, b.attempt[i])
		}
		res.Failures = append(res.Failures, fl)
	}
	slices.SortFunc(res.Failures, func(a, b Failure) int { return bytes.Compare(a.Key, b.Key) })
}

func (t *Task) backoff(attempts int) time.Duration {
	d := t.prog.backoff
	for i := 1; i < attempts && d < t.prog.maxBackoff; i++ {
		d *= 2
	}
	return min(d, t.prog.maxBackoff)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// mergeSorted merges two ascending lists; a is sorted first (it is small).
func mergeSorted(a, b []uint64) []uint64 {
	if len(a) == 0 {
		return b
	}
	slices.Sort(a)
	out := make([]uint64, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] <= b[j] {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// ownRecord copies the bytes a record aliases, to keep it past its batch.
func ownRecord(r connector.Record) connector.Record {
	r.Headers.Key = bytes.Clone(r.Headers.Key)
	r.Payload = bytes.Clone(r.Payload)
	r.Raw = r.Raw.Clone()
	return r
}
