package connector

import "github.com/strand-io/strand/internal/xxh32"

// PartitionOf returns the partition, of a source with the given partition
// count, that holds the events of the key whose bytes (as its key codec
// writes them: the strand-key header) are key: XXH32(key, seed 0) %
// partitions, Iggy's "messages key" partitioning, which strand's
// publishers use (docs/design.md §5). A table's rows of the key are filed
// under that partition, so it is also where a query for the key is
// answered. It returns 0 when partitions is 0.
func PartitionOf(key []byte, partitions uint32) uint32 { return xxh32.Partition(key, partitions) }
