package executor

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
)

// A handler (a fold, a ForEach function, a To or KeyBy function) that never
// returns must not hold a stop forever (docs/design.md §8, "stops always
// return"). A batch executes on goroutines of its own; the Task waits for
// them or for the batch's context, which the processor cancels when the
// drain timeout after a stop has passed. Then the batch is abandoned: nothing
// of it commits (its records are read again from the checkpoint at the next
// start), the runs that had not returned are logged with their source,
// partition, key, type and handlers and reported in PartitionStats.Stuck,
// and the Task is broken. The stuck goroutines cannot be stopped from
// outside; they end when their handler returns, and the batch's
// transaction is discarded then.

// activeRun is what one worker of a batch runs now: the plan key's index
// plus one (0: nothing yet) and the type tag of the run.
type activeRun struct {
	key atomic.Int32
	tag atomic.Uint32
}

// ErrAbandoned is wrapped by the error of a batch abandoned because its
// context was done while handlers were still running.
var ErrAbandoned = fmt.Errorf("strand: batch abandoned: a handler did not return before the stop's drain timeout")

// executeOrAbandon executes b, or abandons it when b.ctx is done first.
func (t *Task) executeOrAbandon(b *batch, sb *seqBatch) error {
	if len(t.planRec) == 0 {
		return nil
	}
	b.start = time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.execute(b)
	}()
	select {
	case <-done:
		return nil
	case <-b.ctx.Done():
	}
	select {
	case <-done: // the handlers returned on the cancellation
		return nil
	case <-time.After(stuckGrace):
	}
	b.abandoned = true
	b.setFatal(b.ctx.Err())
	stuck := t.stuckRuns(b)
	for _, s := range stuck {
		t.log.Error("strand: handler did not return before the drain timeout; batch abandoned uncommitted",
			slog.String("source", s.Source), slog.Uint64("partition", uint64(s.Partition)),
			slog.String("key", fmt.Sprintf("%q", s.Key)), slog.Uint64("tag", uint64(s.Tag)),
			slog.String("handlers", s.Handlers), slog.Time("since", s.Since))
	}
	t.stuck = stuck
	t.broken = fmt.Errorf("%w (source %q partition %d)", ErrAbandoned, t.src.name, t.partition)
	tx := b.tx
	go func() {
		<-done
		tx.Discard()
	}()
	_ = sb // the Task is broken: its re-sequencer state is not used again
	return strerr.Errorf("strand: source %q partition %d: %w: %w", t.src.name, t.partition, ErrAbandoned, context.Cause(b.ctx))
}

// stuckGrace is how long handlers get to return after the batch's context
// is done before their batch is abandoned.
const stuckGrace = 50 * time.Millisecond

// stuckRuns lists what the workers of an abandoned batch are running.
func (t *Task) stuckRuns(b *batch) []stream.StuckRun {
	var out []stream.StuckRun
	for i := range b.active {
		n := int(b.active[i].key.Load())
		if n == 0 || n > len(b.keys) {
			continue
		}
		tag := planner.Tag(b.active[i].tag.Load())
		s := stream.StuckRun{Source: t.src.name, Partition: t.partition, Key: []byte(b.keys[n-1].Key()),
			Tag: tag, Since: b.start}
		if rt := t.src.routes[tag]; rt != nil {
			s.Handlers = rt.handlers
		}
		out = append(out, s)
	}
	return out
}

// Stuck returns the runs whose handlers had not returned when the Task's
// last batch was abandoned (nil when none was).
func (t *Task) Stuck() []stream.StuckRun { return t.stuck }
