package stream

import (
	"fmt"
	"time"
)

// The replication changelog's vocabulary (docs/design.md §15), defined
// here once: package topology and the changelog use these types under
// their own names.

// RestoreProgress is how far the rebuilding of a partition from its
// changelog is: it read up to Offset of the changelog, which ended at End
// when it began (0: unknown); Applied commits and snapshot chunks so far.
type RestoreProgress struct {
	Partition         uint32
	From, Offset, End uint64
	Applied           int
	Snapshot          bool // it began from a snapshot
	Reused            bool // the local rows were current and kept
	Done              bool
	// Took is how long the restore took (set once it is Done, by the
	// App that ran it).
	Took time.Duration
}

// ChangelogKind is the kind of a changelog record. Its values are written
// in the changelog's records: they never change.
type ChangelogKind uint8

const (
	// ChangelogFence: a new owner took the partition over (Epoch, Member).
	ChangelogFence ChangelogKind = iota + 1
	// ChangelogCommit: one commit of the partition.
	ChangelogCommit
	// ChangelogSnapshot: part of a snapshot of the partition's rows.
	ChangelogSnapshot
	// ChangelogSnapshotEnd: a snapshot is complete.
	ChangelogSnapshotEnd
)

// String returns "fence", "commit", "snapshot-chunk" or "snapshot-end".
func (k ChangelogKind) String() string {
	switch k {
	case ChangelogFence:
		return "fence"
	case ChangelogCommit:
		return "commit"
	case ChangelogSnapshot:
		return "snapshot-chunk"
	case ChangelogSnapshotEnd:
		return "snapshot-end"
	}
	return fmt.Sprintf("ChangelogKind(%d)", uint8(k))
}

// ChangelogVerdict is what the rules of a changelog say about an entry
// (docs/design.md §15).
type ChangelogVerdict uint8

const (
	// ChangelogValid: a commit of the partition's history (or a fence that
	// raised its epoch).
	ChangelogValid ChangelogVerdict = iota + 1
	// ChangelogFenced: a commit of a deposed owner, after a newer fence;
	// no reader applies it.
	ChangelogFenced
	// ChangelogDuplicate: a commit sent again.
	ChangelogDuplicate
	// ChangelogInconsistent: a gap in the commit numbers, or an epoch
	// without its fence.
	ChangelogInconsistent
	// ChangelogOther: another kind of record, which changed nothing.
	ChangelogOther
)

// String returns "valid", "fenced", "duplicate", "inconsistent" or "other".
func (v ChangelogVerdict) String() string {
	switch v {
	case ChangelogValid:
		return "valid"
	case ChangelogFenced:
		return "fenced"
	case ChangelogDuplicate:
		return "duplicate"
	case ChangelogInconsistent:
		return "inconsistent"
	case ChangelogOther:
		return "other"
	}
	return fmt.Sprintf("ChangelogVerdict(%d)", uint8(v))
}
