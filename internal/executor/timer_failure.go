package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
)

// Failed timers (docs/design.md §18). A timer handler that fails (an error
// or a panic) follows the failure policy of an event: its writes are undone
// and its timer rows stay; the key is parked *at its timer* (a parked key
// whose FailedAt is timerFailedAt, with no record of its own), so its later
// events wait behind the timer as they would behind a failing event, and
// the timer is tried again by the sweep of the first batch or retry after
// the backoff, before the key's parked events. Its tries count like a
// record's (Spec.MaxAttempts); a Permanent error or the last try ends it:
//
//   - under PassPoison the timer is dead-lettered (deadletter.ReasonTimer, a
//     row of the commit, published after it exactly once like every dead
//     letter), its rows are removed and the key goes on;
//   - under BlockPoisonedKey the key is blocked (a manual parked key) with
//     its timer kept, until Unblock makes it due: the timer is then tried
//     again from its first try.
//
// Everything is decided in the sweep and written into the batch's Txn:
// attempts, the parked key's meta row, the dead letter and the removal of
// the timer commit together, so a crash repeats the whole try or none of it.

// timerFailedAt is the FailedAt of a key parked at its failing timer: no
// record has this offset.
const timerFailedAt = math.MaxUint64

// atTimer reports whether the key stopped at a failing timer.
func (pk *parkedKey) atTimer() bool { return pk.failedAt == timerFailedAt }

// timerStop is a key that a batch's sweep leaves parked at its timer.
type timerStop struct {
	attempts int       // failed tries in a row
	lastErr  string    // the last try's error
	blocked  bool      // blocked until Unblock (BlockPoisonedKey)
	next     time.Time // when the timer is tried again (unless blocked)
	// carry: the sweep did not try the timer (it did not reach it): the
	// key's parked state is kept as it was.
	carry bool
}

// timerTry returns the try that firing key's due timer now would be, and
// false when the timer must wait: the key is parked behind an event, or at
// its timer with the backoff not passed, or it stopped at another timer in
// this sweep.
func (t *Task) timerTry(b *batch, key []byte) (attempt int, ok bool) {
	if _, stopped := b.timerStops[string(key)]; stopped {
		return 0, false
	}
	pk, parked := t.parked[string(key)]
	if !parked {
		return 1, true
	}
	if pk.atTimer() && b.due[string(key)] {
		return pk.attempts + 1, true
	}
	return 0, false
}

// timerWaits returns when a parked key's timer, which the sweep passed, is
// tried again (MaxUint64: not by time).
func (t *Task) timerWaits(key []byte) uint64 {
	if pk, ok := t.parked[string(key)]; ok && pk.atTimer() && !pk.manual {
		return rows.EncodeDeadline(pk.next)
	}
	return math.MaxUint64
}

// timerFailed deals with the failure of a timer handler's attempt-th try:
// it returns whether the timer rows stay, and when the timer is tried again
// (MaxUint64: not by time).
func (t *Task) timerFailed(b *batch, res *Result, tt *tableTime, key []byte, at uint64, attempt int, err error) (keep bool, retry uint64) {
	res.TimerFailures++
	due := rows.DecodeDeadline(at)
	werr := fmt.Errorf("timer of table %q due at %s: %w", tt.name, due.UTC().Format(time.RFC3339Nano), err)
	action := "parked"
	last := errors.Is(err, stream.ErrPermanent) || attempt >= t.prog.maxAttempts
	switch {
	case !last:
		next := b.now.Add(t.backoff(attempt))
		b.stopAtTimer(key, timerStop{attempts: attempt, lastErr: werr.Error(), next: next})
		keep, retry = true, rows.EncodeDeadline(next)
	case b.poison == stream.BlockPoisonedKey:
		action = "blocked"
		b.stopAtTimer(key, timerStop{attempts: attempt, lastErr: werr.Error(), blocked: true})
		keep, retry = true, math.MaxUint64
	default:
		action = "dead-lettered"
		t.deadLetterTimer(b, res, tt, key, at, attempt, werr)
	}
	res.Failures = append(res.Failures, Failure{Key: key, Attempt: attempt, Action: action, Err: werr})
	t.log.Error("strand: timer handler failed",
		slog.String("source", t.src.name), slog.Uint64("partition", uint64(t.partition)),
		slog.String("table", tt.name), slog.String("key", fmt.Sprintf("%q", key)),
		slog.Time("at", due), slog.Int("attempt", attempt), slog.String("action", action), slog.Any("err", err))
	return keep, retry
}

func (b *batch) stopAtTimer(key []byte, ts timerStop) {
	if b.timerStops == nil {
		b.timerStops = map[string]timerStop{}
	}
	b.timerStops[string(key)] = ts
}

// deadLetterTimer writes the dead letter of a timer into b's Txn, ordered
// at the offset of the batch's last record (the checkpoint's predecessor
// for a retry without records), so it is published once the commit
// returned, like the batch's own dead letters; its row key names the timer
// (rows.TimerDeadLetterKey) and its message id hashes its payload.
func (t *Task) deadLetterTimer(b *batch, res *Result, tt *tableTime, key []byte, at uint64, attempt int, err error) {
	off := max(t.next, 1) - 1
	if b.last.ok {
		off = b.last.offset
	}
	dl := deadletter.Letter{
		Source: t.src.name, Partition: t.partition, Offset: off,
		Reason: deadletter.ReasonTimer, Err: err, Attempts: attempt,
		Payload: deadletter.Timer{Table: tt.name, Key: append([]byte(nil), key...), At: rows.DecodeDeadline(at)}.Payload(),
	}
	b.tx.PutRow(state.FamilyDeadLetters, t.partition, rows.TimerDeadLetterKey(t.src.name, off, tt.name, at, key), rows.AppendLetter(nil, dl))
	res.DeadLetters = append(res.DeadLetters, dl)
}

// carryTimerStops keeps parked the keys retried by b (due) that stopped at
// a timer the sweep did not try (it did not reach it): their events must
// not overtake it. A key whose timer is gone (its row expired) goes on.
func (t *Task) carryTimerStops(b *batch) error {
	for k := range b.due {
		pk := t.parked[k]
		if pk == nil || !pk.atTimer() || b.timerSeen[k] {
			continue
		}
		if _, ok := b.timerStops[k]; ok || b.timersGone[k] {
			continue
		}
		has := false
		for _, tt := range t.swept() {
			if tt.tpre == nil {
				continue
			}
			_, ok, err := t.db.Row(FamilyTimers, t.partition, rows.DeadlineKey(tt.tpre, []byte(k)))
			if err != nil {
				return fmt.Errorf("read the timer of key %q: %w", k, err)
			}
			has = has || ok
		}
		if has {
			b.stopAtTimer([]byte(k), timerStop{carry: true})
		}
	}
	return nil
}

// timerDue makes a batch that retries a key parked at its timer sweep, so
// the timer is tried before the key's events; when it cannot sweep (a
// commit in flight) such keys are not retried by it.
func (t *Task) timerDue(due []*parkedKey, canSweep bool, sweepDue *bool) []*parkedKey {
	out := due[:0]
	for _, pk := range due {
		if pk.atTimer() {
			if !canSweep {
				continue
			}
			*sweepDue = true
		}
		out = append(out, pk)
	}
	return out
}

// writeTimerStop writes the meta row of a key parked at its timer.
func (t *Task) writeTimerStop(b *batch, pk *parkedKey, ts timerStop) {
	if !ts.carry {
		pk.attempts, pk.failedAt, pk.manual, pk.next, pk.lastErr = ts.attempts, timerFailedAt, ts.blocked, ts.next, ts.lastErr
	}
	b.tx.PutRow(state.FamilyParked, t.partition, t.parkedKeyRow(pk.key), pk.metaValue())
}

// releasedTimer lets a released key's timer be tried at once.
func (t *Task) releasedTimer(pk *parkedKey) {
	if pk.atTimer() {
		t.lowerDue(pk.next.UnixNano())
	}
}
