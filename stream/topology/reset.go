package topology

import (
	"context"
	"errors"

	"log/slog"

	"github.com/strand-io/strand/internal/reset"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
)

// ErrResetRefused is wrapped by Reset when a state directory cannot be
// reset now: records are parked or held by the re-sequencer (their outputs
// are still to come), or the store was run in a group. The message says
// what to do.
var ErrResetRefused = reset.ErrRefused

// ResetOption configures Reset.
type ResetOption interface {
	apply(*resetOptions) error
}

// resetOptionFunc adapts a function to ResetOption.
type resetOptionFunc func(*resetOptions) error

func (f resetOptionFunc) apply(c *resetOptions) error { return f(c) }

type resetOptions struct {
	dryRun bool
	log    *slog.Logger
}

// WithDryRun makes Reset change nothing and report what it would do.
func WithDryRun() ResetOption {
	return resetOptionFunc(func(o *resetOptions) error { o.dryRun = true; return nil })
}

// WithResetLogger sets the logger of the store Reset opens (default: a
// logger that discards). A nil logger is refused.
func WithResetLogger(l *slog.Logger) ResetOption {
	return resetOptionFunc(func(o *resetOptions) error {
		if l == nil {
			return errors.New("strand: WithResetLogger: nil logger")
		}
		o.log = l
		return nil
	})
}

// ResetReport is what Reset did, or would do (DryRun).
type ResetReport struct {
	// Dir is the state directory; DryRun says nothing was changed.
	Dir    string
	DryRun bool
	// Rewinds lists the checkpoints deleted: each source partition is read
	// again from its oldest retained record, and nothing is published
	// again (To, KeyBy, dead letters, ForEach) for offsets below Mark.
	Rewinds []ResetRewind
	// Tables lists the tables whose rows are deleted, to be rebuilt.
	Tables []ResetTable
	// Origins and Sequences count the rows of the duplicate check of
	// strand topics and of the re-sequencer that are deleted (the rebuild
	// makes them again).
	Origins, Sequences int
	// Outbox and DeadLetters count the messages kept: committed before the
	// reset, they are still published.
	Outbox, DeadLetters int

	text string
}

// ResetRewind is one source partition a reset rewinds: its checkpoint was
// From; records below Mark publish nothing again.
type ResetRewind struct {
	Source    string
	Partition uint32
	From      uint64
	Mark      uint64
}

// String describes the reset for a person, one line per step.
func (r *ResetReport) String() string { return r.text }

// Reset makes the state directory dir ready to be rebuilt from the log by
// the topology that opens it next — the same one, or a changed one that
// Open refused (TopologyChangedError) — without publishing anything twice
// (docs/design.md §19). It deletes every checkpoint, table row and
// re-sequencer row, the duplicate check of strand topics and the stored
// topology; it keeps the outbox (messages committed before are still
// published, and its sequence numbers go on rising, so readers of the
// outputs apply what comes after), pending dead letters and what the store
// knows of its sources. Each source partition remembers its old checkpoint
// as a replay mark: while the next App reads the log again from its oldest
// retained record, the records below the mark are folded into the tables
// but publish nothing (no To or KeyBy message, no dead letter, no ForEach
// call for a run wholly below it): they did when first read. A table is
// then the fold of the retained log: a log whose retention dropped records
// gives tables without them.
//
// Reset refuses (ErrResetRefused) a store with parked records or records
// held by the re-sequencer, and a store run in a group; it fails, naming
// the App, while an App has the directory open. WithDryRun reports what it
// would do and changes nothing.
func Reset(ctx context.Context, dir string, opts ...ResetOption) (*ResetReport, error) {
	o := resetOptions{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	plan, err := reset.Store(ctx, dir, o.dryRun, state.WithLogger(o.log))
	if err != nil {
		return nil, strerr.Errorf("strand: reset %s: %w", dir, lockHint(dir, err))
	}
	r := &ResetReport{Dir: plan.Dir, DryRun: plan.DryRun, Origins: plan.Origins, Sequences: plan.Sequences,
		Outbox: plan.Outbox, DeadLetters: plan.DeadLetters, text: plan.String()}
	for _, rw := range plan.Rewinds {
		r.Rewinds = append(r.Rewinds, ResetRewind(rw))
	}
	for _, t := range plan.Tables {
		r.Tables = append(r.Tables, ResetTable{Name: t.Name, Rows: t.Rows})
	}
	return r, nil
}

// ResetTable is a table a reset empties, with the rows it deletes.
type ResetTable struct {
	Name string
	Rows int
}
