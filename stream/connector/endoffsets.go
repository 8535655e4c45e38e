package connector

import "context"

// EndOffsetter is implemented by a Source that can report the end of its
// partitions cheaply (connectors/iggy's Source does it in one round trip).
// A processor asks it periodically to measure its lag
// (stream.PartitionStats.End and Lag) and to tell when it has caught up.
type EndOffsetter interface {
	// EndOffsets returns, for every partition 0..n-1, the offset the next
	// record appended to it will get (0 for an empty partition).
	EndOffsets(ctx context.Context) ([]uint64, error)
}
