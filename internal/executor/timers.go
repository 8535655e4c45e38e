package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
)

// Time in read models (docs/design.md §17): rows that expire (a table's
// TTL) and timers that a fold schedules for its key. Both are deadlines
// kept as rows of FamilyTimers under the partition, committed with the
// state that set them, so the changelog, snapshots and a restore carry
// them like any other row:
//
// (layout in internal/rows/deadlines.go: an index in due order, and the
// deadline of each key). Setting a deadline writes both rows; moving it writes both again and
// leaves the old index row stale; cancelling deletes the key row. A sweep
// walks the index from its start up to now: an index row whose time is
// the key row's is due (expiry deletes the table row, a timer runs its
// handler), any other is stale and only deleted. Nothing is read while
// nothing is due: the Task keeps the earliest time that may be due
// (Task.due), lowered by every deadline it writes and read back from the
// index after each sweep.
//
// A sweep runs at the start of a batch or a retry whose clock reached the
// earliest due time, before the batch's records, in the batch's Txn, with
// no commit of the partition in flight (Submit settles the pending one
// first): what expires or fires comes, in each key's history, after every
// event committed before and before the batch's events. The deadlines of
// a parked key wait until the key goes on, so they never overtake its
// parked events.

// FamilyTimers holds the deadline rows of TTL tables and timers (layout:
// internal/rows/deadlines.go).
const FamilyTimers = state.FamilyTimers

// TTLSpec gives a table a time to live: a row not written for TTL is
// removed. Source names the source whose Tasks sweep it (one of the
// table's writers; they take turns, so any one of them is safe).
type TTLSpec struct {
	Table  state.Attacher
	TTL    time.Duration
	Source string
	// Delete removes a row of the table in a Txn (the typed table's
	// Delete).
	Delete func(tx *state.Txn, partition uint32, key []byte) error
}

// TimerSpec gives a table a timer handler, fired by Source's Tasks.
type TimerSpec struct {
	Table   state.Attacher
	Source  string
	Handler TimerHandler
	// Dest is the topic the handler publishes to (OnTimerTo), or "".
	Dest string
}

// TimerHandler runs a table's timers. Make one with OnTimer.
type TimerHandler interface {
	fire(rc *runCtx, tt *tableTime, at time.Time) (deleted bool, sc *foldScope, out []emitted, err error)
	tableName() string
}

// timerOp is a timer change asked for by a fold: set at, or cancel.
type timerOp struct {
	at     time.Time
	cancel bool
}

// ScheduleTimer sets the timer of the key being folded to fire at at
// (replacing a timer it had). ctx must be the context of a running
// ProjectContext fold or timer handler of a table that has a timer handler
// (topology.OnTimer); what it sets is committed with the fold's write, or
// not at all when the run fails.
func ScheduleTimer(ctx context.Context, at time.Time) error {
	s, err := scopeOf(ctx, "schedule a timer")
	if err != nil {
		return err
	}
	if !s.timers {
		return fmt.Errorf("%w: the table folded has no timer handler (topology.OnTimer)", ErrNoTimers)
	}
	s.timer, s.timerSet = timerOp{at: at}, true
	return nil
}

// CancelTimer cancels the timer of the key being folded, if it has one.
func CancelTimer(ctx context.Context) error {
	s, err := scopeOf(ctx, "cancel a timer")
	if err != nil {
		return err
	}
	s.timer, s.timerSet = timerOp{cancel: true}, true
	return nil
}

// ErrNoTimers is wrapped by ScheduleTimer's error for a table without a
// timer handler.
var ErrNoTimers = errors.New("strand: no timer handler")

// tableTime is what a Program knows of one table's time: its TTL and its
// timer handler, and which source sweeps them.
type tableTime struct {
	name     string
	ttl      time.Duration
	del      func(tx *state.Txn, partition uint32, key []byte) error
	ttlSrc   string
	timer    TimerHandler
	timerSrc string
	// prefixes of the table's rows (kind, name)
	xpre, tpre []byte
}

// setDeadline writes a key's deadline rows into tx and lowers the Task's
// earliest due time.
func (t *Task) setDeadline(tx *state.Txn, pre, key []byte, at time.Time) {
	v := rows.EncodeDeadline(at)
	var val [8]byte
	binary.BigEndian.PutUint64(val[:], v)
	tx.PutRow(FamilyTimers, t.partition, rows.DeadlineKey(pre, key), val[:])
	tx.PutRow(FamilyTimers, t.partition, rows.DeadlineIndexKey(pre, v, key), nil)
	t.lowerDue(at.UnixNano())
}

// lowerDue makes n the earliest due time if it is earlier.
func (t *Task) lowerDue(n int64) {
	for {
		cur := t.due.Load()
		if n >= cur || t.due.CompareAndSwap(cur, n) {
			return
		}
	}
}

// written is called after a projection (or a timer handler) wrote or
// deleted the row of rc.key in table tt: it moves the row's expiry and
// applies the timer change the fold asked for (sc may be nil).
func (t *Task) written(rc *runCtx, tt *tableTime, deleted bool, sc *foldScope) {
	if tt == nil {
		return
	}
	tx := rc.tx
	if tt.ttl > 0 {
		if deleted {
			tx.DeleteRow(FamilyTimers, t.partition, rows.DeadlineKey(tt.xpre, rc.key))
		} else {
			t.setDeadline(tx, tt.xpre, rc.key, rc.b.now.Add(tt.ttl))
		}
	}
	if tt.timer != nil && sc != nil && sc.timerSet {
		if sc.timer.cancel {
			tx.DeleteRow(FamilyTimers, t.partition, rows.DeadlineKey(tt.tpre, rc.key))
		} else {
			t.setDeadline(tx, tt.tpre, rc.key, sc.timer.at)
		}
	}
}

// swept returns the time-keeping tables this Task sweeps.
func (t *Task) swept() []*tableTime { return t.src.sweeps }

// loadDue reads the earliest deadline of the tables the Task sweeps.
func (t *Task) loadDue(ctx context.Context) error {
	earliest := int64(math.MaxInt64)
	for _, tt := range t.swept() {
		for _, pre := range [][]byte{tt.xpre, tt.tpre} {
			if pre == nil {
				continue
			}
			at, ok, err := t.firstIndex(ctx, pre)
			if err != nil {
				return err
			}
			if ok {
				earliest = min(earliest, at.UnixNano())
			}
		}
	}
	t.due.Store(earliest)
	return t.loadWindows(ctx)
}

var errStopScan = errors.New("stop")

func (t *Task) firstIndex(ctx context.Context, pre []byte) (time.Time, bool, error) {
	from := rows.DeadlineIndex(pre)
	var at time.Time
	found := false
	err := t.db.RowsFrom(ctx, FamilyTimers, t.partition, from, func(k, _ []byte) error {
		if len(k) >= len(from)+8 && string(k[:len(from)]) == string(from) {
			at, found = rows.DecodeDeadline(binary.BigEndian.Uint64(k[len(from):])), true
		}
		return errStopScan
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return time.Time{}, false, fmt.Errorf("read the deadlines: %w", err)
	}
	return at, found, nil
}

// deadlineDue reports whether a deadline of the Task's tables may be due at
// now.
func (t *Task) deadlineDue(now time.Time) bool {
	return (len(t.src.sweeps) > 0 || len(t.src.wins) > 0) && t.due.Load() <= now.UnixNano()
}

// nextDeadline returns the earliest deadline that may be due, if any.
func (t *Task) nextDeadline() (time.Time, bool) {
	if len(t.src.sweeps) == 0 && len(t.src.wins) == 0 {
		return time.Time{}, false
	}
	n := t.due.Load()
	if n == math.MaxInt64 {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

type dueRow struct {
	index []byte // the index row's key
	key   []byte // the table row's key
	at    uint64
}

// sweep expires rows and fires timers due at b.now into b's Txn, counting
// them in res. It runs before the batch's records, with no commit of the
// partition in flight.
func (t *Task) sweep(b *batch, res *Result) error {
	now := rows.EncodeDeadline(b.now)
	next, parked := uint64(math.MaxUint64), false
	// What the sweep itself sets (a timer handler scheduling again)
	// lowers due from here; what it leaves is added at the end.
	t.due.Store(math.MaxInt64)
	for _, tt := range t.swept() {
		for _, k := range []struct {
			pre   []byte
			timer bool
		}{{tt.xpre, false}, {tt.tpre, true}} {
			if k.pre == nil {
				continue
			}
			n, p, err := t.sweepKind(b, res, tt, k.pre, now, k.timer)
			if err != nil {
				return err
			}
			next, parked = min(next, n), parked || p
		}
	}
	if err := t.carryTimerStops(b); err != nil {
		return err
	}
	p, err := t.sweepWindows(b, res)
	if err != nil {
		return err
	}
	t.dueParked = parked || p
	if next != math.MaxUint64 {
		t.lowerDue(rows.DecodeDeadline(next).UnixNano())
	}
	return nil
}

// sweepLimit bounds the deadlines one sweep handles: the rest stay due and
// go with the next batch or retry (a sweep is part of one commit).
const sweepLimit = 4096

// sweepKind sweeps one kind of deadline of one table. It returns the
// earliest deadline it left (MaxUint64: none) and whether it left some of
// parked keys.
func (t *Task) sweepKind(b *batch, res *Result, tt *tableTime, pre []byte, now uint64, timer bool) (next uint64, parked bool, _ error) {
	from := rows.DeadlineIndex(pre)
	var dueRows []dueRow
	next = math.MaxUint64
	if timer {
		defer func() { b.expired = nil }()
	}
	err := t.db.RowsFrom(b.ctx, FamilyTimers, t.partition, from, func(k, _ []byte) error {
		if len(k) < len(from)+8 || string(k[:len(from)]) != string(from) {
			return errStopScan
		}
		at := binary.BigEndian.Uint64(k[len(from):])
		if at > now || len(dueRows) >= sweepLimit {
			next = at
			return errStopScan
		}
		dueRows = append(dueRows, dueRow{index: slices.Clone(k), key: slices.Clone(k[len(from)+8:]), at: at})
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return 0, false, fmt.Errorf("sweep the deadlines of table %q: %w", tt.name, err)
	}
	tx := b.tx
	for _, r := range dueRows {
		kr := rows.DeadlineKey(pre, r.key)
		val, ok, err := t.db.Row(FamilyTimers, t.partition, kr)
		if err != nil {
			return 0, false, fmt.Errorf("sweep the deadlines of table %q: %w", tt.name, err)
		}
		if !ok || len(val) != 8 || binary.BigEndian.Uint64(val) != r.at || (timer && b.expired[string(r.key)]) {
			tx.DeleteRow(FamilyTimers, t.partition, r.index) // stale: moved or cancelled
			continue
		}
		attempt := 1
		if timer {
			var ok bool
			if attempt, ok = t.timerTry(b, r.key); !ok {
				// After the key's parked events or its failing timer: it
				// goes when they do.
				parked = true
				next = min(next, t.timerWaits(r.key))
				continue
			}
		} else if _, ok := t.parked[string(r.key)]; ok {
			parked = true // after the key's parked events: it goes when they do
			continue
		}
		rc := &runCtx{ctx: b.ctx, tx: tx, partition: t.partition, key: r.key, b: b}
		if !timer {
			tx.DeleteRow(FamilyTimers, t.partition, r.index)
			tx.DeleteRow(FamilyTimers, t.partition, kr)
			if err := tt.del(tx, t.partition, r.key); err != nil {
				return 0, false, errFatal{fmt.Errorf("expire a row of table %q: %w", tt.name, err)}
			}
			if tt.timer != nil { // the row is gone: so is its timer
				tx.DeleteRow(FamilyTimers, t.partition, rows.DeadlineKey(tt.tpre, r.key))
				if b.expired == nil {
					b.expired = map[string]bool{}
				}
				b.expired[string(r.key)] = true // the timer sweep below reads the store, not the Txn
				if b.timersGone == nil {
					b.timersGone = map[string]bool{}
				}
				b.timersGone[string(r.key)] = true
			}
			res.Expired++
			continue
		}
		if b.timerSeen == nil {
			b.timerSeen = map[string]bool{}
		}
		b.timerSeen[string(r.key)] = true
		deleted, sc, out, err := tt.timer.fire(rc, tt, rows.DecodeDeadline(r.at))
		if err != nil {
			if errors.As(err, new(errFatal)) {
				return 0, false, err
			}
			// Its writes are undone; it is retried, blocks its key or is
			// dead-lettered (timer_failure.go).
			keep, retry := t.timerFailed(b, res, tt, r.key, r.at, attempt, err)
			if keep {
				parked = true
				next = min(next, retry)
				continue
			}
			tx.DeleteRow(FamilyTimers, t.partition, r.index)
			tx.DeleteRow(FamilyTimers, t.partition, kr)
			continue
		}
		tx.DeleteRow(FamilyTimers, t.partition, r.index)
		tx.DeleteRow(FamilyTimers, t.partition, kr)
		res.Fired++
		b.timerEmits = append(b.timerEmits, out...)
		t.written(rc, tt, deleted, sc)
	}
	return next, parked, nil
}
