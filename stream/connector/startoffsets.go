package connector

import "context"

// StartOffsetter is implemented by a Source that can report where its
// partitions start: the offset of the oldest record each still holds,
// after its retention removed older ones (memconn's topics and
// connectors/iggy's Source do). An App asks it before building a table
// from the log (docs/design.md §19), to refuse a build whose records are
// gone before it starts instead of at its first read.
type StartOffsetter interface {
	// StartOffsets returns, for every partition 0..n-1, the offset of its
	// oldest retained record, or, when it holds none, the offset the next
	// record appended to it will get (0 for a partition never written).
	StartOffsets(ctx context.Context) ([]uint64, error)
}
