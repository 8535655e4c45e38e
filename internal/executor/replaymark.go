package executor

import (
	"encoding/binary"
	"fmt"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
)

// A reset (internal/reset, docs/design.md §19) leaves per source partition
// a replay mark: the offset the partition had reached. While the rebuild
// reads the partition again below it, a Task folds every record into the
// tables but publishes nothing: no outbox message (To, KeyBy), no dead
// letter, no ForEach call for a run wholly below the mark. Those outputs
// were published when the record was first read.

// loadReplayMark reads the partition's replay mark (0: none).
func (t *Task) loadReplayMark() error {
	v, ok, err := t.db.Row(state.FamilyReplayMark, t.partition, rows.AppendString(nil, t.src.name))
	if err != nil || !ok {
		return err
	}
	if len(v) != 8 {
		return fmt.Errorf("malformed replay mark %x", v)
	}
	t.replayMark = binary.BigEndian.Uint64(v)
	return nil
}

// replayed reports whether record i of b was processed before a reset:
// nothing is published for it again.
func (b *batch) replayed(i int) bool { return b.records[i].Offset < b.replayMark }

// replayedRun reports whether every record of a run (indexes into b's
// records) was processed before a reset: its ForEach handlers were called
// then and are not called again. A run that straddles the mark calls them
// (ForEach is at-least-once).
func replayedRun(b *batch, idx []int) bool {
	if b.replayMark == 0 || len(idx) == 0 {
		return false
	}
	for _, i := range idx {
		if !b.replayed(i) {
			return false
		}
	}
	return true
}

// Replaying returns the partition's replay mark while its checkpoint is
// below it (it is being rebuilt after a reset), else 0.
func (t *Task) Replaying() uint64 {
	if t.next < t.replayMark {
		return t.replayMark
	}
	return 0
}

// replayingTimers reports whether the timers that fired in b fired while
// the partition is rebuilt after a reset (its first record was processed
// before the reset): what they emit was published when they first fired
// and is not published again. Their table writes are applied, as every
// record's are (docs/design.md §19).
func (b *batch) replayingTimers() bool {
	return b.replayMark > 0 && len(b.records) > 0 && b.replayed(0)
}
