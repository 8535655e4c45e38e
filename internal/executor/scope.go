package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// A fold written with ProjectContext reaches the row it folds through its
// context: DeleteRow removes the row, ScheduleTimer and CancelTimer set the
// key's timer (timers.go). The context of every fold call carries a
// foldScope; the projection reads it after each event and applies what the
// fold asked for in the same Txn as the fold's write, so a run that fails
// leaves neither a deletion nor a timer behind.

// ErrNoFold is wrapped by the error of DeleteRow, ScheduleTimer and
// CancelTimer when their context is not the context of a running fold
// (a ProjectContext fold or a timer handler).
var ErrNoFold = errors.New("strand: not called with the context of a running fold")

// foldScope is what one fold call may ask of its row.
type foldScope struct {
	active  bool
	deleted bool // the row is removed after the event being folded
	// timer: the last ScheduleTimer/CancelTimer of the run (timerSet),
	// and whether the scheduling fold's table has a timer handler.
	timer    timerOp
	timerSet bool
	timers   bool
}

type scopeKey struct{}

// scopeCtx is the context a scoped fold gets: the batch's context plus its
// scope. One per fold call of a run, not per event.
type scopeCtx struct {
	context.Context
	s *foldScope
}

func (c *scopeCtx) Value(k any) any {
	if k == (scopeKey{}) {
		return c.s
	}
	return c.Context.Value(k)
}

func scopeOf(ctx context.Context, what string) (*foldScope, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: %s with a nil context", ErrNoFold, what)
	}
	s, _ := ctx.Value(scopeKey{}).(*foldScope)
	if s == nil || !s.active {
		return nil, fmt.Errorf("%w: %s needs the context a ProjectContext fold or a timer handler is given, during the call", ErrNoFold, what)
	}
	return s, nil
}

// DeleteRow removes the row being folded once the current event is
// folded: the next event of the run folds into the zero value, and the
// row is written only if a later event of the run leaves it (else the
// commit holds a deletion). It also cancels the key's timer, unless the
// fold schedules one again afterwards. ctx must be the context the fold
// was called with.
func DeleteRow(ctx context.Context) error {
	s, err := scopeOf(ctx, "delete the row")
	if err != nil {
		return err
	}
	s.deleted = true
	s.timer, s.timerSet = timerOp{cancel: true}, true
	return nil
}

// foldScoped folds events into v with a scope and turns a panic of fold
// into an error. After an event whose fold called DeleteRow, v is reset to
// the zero value; deleted says whether the last event left the row
// deleted. On failure, at is the index of the event that failed.
func foldScoped[V, E any](ctx *scopeCtx, fold func(context.Context, *V, E) error, v *V, events []E) (at int, deleted bool, err error) {
	s := ctx.s
	s.active = true
	defer func() {
		s.active = false
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	for at = range events {
		s.deleted = false
		if err := fold(ctx, v, events[at]); err != nil {
			return at, false, err
		}
		if s.deleted {
			var zero V
			*v = zero
		}
	}
	return 0, s.deleted, nil
}

// applyScoped is apply for a fold that sees its context.
func (h *projectHandler[K, E, V]) applyScoped(rc *runCtx, events []E) (int, error) {
	tt := rc.b.t.prog.times[h.table.Name()]
	sc := &foldScope{timers: tt != nil && tt.timer != nil}
	ctx := &scopeCtx{Context: rc.ctx, s: sc}
	var foldErr error
	at, deleted := 0, false
	var writes []func() // of the joins kept from this table (derive.go)
	err := h.table.UpdateKeep(rc.tx, rc.partition, rc.key, func(v *V, _ bool) (bool, error) {
		at, deleted, foldErr = foldScoped(ctx, h.fold, v, events)
		if foldErr == nil && rc.b.t.prog.hooks != nil {
			if writes, foldErr = runHooks(rc, h.table.Name(), hookValue(*v, deleted)); foldErr != nil {
				at = len(events) - 1
			}
		}
		return !deleted, foldErr
	})
	switch {
	case foldErr != nil && (err == nil || errors.Is(err, foldErr)):
		return at, foldErr
	case err == nil:
		for _, w := range writes {
			w()
		}
		rc.b.t.written(rc, tt, deleted, sc)
		return 0, nil
	}
	return 0, errFatal{fmt.Errorf("update table %q: %w", h.table.Name(), err)}
}

// prepareScoped is prepare for a fold that sees its context.
func (h *projectHandler[K, E, V]) prepareScoped(rc *runCtx, events []E) (func(), int, error) {
	tt := rc.b.t.prog.times[h.table.Name()]
	sc := &foldScope{timers: tt != nil && tt.timer != nil}
	ctx := &scopeCtx{Context: rc.ctx, s: sc}
	v, _, err := h.table.Read(rc.tx, rc.partition, rc.key)
	if err != nil {
		return nil, 0, errFatal{fmt.Errorf("read table %q: %w", h.table.Name(), err)}
	}
	at, deleted, err := foldScoped(ctx, h.fold, &v, events)
	var writes []func() // of the joins kept from this table (derive.go)
	if err == nil && rc.b.t.prog.hooks != nil {
		if writes, err = runHooks(rc, h.table.Name(), hookValue(v, deleted)); err != nil {
			at = len(events) - 1
		}
	}
	if err != nil {
		if rerr := h.revert(rc); rerr != nil {
			return nil, 0, rerr
		}
		return nil, at, err
	}
	joins := func() {
		for _, w := range writes {
			w()
		}
	}
	if deleted {
		return func() {
			if err := h.table.Delete(rc.tx, rc.partition, rc.key); err != nil {
				rc.b.setFatal(fmt.Errorf("delete from table %q: %w", h.table.Name(), err))
				return
			}
			joins()
			rc.b.t.written(rc, tt, true, sc)
		}, 0, nil
	}
	write, err := h.table.Stage(rc.tx, rc.partition, rc.key, v)
	if err != nil {
		return nil, 0, errFatal{fmt.Errorf("write table %q: %w", h.table.Name(), err)}
	}
	return func() { write(); joins(); rc.b.t.written(rc, tt, false, sc) }, 0, nil
}

// hookValue is what a fold leaves for the join hooks of its table
// (derive.go): the row's value, or nil when the fold deleted the row.
func hookValue[V any](v V, deleted bool) any {
	if deleted {
		return nil
	}
	return v
}

// OnTimer returns the timer handler of table: fn runs when a timer that a
// fold set for a key (ScheduleTimer) is due, with the key's value in the
// table (the zero value when it has none), and may change it, delete the
// row (DeleteRow) or set the key's timer again, through ctx, exactly like
// a ProjectContext fold; its writes commit with the timer's removal. An
// error (or a panic) undoes its writes; the timer is retried, blocks its
// key or is dead-lettered, like a failing event (timer_failure.go), each
// failed try counted in Result.TimerFailures.
func OnTimer[K, V any](table *state.Table[K, V], keys stream.Codec[K], fn func(ctx context.Context, key K, v *V, at time.Time) error) TimerHandler {
	return &timerHandler[K, V]{table: table, keys: keys,
		fn: func(ctx context.Context, key K, v *V, at time.Time, _ func(stream.Envelope)) error {
			return fn(ctx, key, v, at)
		}}
}

// OnTimerTo is OnTimer for a handler that also publishes to dest: the
// envelopes it passes to emit are written to the outbox with its writes,
// in the same commit, and published after it exactly once (§11), ahead of
// what the batch's records emit; nothing of a failing handler is.
func OnTimerTo[K, V any](table *state.Table[K, V], keys stream.Codec[K], dest string, fn func(ctx context.Context, key K, v *V, at time.Time, emit func(stream.Envelope)) error) TimerHandler {
	return &timerHandler[K, V]{table: table, keys: keys, fn: fn, dest: dest}
}

type timerHandler[K, V any] struct {
	table *state.Table[K, V]
	keys  stream.Codec[K]
	fn    func(ctx context.Context, key K, v *V, at time.Time, emit func(stream.Envelope)) error
	dest  string
}

func (h *timerHandler[K, V]) tableName() string { return h.table.Name() }

func (h *timerHandler[K, V]) fire(rc *runCtx, tt *tableTime, at time.Time) (deleted bool, sc *foldScope, out []emitted, err error) {
	key, err := h.keys.Decode(rc.key)
	if err != nil {
		return false, nil, nil, fmt.Errorf("decode key %q: %w", rc.key, err)
	}
	emit := func(env stream.Envelope) { out = append(out, emittedOf(h.dest, &env)) }
	sc = &foldScope{timers: true}
	ctx := &scopeCtx{Context: rc.ctx, s: sc}
	var fnErr error
	uerr := h.table.UpdateKeep(rc.tx, rc.partition, rc.key, func(v *V, _ bool) (bool, error) {
		fnErr = callTimer(ctx, h.fn, key, v, at, emit)
		return !sc.deleted, fnErr
	})
	switch {
	case fnErr != nil && (uerr == nil || errors.Is(uerr, fnErr)):
		return false, nil, nil, fnErr
	case uerr != nil:
		return false, nil, nil, errFatal{fmt.Errorf("update table %q: %w", h.table.Name(), uerr)}
	}
	return sc.deleted, sc, out, nil
}

func callTimer[K, V any](ctx *scopeCtx, fn func(context.Context, K, *V, time.Time, func(stream.Envelope)) error, key K, v *V, at time.Time, emit func(stream.Envelope)) (err error) {
	ctx.s.active = true
	defer func() {
		ctx.s.active = false
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fn(ctx, key, v, at, emit)
}
