package topology

import (
	"context"
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream"
)

// ResequenceOption configures the re-sequencer of a source (Resequence).
// An invalid option is refused by Build, with an error naming it.
type ResequenceOption interface {
	apply(*executor.ResequenceSpec) error
}

// resequenceOptionFunc adapts a function to ResequenceOption.
type resequenceOptionFunc func(*executor.ResequenceSpec) error

func (f resequenceOptionFunc) apply(c *executor.ResequenceSpec) error { return f(c) }

// WithSeqStart sets where each key's sequence starts: stream.StartAtOne (the
// default) or stream.StartAtFirstSeen, for streams that ran before strand.
func WithSeqStart(s stream.SeqStart) ResequenceOption {
	return resequenceOptionFunc(func(r *executor.ResequenceSpec) error {
		if !s.Valid() {
			return fmt.Errorf("strand: topology.WithSeqStart(%d): unknown start", uint8(s))
		}
		r.Start = s
		return nil
	})
}

// WithGapPolicy sets what happens to a gap in a key's sequence: stream.GapWait
// (the default; timeout must be 0), or stream.GapSkip or
// stream.GapDeadLetter once the oldest record held behind the gap has
// waited timeout on the App's clock (0: only when a bound overflows).
func WithGapPolicy(p stream.GapPolicy, timeout time.Duration) ResequenceOption {
	return resequenceOptionFunc(func(r *executor.ResequenceSpec) error {
		switch {
		case !p.Valid():
			return fmt.Errorf("strand: topology.WithGapPolicy(%d, %v): unknown policy", uint8(p), timeout)
		case timeout < 0:
			return fmt.Errorf("strand: topology.WithGapPolicy(%s, %v): negative timeout", p, timeout)
		case p == stream.GapWait && timeout != 0:
			return fmt.Errorf("strand: topology.WithGapPolicy(%s, %v): wait never times out; give 0, or choose skip or dead-letter", p, timeout)
		}
		r.Gap, r.GapTimeout = p, timeout
		return nil
	})
}

// WithHoldLimits bounds the records held per key and per partition (defaults
// 10,000 and 100,000). When a bound overflows, the key's first gap is given
// up at once by the gap policy (under GapWait: dead-lettered).
func WithHoldLimits(perKey, perPartition int) ResequenceOption {
	return resequenceOptionFunc(func(r *executor.ResequenceSpec) error {
		if perKey < 1 || perPartition < 1 {
			return fmt.Errorf("strand: topology.WithHoldLimits(%d, %d): want at least 1 each", perKey, perPartition)
		}
		r.MaxHeldPerKey, r.MaxHeld = perKey, perPartition
		return nil
	})
}

// WithDuplicatePolicy sets what happens to a record whose sequence number its key
// has already applied, given up, or holds: stream.DropDuplicates (the
// default) or stream.DeadLetterDuplicates. Duplicates are never applied
// and always counted (stream.Counters.Duplicates).
func WithDuplicatePolicy(p stream.DuplicatePolicy) ResequenceOption {
	return resequenceOptionFunc(func(r *executor.ResequenceSpec) error {
		if !p.Valid() {
			return fmt.Errorf("strand: topology.WithDuplicatePolicy(%d): unknown policy", uint8(p))
		}
		r.Duplicates = p
		return nil
	})
}

// WithGapNotice sets a function called after each commit with every gap the
// commit gave up. The durable record is in the store (App.Gaps), committed
// with the state the gap changed; fn is a notification, called on the
// partition's goroutine, and must not block.
func WithGapNotice(fn func(stream.GapNotice)) ResequenceOption {
	return resequenceOptionFunc(func(r *executor.ResequenceSpec) error {
		if fn == nil {
			return fmt.Errorf("strand: topology.WithGapNotice: nil function")
		}
		r.OnGap = fn
		return nil
	})
}

// Resequence turns the re-sequencer on for the source (docs/design.md §10):
// the events of every type declared with stream.WithSequence are applied in
// the order of their sequence numbers, per key, whatever order the log has
// them in; their strand-seq headers alone decide it. A record with the
// next expected number is applied at once, followed by the held ones that
// now follow on; a higher number is held, durably, until its predecessors
// arrive or its gap is given up (GapPolicy, WithHoldLimits); a lower one is a
// duplicate (WithDuplicatePolicy). A sequenced type's record without a valid
// strand-seq header is dead-lettered (deadletter.ReasonBadSequence). Types
// without Sequence pass through unaffected. It returns s for chaining;
// Build refuses a source with Resequence but no sequenced type.
func (s *SourceNode[K]) Resequence(opts ...ResequenceOption) *SourceNode[K] {
	n := &s.t.sources[s.idx]
	spec := &executor.ResequenceSpec{}
	if n.reseq != nil {
		s.t.errs = append(s.t.errs, fmt.Errorf("source %q: Resequence given twice", n.name))
		return s
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(spec); err != nil {
			s.t.errs = append(s.t.errs, fmt.Errorf("source %q: Resequence: %w", n.name, err))
		}
	}
	n.reseq = spec
	return s
}

// Held returns the records the re-sequencer holds for key (its bytes, as
// the key codec writes them) in a source partition, in sequence order, as
// last committed.
func (a *App) Held(ctx context.Context, source string, partition uint32, key []byte) ([]stream.HeldRecord, error) {
	return executor.ReadHolds(ctx, a.db, source, partition, key)
}

// Gaps returns the gaps the re-sequencer gave up for key in a source
// partition (every key's when key is nil), as last committed: the
// durable record of every stream.GapNotice.
func (a *App) Gaps(ctx context.Context, source string, partition uint32, key []byte) ([]stream.GapNotice, error) {
	return executor.ReadGaps(ctx, a.db, source, partition, key)
}
