package topology

import "github.com/strand-io/strand/stream"

// What a refused start says (docs/design.md §19). A state directory keeps a
// readable description of the topology that wrote it; Open of another
// topology is refused with a *TopologyChangedError that lists every
// difference and, for each, whether the stored rows keep their meaning.

// TopologyChangedError is the error Open returns (wrapped) for a state
// directory written by another topology: errors.As finds it, errors.Is
// matches ErrIncompatibleTopology. Changes lists the differences; its
// message says what to do (strand reset, or Reset). It is
// stream.TopologyChangedError.
type TopologyChangedError = stream.TopologyChangedError

// Change is one difference between the topology that wrote a state
// directory and the one being opened (stream.Change).
type Change = stream.Change

// ChangeKind says how a part of a topology changed: ChangeAdded,
// ChangeRemoved, ChangeModified (stream.ChangeKind).
type ChangeKind = stream.ChangeKind

// The kinds of change.
const (
	ChangeAdded    = stream.ChangeAdded
	ChangeRemoved  = stream.ChangeRemoved
	ChangeModified = stream.ChangeModified
)

// Safety says whether the rows a state directory holds keep their meaning
// after a change: Safe, or NeedsRebuild (Change.Rebuild names the tables).
// It is stream.Safety.
type Safety = stream.Safety

// The safeties of a change.
const (
	Safe         = stream.Safe
	NeedsRebuild = stream.NeedsRebuild
)

// Description returns the readable description of the topology that its
// state directories keep: one line per part that gives stored rows their
// meaning (name, sources and key types, event types with fence and
// algebra, projections, To and KeyBy steps, tables with types and codecs).
func (p *Program) Description() string { return p.p.Description() }

// WithTableVersion declares the version of a table's fold and values (the
// default, 0, is none). Change it when a projection's fold or the value's
// meaning changes in a way no declaration shows (a fixed bug, a new
// field): a state directory written with another version is refused by
// Open, naming the table as needing a rebuild (strand reset).
func WithTableVersion(v uint32) TableOption {
	return tableOptionFunc(func(o *tableOptions) { o.version = v })
}
