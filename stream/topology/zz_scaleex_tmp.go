package topology

// TEMPORARY (branch scaleex): stand-ins for the group runtime's API, so that
// the query server's router and the accounts example compile before the
// runtime lands on main. Deleted before the branch's final commit.

import (
	"errors"
	"time"

	"github.com/strand-io/strand/stream"
)

var errTmpNoGroup = errors.New("topology: group mode is not implemented on this branch yet")

// WithGroup is a stand-in.
func WithGroup(g stream.Group) OpenOption {
	return func(*openOptions) error { return errTmpNoGroup }
}

// WithQueryAddr is a stand-in.
func WithQueryAddr(addr string) OpenOption { return func(*openOptions) error { return nil } }

// WithSnapshotEvery is a stand-in.
func WithSnapshotEvery(commits int) OpenOption { return func(*openOptions) error { return nil } }

// Phase is a stand-in.
type Phase uint8

// Phases (stand-ins).
const (
	NotOwned Phase = iota
	Restoring
	Serving
)

// Phase is a stand-in.
func (a *App) Phase(p uint32) Phase { return NotOwned }

// Membership is a stand-in.
func (a *App) Membership() stream.Membership { return nil }

// ChangelogKind is a stand-in.
type ChangelogKind uint8

// Kinds (stand-ins).
const (
	ChangelogFence ChangelogKind = iota + 1
	ChangelogCommit
	ChangelogSnapshot
)

// ChangelogEntry is a stand-in.
type ChangelogEntry struct {
	Kind        ChangelogKind
	Epoch       stream.Epoch
	Member      stream.MemberID
	Seq         uint64
	Checkpoints []CheckpointRange
}

// CheckpointRange is a stand-in.
type CheckpointRange struct {
	Source     string
	From, Next uint64
}

// DecodeChangelog is a stand-in.
func DecodeChangelog(payload []byte) (ChangelogEntry, error) { return ChangelogEntry{}, errTmpNoGroup }

// ChangelogSnapshotEnd is a stand-in.
const ChangelogSnapshotEnd ChangelogKind = 4

// ChangelogTopic is a stand-in.
func ChangelogTopic(streamName, topology string) string {
	return streamName + "/strand-changelog-" + topology
}

// PartitionStatus is a stand-in.
type PartitionStatus struct {
	Partition uint32
	Phase     Phase
	Epoch     stream.Epoch
	Restore   RestoreProgress
}

// RestoreProgress is a stand-in.
type RestoreProgress struct {
	From, Offset, End uint64
	Applied           int
	Snapshot          bool
	Reused            bool
	Done              bool
	Took              time.Duration
}

// Ownership is a stand-in.
func (a *App) Ownership() []PartitionStatus { return nil }

// String is a stand-in.
func (p Phase) String() string {
	switch p {
	case NotOwned:
		return "not owned"
	case Restoring:
		return "restoring"
	case Serving:
		return "serving"
	}
	return "Phase(?)"
}

// String is a stand-in.
func (k ChangelogKind) String() string { return "kind" }
