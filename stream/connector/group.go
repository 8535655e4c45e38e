package connector

import (
	"context"
	"fmt"
	"time"
)

// Epoch numbers the grants of one partition: every grant of a partition to
// a member carries a higher epoch than the grant before it, so whoever
// remembers the highest epoch it accepted for a partition can refuse what
// an earlier owner sends after it lost the partition (docs/design.md,
// "Ownership" and "Scale-out"). Epochs compare only within one group.
type Epoch uint64

// MemberID identifies one incarnation of a member of a group. A member
// that was declared dead joins again under a new MemberID.
type MemberID uint64

// AssignmentKind says what an Assignment reports.
type AssignmentKind uint8

const (
	// Gained: the member owns the partition from now on, with Epoch.
	Gained AssignmentKind = iota + 1
	// Revoking: the group asks the member to give the partition up: stop
	// processing it, then call Membership.HandBack. A member that does not
	// hand it back within its session timeout is declared dead.
	Revoking
	// Lost: the member no longer owns the partition (Reason says why) and
	// must not change anything on its behalf any more.
	Lost
)

func (k AssignmentKind) String() string {
	switch k {
	case Gained:
		return "gained"
	case Revoking:
		return "revoking"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("AssignmentKind(%d)", uint8(k))
}

// LossReason says why a partition was lost.
type LossReason uint8

const (
	// NotLost is the reason of assignments other than Lost.
	NotLost LossReason = iota
	// HandedBack: Membership.HandBack was called for the partition.
	HandedBack
	// Expired: the member could not confirm in time that the group still
	// counts it (it was stalled, cut off from the broker, or kept a
	// revoked partition too long), so it stopped claiming anything before
	// the others may declare it dead; it joins again as a new member.
	Expired
	// Evicted: the group declared the member dead.
	Evicted
	// Closed: the Membership was closed.
	Closed
)

func (r LossReason) String() string {
	switch r {
	case NotLost:
		return "not lost"
	case HandedBack:
		return "handed back"
	case Expired:
		return "lease expired"
	case Evicted:
		return "evicted"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("LossReason(%d)", uint8(r))
}

// Assignment is one change of what a member owns.
type Assignment struct {
	Kind      AssignmentKind
	Partition uint32
	Epoch     Epoch
	Reason    LossReason // for Lost
}

func (a Assignment) String() string {
	if a.Kind == Lost {
		return fmt.Sprintf("%s partition %d epoch %d (%s)", a.Kind, a.Partition, a.Epoch, a.Reason)
	}
	return fmt.Sprintf("%s partition %d epoch %d", a.Kind, a.Partition, a.Epoch)
}

// PartitionOwnership is one partition a member owns.
type PartitionOwnership struct {
	Partition uint32
	Epoch     Epoch
	Revoking  bool // its owner is asked to hand it back
}

// Member is a member of a group, as this instance last learned it: use it
// to route a key's partition to the instance that serves it.
type Member struct {
	ID         MemberID
	Name       string // a name for people (host/pid by default)
	Addr       string // the query address the member announced; may be empty
	Partitions []PartitionOwnership
	LastSeen   time.Time // when the group last heard of it
}

// Group is a way for the instances of one topology to share the
// partitions of its sources, so that each partition has exactly one owner
// at a time. connectors/iggy's Client.Group is one, on an Iggy topic; the
// front door takes it with topology.WithGroup.
type Group interface {
	// Join makes this instance a member of the group of the instances of
	// topology that share partitions 0..partitions-1, announcing addr (its
	// query server's address, or empty) to the others. It returns once
	// the member is in the group; what it owns arrives on Assignments.
	Join(ctx context.Context, topology string, partitions uint32, addr string) (Membership, error)
}

// Membership is one instance's membership of a Group. It is safe for
// concurrent use.
type Membership interface {
	// Assignments delivers, in order, every change of what this member
	// owns. It is closed by Close or when the membership ends for good
	// (Err says why).
	Assignments() <-chan Assignment
	// Owns reports whether the member owns partition p now, and with
	// which epoch. It turns false before any other member may be granted
	// the partition.
	Owns(p uint32) (Epoch, bool)
	// HandBack gives partition p up to the group (after a Revoking, or at
	// will).
	HandBack(ctx context.Context, p uint32) error
	// Members returns every member of the group and what it owns.
	Members() []Member
	// Owner returns the member that owns partition p.
	Owner(p uint32) (Member, Epoch, bool)
	// ID returns the member's current incarnation (0 while it is not in
	// the group).
	ID() MemberID
	// Err returns why the membership ended for good, or nil.
	Err() error
	// Close leaves the group.
	Close() error
}

// Bookmarks is implemented by connectors that can keep a named offset per
// topic partition on the broker (for Iggy, a consumer offset). Scale-out
// uses it to find the latest snapshot of a partition in its changelog
// without reading the changelog from its start.
type Bookmarks interface {
	// Bookmark returns the offset last stored under name for the
	// partition of topic, and false when none is.
	Bookmark(ctx context.Context, topic string, partition uint32, name string) (uint64, bool, error)
	// SetBookmark stores offset under name for the partition of topic.
	SetBookmark(ctx context.Context, topic string, partition uint32, name string, offset uint64) error
}
