// Package reset makes a strand store ready to be rebuilt from the log by
// the next App that opens it, without publishing anything twice
// (docs/design.md §19; topology.Reset and `strand reset` build on it).
package reset

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/strand-io/strand/internal/inspect"
	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
)

// A reset makes a store ready to be rebuilt from the log by whatever
// topology opens it next (docs/design.md §19), without publishing anything
// twice:
//
//   - every checkpoint is deleted (each partition is read again from its
//     oldest retained record) and, per source partition, a replay mark is
//     written: the old checkpoint. A Task publishes nothing for a record
//     below its partition's mark: no outbox message (To, KeyBy), no dead
//     letter, no ForEach call for a run wholly below it. Those outputs
//     were published by the run that read the record first.
//   - every table row is deleted, and the topology's fingerprint and
//     description (the next Open stores its own);
//   - the origins (the duplicate check of strand topics, and the replayed
//     dead letters applied) are deleted: the rebuild applies every message
//     of a strand topic once again, and rebuilds them as it goes;
//   - the re-sequencer's next numbers and gap notices are deleted: the
//     rebuild re-sequences the log from its start.
//   - kept: the outbox rows (messages committed before the reset are still
//     published) and the outbox's next sequence number per source
//     partition (readers of the outputs keep the highest number they
//     applied per origin: numbers must go on rising, or they would drop
//     what comes after the reset), pending dead letters, the sources'
//     partition counts and identities, the store's id.
//
// A reset is refused while records are parked or held by the re-sequencer
// (they were not applied: their outputs are still to come, and a mark
// would suppress them), and for a store run in a group (changelog rows).

// ErrRefused is wrapped by Store when the store cannot be reset now;
// the message says why and what to do.
var ErrRefused = errors.New("strand: reset refused")

// Plan is what Store did, or would do (DryRun).
type Plan struct {
	// Dir is the state directory; DryRun says nothing was changed.
	Dir    string
	DryRun bool
	// Rewinds lists, per source partition, the checkpoint deleted (From)
	// and the replay mark (below it nothing is published again).
	Rewinds []Rewind
	// Tables lists the tables whose rows are deleted.
	Tables []inspect.Table
	// Origins and Sequences count the duplicate-check and re-sequencer
	// rows deleted.
	Origins, Sequences int
	// Outbox and DeadLetters count what is kept and still published.
	Outbox, DeadLetters int
}

// Rewind is one source partition a reset rewinds.
type Rewind struct {
	Source    string
	Partition uint32
	From      uint64
	Mark      uint64
}

// String describes the plan for a person, one line per step.
func (p *Plan) String() string {
	var b strings.Builder
	if p.DryRun {
		fmt.Fprintf(&b, "reset of %s (dry run: nothing is changed)\n", p.Dir)
	} else {
		fmt.Fprintf(&b, "reset of %s: done\n", p.Dir)
	}
	for _, r := range p.Rewinds {
		fmt.Fprintf(&b, "  rewind  source %q partition %d: from offset %d to its oldest retained record; nothing is published again for offsets below %d\n",
			r.Source, r.Partition, r.From, r.Mark)
	}
	for _, t := range p.Tables {
		fmt.Fprintf(&b, "  drop    table %q: %d rows (rebuilt from the log)\n", t.Name, t.Rows)
	}
	fmt.Fprintf(&b, "  drop    %d origin rows (the duplicate check of strand topics, rebuilt as the log is read again)\n", p.Origins)
	fmt.Fprintf(&b, "  drop    %d re-sequencer rows (next numbers, gap notices)\n", p.Sequences)
	b.WriteString("  drop    the topology's fingerprint and description: the next Open stores its own topology\n")
	fmt.Fprintf(&b, "  keep    %d outbox messages and %d dead letters waiting to be published, the outbox's sequence numbers, the sources' partition counts and identities\n",
		p.Outbox, p.DeadLetters)
	return b.String()
}

// refuseReset says why the store described by in cannot be reset ("": it
// can).
func refuseReset(parked, held int, grouped bool) string {
	switch {
	case grouped:
		return "the store was run in a group (JoinGroup: it has changelog rows); a group's stores are rebuilt by giving every instance a new state directory"
	case parked > 0 || held > 0:
		return fmt.Sprintf("%d records are parked (retrying) and %d held by the re-sequencer: they were not applied and their outputs are still to come, "+
			"which a reset would lose; run the App until they are applied or dead-lettered (strand inspect shows them), then reset", parked, held)
	}
	return ""
}

// Store resets the store in dir for a rebuild (see the top of this file),
// or with dryRun only says what it would do. It refuses, wrapping
// ErrRefused, a store with parked or held records or run in a group;
// it fails while an App has the store open (Pebble's lock). opts open the
// store (a logger, say).
func Store(ctx context.Context, dir string, dryRun bool, opts ...state.Option) (*Plan, error) {
	ro, err := state.OpenReadOnly(dir) // fails on a missing store, or one an App has open
	if err != nil {
		return nil, err
	}
	in, err := inspect.Store(ctx, ro)
	if cerr := ro.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	plan := &Plan{Dir: dir, DryRun: dryRun, Tables: in.Tables, Origins: in.Origins, Sequences: in.Sequences,
		DeadLetters: len(in.DeadLetters)}
	for _, o := range in.Outbox {
		plan.Outbox += o.Messages
	}
	parked, held := 0, 0
	for _, p := range in.Parked {
		parked += p.Records
	}
	for _, h := range in.Held {
		held += h.Records
	}
	marks := map[string]uint64{}
	for _, m := range in.ReplayMarks {
		marks[fmt.Sprintf("%s\x00%d", m.Source, m.Partition)] = m.Next
	}
	for _, c := range in.Checkpoints {
		plan.Rewinds = append(plan.Rewinds, Rewind{Source: c.Source, Partition: c.Partition, From: c.Next,
			Mark: max(c.Next, marks[fmt.Sprintf("%s\x00%d", c.Source, c.Partition)])})
	}
	if why := refuseReset(parked, held, in.Grouped); why != "" {
		return plan, fmt.Errorf("%w: %s: %s", ErrRefused, dir, why)
	}
	if dryRun {
		return plan, nil
	}

	// Under the store's lock, everything is read again: an App may have run
	// between the look above and the open.
	db, err := state.Open(dir, opts...)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	for _, f := range []state.Family{state.FamilyParked, state.FamilyHolds, state.FamilyChangelog, state.FamilyLogHead} {
		has, err := db.HasRows(f)
		if err != nil {
			return nil, err
		}
		if has {
			why := refuseReset(1, 0, false)
			switch f {
			case state.FamilyHolds:
				why = refuseReset(0, 1, false)
			case state.FamilyChangelog, state.FamilyLogHead:
				why = refuseReset(0, 0, true)
			}
			return nil, fmt.Errorf("%w: %s: %s", ErrRefused, dir, why)
		}
	}
	cps, err := db.Checkpoints()
	if err != nil {
		return nil, err
	}
	plan.Rewinds = plan.Rewinds[:0]
	var puts []state.RowPut
	for _, c := range cps {
		key := rows.AppendString(nil, c.Source)
		mark := c.Next
		old, ok, err := db.Row(state.FamilyReplayMark, c.Partition, key)
		if err != nil {
			return nil, err
		}
		if ok && len(old) == 8 {
			mark = max(mark, binary.BigEndian.Uint64(old))
		}
		plan.Rewinds = append(plan.Rewinds, Rewind{Source: c.Source, Partition: c.Partition, From: c.Next, Mark: mark})
		puts = append(puts, state.RowPut{Family: state.FamilyReplayMark, Partition: c.Partition, Key: key,
			Value: binary.BigEndian.AppendUint64(nil, mark)})
	}
	if err := db.ResetState(ctx, []state.Family{state.FamilyOrigins, state.FamilySequences, state.FamilyParked, state.FamilyHolds, state.FamilyTimers}, puts); err != nil {
		return nil, err
	}
	if err := db.Close(); err != nil {
		return nil, strerr.Errorf("strand: reset %s: close: %w", dir, err)
	}
	return plan, nil
}
