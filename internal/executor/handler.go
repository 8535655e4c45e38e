package executor

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"

	"github.com/strand-io/strand/internal/state"
)

// Handler is one consumer of one event type inside a Program: a projection
// into a table (Project) or a user function (Handle). Package topology
// builds handlers for you; Handler is exported so that a Program can be
// assembled without it. Only this package implements Handler.
type Handler interface {
	decl() declaration
	info() handlerInfo
}

// handlerInfo describes a handler for validation, fingerprints and
// messages.
type handlerInfo struct {
	kind      string // "project" or "handle"
	name      string // user-facing name (the sink's name, or "project into <table>")
	table     string // project only
	tableType string // project only: the table's Go type
	attacher  state.Attacher
	maxBatch  int
	dest      string   // emit only: the destination topic
	mode      EmitMode // emit only
}

// Project returns a handler that folds each event of ev into the value its
// key has in table. For every run of one key it reads the key's value once
// (own uncommitted writes first, then committed state; the zero value when
// absent), calls fold for each reduced event in order, and writes the
// result once. If fold returns an error for any event, nothing of that run
// is written: fold may have changed v before failing, and a half-folded
// value is never stored. fold must not keep v or e.
//
// Projections get exactly-once: the write commits in the same batch as the
// source checkpoint.
func Project[K, E, V any](ev *stream.Event[K, E], table *state.Table[K, V], fold func(v *V, e E) error) Handler {
	var f func(context.Context, *V, E) error
	if fold != nil {
		f = func(_ context.Context, v *V, e E) error { return fold(v, e) }
	}
	return &projectHandler[K, E, V]{ev: ev, table: table, fold: f}
}

// ProjectContext is Project with a fold that sees the batch's context: it
// is cancelled when the App stops for good (the drain timeout after a stop
// has passed), so a fold waiting on something slow can give up.
func ProjectContext[K, E, V any](ev *stream.Event[K, E], table *state.Table[K, V], fold func(ctx context.Context, v *V, e E) error) Handler {
	return &projectHandler[K, E, V]{ev: ev, table: table, fold: fold, scoped: true}
}

// Handle returns a handler that calls fn with the events of ev, one key
// and one reduced run at a time, in chunks of at most maxBatch events
// (maxBatch <= 0 means the whole run in one call). name identifies the
// handler in errors and metrics.
//
// fn gets at-least-once delivery: a chunk it accepted may be delivered
// again after a crash before the batch committed, or when another handler
// of the same run failed and the run is retried. Use it for side effects
// that are idempotent or tolerate repeats; keep state in tables (Project)
// to get exactly-once. fn is called concurrently for different keys, never
// for two chunks of one key at once.
func Handle[K, E any](ev *stream.Event[K, E], name string, maxBatch int, fn func(ctx context.Context, key K, events []E) error) Handler {
	return &handleHandler[K, E]{ev: ev, name: name, max: maxBatch, fn: fn}
}

type projectHandler[K, E, V any] struct {
	ev    *stream.Event[K, E]
	table *state.Table[K, V]
	fold  func(ctx context.Context, v *V, e E) error
	// scoped: the fold sees its context, so it may delete its row or set
	// its key's timer (scope.go).
	scoped bool
}

func (h *projectHandler[K, E, V]) decl() declaration {
	if h.ev == nil {
		return nil
	}
	return typedDecl[K, E]{h.ev}
}

func (h *projectHandler[K, E, V]) info() handlerInfo {
	hi := handlerInfo{kind: "project", tableType: reflect.TypeFor[*state.Table[K, V]]().String()}
	if h.table != nil {
		hi.table = h.table.Name()
		hi.name = "project into " + hi.table
		hi.attacher = h.table
	} else {
		hi.name = "project into <nil table>"
	}
	return hi
}

type handleHandler[K, E any] struct {
	ev   *stream.Event[K, E]
	name string
	max  int
	fn   func(ctx context.Context, key K, events []E) error
}

func (h *handleHandler[K, E]) decl() declaration {
	if h.ev == nil {
		return nil
	}
	return typedDecl[K, E]{h.ev}
}

// declaration is what NewProgram and the executor need of a stream.Event
// without knowing its types.
type declaration interface {
	Tag() planner.Tag
	Name() string
	Err() error
	StaticOrdering() (planner.Ordering, bool)
	algebraKind() algebra.Kind
	keyCodec() any
	keyType() reflect.Type
	eventType() reflect.Type
	newRunner(handlers []Handler) (runner, error)
	sequenced() bool
}

// typedDecl is a declaration of known types. Two of the same Event are
// equal.
type typedDecl[K, E any] struct{ *stream.Event[K, E] }

func (d typedDecl[K, E]) algebraKind() algebra.Kind { return d.Algebra().Kind() }
func (d typedDecl[K, E]) keyCodec() any             { return d.KeyCodec() }
func (d typedDecl[K, E]) sequenced() bool           { return d.Sequenced() }
func (d typedDecl[K, E]) keyType() reflect.Type     { return reflect.TypeFor[K]() }
func (d typedDecl[K, E]) eventType() reflect.Type   { return reflect.TypeFor[E]() }

func (h *handleHandler[K, E]) info() handlerInfo {
	return handlerInfo{kind: "handle", name: h.name, maxBatch: h.max}
}

// describe names the handler in logs and stats: `project into "t"`,
// `ForEach "name"`, `To "step"`, `KeyBy "step"`.
func (hi handlerInfo) describe() string {
	switch hi.kind {
	case "project":
		return fmt.Sprintf("project into %q", hi.table)
	case "emit":
		if hi.mode == EmitKeyBy {
			return fmt.Sprintf("KeyBy %q", hi.name)
		}
		return fmt.Sprintf("To %q", hi.name)
	}
	return fmt.Sprintf("ForEach %q", hi.name)
}

// errFatal marks an error that makes the whole batch fail (the store
// refused a read or a write): the transaction cannot be trusted and is
// discarded.
type errFatal struct{ err error }

func (e errFatal) Error() string { return e.err.Error() }
func (e errFatal) Unwrap() error { return e.err }

// eventRunner runs the runs of one event type: decode, reduce, and apply to
// every handler of the type.
type eventRunner[K, E any] struct {
	ev       *stream.Event[K, E]
	alg      algebra.Algebra[E]
	keys     stream.Codec[K]
	handles  []*handleHandler[K, E]
	projects []projector[E]
	emits    []*emitHandler[K, E] // KeyBy steps first
	bufs     sync.Pool            // *runBuf[E]
	windowed bool                 // a projector is a window aggregation (windows.go)
	counts   runCounters
}

// projector is the part of a projection the runner needs without knowing V.
//
// A failed fold leaves no trace: whatever it did to the value it was
// handed (in place or not), the key's value in the Txn is put back as it
// was before the run, so a retry, a later run of the key and the commit
// all see the value of the events applied so far, and nothing else.
type projector[E any] interface {
	// apply reads, folds and writes in one go, for a type with a single
	// projection. On failure, at is the index of the event that failed.
	apply(rc *runCtx, events []E) (at int, err error)
	// prepare reads the key's value, folds events into it and encodes the
	// result; the returned function writes it. On failure the key's value
	// is as before the call and at is the index of the event that failed.
	prepare(rc *runCtx, events []E) (write func(), at int, err error)
	// revert puts the key's value back as it was before a prepare whose
	// write will not be called.
	revert(rc *runCtx) error
	tableName() string
}

func (h *projectHandler[K, E, V]) tableName() string { return h.table.Name() }

func (h *projectHandler[K, E, V]) apply(rc *runCtx, events []E) (int, error) {
	if h.scoped {
		return h.applyScoped(rc, events)
	}
	var foldErr error
	var writes []func() // of the joins kept from this table (derive.go)
	at := 0
	err := h.table.Update(rc.tx, rc.partition, rc.key, func(v *V, _ bool) error {
		at, foldErr = foldAll(rc.ctx, h.fold, v, events)
		if foldErr == nil && rc.b.t.prog.hooks != nil {
			if writes, foldErr = runHooks(rc, h.table.Name(), *v); foldErr != nil {
				at = len(events) - 1
			}
		}
		return foldErr
	})
	switch {
	case foldErr != nil && (err == nil || errors.Is(err, foldErr)):
		return at, foldErr
	case err == nil:
		for _, w := range writes {
			w()
		}
		rc.b.t.written(rc, rc.b.t.prog.times[h.table.Name()], false, nil)
		return 0, nil
	}
	// The store refused (a value that does not encode counts as that):
	// the batch cannot be trusted and is abandoned.
	return 0, errFatal{fmt.Errorf("update table %q: %w", h.table.Name(), err)}
}

func (h *projectHandler[K, E, V]) prepare(rc *runCtx, events []E) (func(), int, error) {
	if h.scoped {
		return h.prepareScoped(rc, events)
	}
	v, _, err := h.table.Read(rc.tx, rc.partition, rc.key)
	if err != nil {
		return nil, 0, errFatal{fmt.Errorf("read table %q: %w", h.table.Name(), err)}
	}
	at, err := foldAll(rc.ctx, h.fold, &v, events)
	var writes []func() // of the joins kept from this table (derive.go)
	if err == nil && rc.b.t.prog.hooks != nil {
		if writes, err = runHooks(rc, h.table.Name(), v); err != nil {
			at = len(events) - 1
		}
	}
	if err != nil {
		if rerr := h.revert(rc); rerr != nil {
			return nil, 0, rerr
		}
		return nil, at, err
	}
	write, err := h.table.Stage(rc.tx, rc.partition, rc.key, v)
	if err != nil {
		return nil, 0, errFatal{fmt.Errorf("write table %q: %w", h.table.Name(), err)}
	}
	if len(writes) > 0 {
		own := write
		write = func() {
			own()
			for _, w := range writes {
				w()
			}
		}
	}
	if tt := rc.b.t.prog.times[h.table.Name()]; tt != nil {
		own := write
		return func() { own(); rc.b.t.written(rc, tt, false, nil) }, 0, nil
	}
	return write, 0, nil
}

func (h *projectHandler[K, E, V]) revert(rc *runCtx) error {
	if err := h.table.Revert(rc.tx, rc.partition, rc.key); err != nil {
		return errFatal{fmt.Errorf("revert table %q: %w", h.table.Name(), err)}
	}
	return nil
}

type runBuf[E any] struct {
	key    []byte            // scratch for the key check
	env    []stream.Envelope // scratch for emitting handlers
	events []E
	idx    []int // record index of events[j]
	owner  []int
}

func (d typedDecl[K, E]) newRunner(hs []Handler) (runner, error) {
	r := &eventRunner[K, E]{ev: d.Event, alg: d.Algebra(), keys: d.KeyCodec()}
	r.bufs.New = func() any { return new(runBuf[E]) }
	defer func() {
		// EmitKeyBy before EmitTo, each in declaration order. The order
		// is computed on the modes alone: a sort of r.emits itself would
		// be compiled again for every event type.
		modes := make([]EmitMode, len(r.emits))
		for i, h := range r.emits {
			modes[i] = h.mode
		}
		sorted := make([]*emitHandler[K, E], 0, len(r.emits))
		for _, i := range modeOrder(modes) {
			sorted = append(sorted, r.emits[i])
		}
		r.emits = sorted
	}()
	for _, h := range hs {
		switch h := h.(type) {
		case *handleHandler[K, E]:
			if h.ev != d.Event {
				return nil, otherDeclErr("handler", h.name, d.Tag())
			}
			r.handles = append(r.handles, h)
		case *emitHandler[K, E]:
			if h.ev != d.Event {
				return nil, otherDeclErr("step", h.step, d.Tag())
			}
			r.emits = append(r.emits, h)
		case projector[E]:
			r.projects = append(r.projects, h)
			if _, ok := h.(windowInput); ok {
				r.windowed = true
			}
		default:
			return nil, wrongHandlerErr(h, d.Tag(), d.Name())
		}
	}
	return r, nil
}

// modeOrder returns the indexes of modes, the highest mode first and each
// mode's in their order (a stable sort, descending).
func modeOrder(modes []EmitMode) []int {
	order := make([]int, len(modes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(modes[b], modes[a]) })
	return order
}

// run decodes, reduces and applies one run. It marks the records it
// applied and the ones it dead-lettered in rc.b, and returns the handler
// error that stopped the run, if any.
func (r *eventRunner[K, E]) run(rc *runCtx, recs []int) runResult {
	buf := r.bufs.Get().(*runBuf[E])
	defer func() {
		clear(buf.events) // drop references for the GC
		buf.events, buf.idx, buf.owner, buf.env = buf.events[:0], buf.idx[:0], buf.owner[:0], buf.env[:0]
		r.bufs.Put(buf)
	}()
	b := rc.b
	// The key bytes must be a key of this type whatever the handlers are:
	// a projection files its row under these bytes, and a row whose key
	// does not decode would poison every later Scan of the table. Nothing
	// of the run can be applied; the caller dead-letters it.
	key, err := r.keys.Decode(rc.key)
	if err != nil {
		return runResult{end: runBadKey, err: fmt.Errorf("decode key: %w", err)}
	}
	var block error
	for next := 0; next < len(recs) && block == nil; {
		next, block = r.decode(rc, recs, next, buf)
	}
	var emitFail *runResult
	if len(r.emits) > 0 && len(buf.events) > 0 {
		var h error
		if h, emitFail = r.emit(rc, key, buf); block == nil {
			block = h
		}
	}
	blocked := runResult{}
	if block != nil {
		blocked = runResult{end: runBlocked, err: fmt.Errorf("blocked behind a poison event: %w", block)}
	}
	if emitFail != nil {
		blocked = *emitFail
	}
	if len(buf.events) == 0 {
		return blocked
	}
	if cap(buf.owner) < len(buf.events) {
		buf.owner = make([]int, len(buf.events))
	}
	buf.owner = buf.owner[:len(buf.events)]
	var unreduced []E // Reduce overwrites buf.events (windows.go)
	if r.windowed {
		unreduced = slices.Clone(buf.events)
	}
	reduced, err := reduce(r.ev, r.alg, buf.events, buf.owner)
	if err != nil {
		// Nothing was applied: the run fails as a handler would.
		return runResult{end: runFailed, err: err, at: -1}
	}
	r.counts.reduced(rc.key, len(buf.events), len(reduced))
	if r.windowed {
		rc.win = &runWin{events: unreduced, idx: buf.idx, owner: buf.owner}
	}
	applied, failed, err := r.apply(rc, key, reduced, replayedRun(b, buf.idx))
	rc.win = nil
	for j, i := range buf.idx {
		if buf.owner[j] < applied {
			b.status[i] = statusApplied
		}
	}
	switch {
	case err == nil:
		return blocked
	case errors.As(err, new(errFatal)):
		return runResult{end: runFatal, err: err}
	}
	// The failing record: the first of those the failing reduced event
	// stands for. Retries are counted for it.
	res := runResult{end: runFailed, err: err, at: -1}
	for j, i := range buf.idx {
		if buf.owner[j] == failed {
			res.at = i
			break
		}
	}
	return res
}

// apply hands reduced to every handler and returns how many of its events
// (a prefix) every handler accepted and, on failure, the index of the
// event that failed. Handle handlers go first, chunk by
// chunk; projections then fold the accepted prefix and write it only if
// every projection succeeded, so a projection never stores part of a run
// that was not applied.
func (r *eventRunner[K, E]) apply(rc *runCtx, key K, reduced []E, replayed bool) (accepted, failed int, errs error) {
	accepted = len(reduced)
	if len(r.handles) > 0 && !replayed { // a run wholly before a reset called them then (replaymark.go)
		for _, h := range r.handles {
			max := h.max
			if max <= 0 {
				max = accepted
			}
			for off := 0; off < accepted; off += max {
				end := min(off+max, accepted)
				r.counts.called(rc.key, 1)
				if err := callHandle(rc.ctx, h, key, reduced[off:end]); err != nil {
					errs = fmt.Errorf("handler %q: %w", h.name, err)
					accepted, failed = off, off
					break
				}
			}
		}
	}
	projects := activeProjects(rc.b.t, r.projects) // build.go
	if accepted == 0 || len(projects) == 0 {
		return accepted, failed, errs
	}
	r.counts.called(rc.key, len(projects))
	if len(projects) == 1 {
		if at, err := projects[0].apply(rc, reduced[:accepted]); err != nil {
			return 0, at, joinErr(errs, r.projectErr(projects[0], err))
		}
		return accepted, failed, errs
	}
	// Several projections: fold and encode every one first, write only if
	// all succeeded, and put back the ones already folded if one fails.
	writes := make([]func(), 0, len(projects))
	for i, p := range projects {
		write, at, err := p.prepare(rc, reduced[:accepted])
		if err != nil {
			for _, q := range projects[:i] {
				if rerr := q.revert(rc); rerr != nil {
					return 0, 0, rerr
				}
			}
			return 0, at, joinErr(errs, r.projectErr(p, err))
		}
		writes = append(writes, write)
	}
	for _, w := range writes {
		w()
	}
	return accepted, failed, errs
}

func (r *eventRunner[K, E]) projectErr(p projector[E], err error) error {
	var f errFatal
	if errors.As(err, &f) {
		return err
	}
	return fmt.Errorf("project into %q: %w", p.tableName(), err)
}

// callHandle calls a user function and turns a panic into an error, so a
// bad handler fails its key instead of the process.
func callHandle[K, E any](ctx context.Context, h *handleHandler[K, E], key K, events []E) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return h.fn(ctx, key, events)
}

// decode decodes the run's records from recs[from] on into buf, checking
// each event's own key against the record's key header, and dead-letters
// the records that fail (ReasonDecode, ReasonKeyMismatch). It returns where
// to go on: a panic of the payload codec, the key function or the key codec
// dead-letters the record it happened on and returns the index after it,
// so one recover serves the whole run instead of one per event. block is set
// under BlockPoisonedKey: the rest of the run is blocked behind the poison.
func (r *eventRunner[K, E]) decode(rc *runCtx, recs []int, from int, buf *runBuf[E]) (next int, block error) {
	b := rc.b
	at, reason := from, deadletter.ReasonDecode
	poison := func(err error) error {
		b.deadLetter(recs[at], reason, err)
		if b.poison == stream.BlockPoisonedKey {
			// Apply what came before the poison event, block the rest.
			return err
		}
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			what := "payload codec"
			if reason == deadletter.ReasonKeyMismatch {
				what = "key function or key codec"
			}
			next = at + 1
			block = poison(decodePanicErr(reason, r.ev.Tag(), r.ev.Name(), what, p))
		}
	}()
	payload := r.ev.PayloadCodec()
	for ; at < len(recs); at++ {
		i := recs[at]
		reason = deadletter.ReasonDecode
		e, err := payload.Decode(b.records[i].Payload)
		if err != nil {
			err = decodeErr(r.ev.Tag(), r.ev.Name(), err)
		} else if b.t.src.foreign == nil && !b.t.src.trustKeys { // a foreign record's key is its classifier's (foreign.go)
			// The record was partitioned and planned by its header key:
			// an event that names another key must not be applied to it.
			reason = deadletter.ReasonKeyMismatch
			buf.key, err = r.keyOf(buf.key[:0], e, rc.key)
		}
		if err != nil {
			if h := poison(err); h != nil {
				return at + 1, h
			}
			continue
		}
		buf.events = append(buf.events, e)
		buf.idx = append(buf.idx, i)
	}
	return at, nil
}

// errOf is the sentinel a panic during decoding wraps.
func errOf(r deadletter.Reason) error {
	if r == deadletter.ReasonKeyMismatch {
		return ErrKeyMismatch
	}
	return stream.ErrCodec
}

// keyOf checks that e's own key encodes to header, the record's key bytes,
// and returns the encoding buffer for reuse. A key codec that fails is a
// mismatch too (the record is dead-lettered with it); a panic is caught by
// decode.
func (r *eventRunner[K, E]) keyOf(buf []byte, e E, header []byte) (out []byte, err error) {
	out, err = r.keys.Append(buf, r.ev.Key(e))
	switch {
	case err != nil:
		return out, keyEncodeErr(r.ev.Tag(), r.ev.Name(), err)
	case !bytes.Equal(out, header):
		return out, keyMismatchErr(r.ev.Tag(), r.ev.Name(), out, header)
	}
	return out, nil
}

// The errors of eventRunner and newRunner are formatted by the functions
// below: not generic, so compiled once rather than for every event type.

func otherDeclErr(what, name string, tag planner.Tag) error {
	return fmt.Errorf("%s %q is for another declaration of type tag %d", what, name, tag)
}

func wrongHandlerErr(h Handler, tag planner.Tag, name string) error {
	return fmt.Errorf("handler %T does not take events of type tag %d (%s)", h, tag, name)
}

func decodePanicErr(reason deadletter.Reason, tag planner.Tag, name, what string, p any) error {
	return fmt.Errorf("%w: type tag %d (%s): the %s panicked: %v", errOf(reason), tag, name, what, p)
}

func decodeErr(tag planner.Tag, name string, err error) error {
	return fmt.Errorf("type tag %d (%s): %w", tag, name, err)
}

func keyEncodeErr(tag planner.Tag, name string, err error) error {
	return fmt.Errorf("%w: type tag %d (%s): encode the event's key: %w", ErrKeyMismatch, tag, name, err)
}

func keyMismatchErr(tag planner.Tag, name string, key, header []byte) error {
	return fmt.Errorf("%w: type tag %d (%s): the event's key is %q, the strand-key header %q", ErrKeyMismatch, tag, name, key, header)
}

// ErrKeyBy is wrapped by the error of a record that a KeyBy step could
// not give its new key (deadletter.ReasonKeyBy).
var ErrKeyBy = errors.New("strand: KeyBy could not key the event")

// ErrKeyMismatch is wrapped by the error of a record whose decoded event
// names another key than its strand-key header.
var ErrKeyMismatch = errors.New("strand: event key differs from the record's key header")

// reduce reduces a run with the type's algebra and turns a panic of the
// user's functions inside it (a Sum's getter, a Fold's combine) into an
// error, so a bad reduction fails its key instead of the process.
func reduce[K, E any](ev *stream.Event[K, E], alg algebra.Algebra[E], events []E, owner []int) (reduced []E, err error) {
	defer func() {
		if p := recover(); p != nil {
			reduced, err = nil, fmt.Errorf("reduce run of type tag %d: panic: %v", ev.Tag(), p)
		}
	}()
	return alg.Reduce(events, owner), nil
}

// foldAll folds events into v and turns a panic of fold into an error. On
// failure, at is the index of the event that failed.
func foldAll[V, E any](ctx context.Context, fold func(context.Context, *V, E) error, v *V, events []E) (at int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	for at = range events {
		if err := fold(ctx, v, events[at]); err != nil {
			return at, err
		}
	}
	return 0, nil
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	return errors.Join(a, b)
}
