package topology

import "context"

// What a query server needs of a table besides Get and Scan: the key bytes
// its rows are filed under, their partition, and a scan of one partition
// that can resume where it stopped (package queryserver pages with it).

// Partitions returns how many partitions the table's rows are filed under:
// the partition count of the sources that feed it, as the App that opened
// the table read it from the connector (0 before an App of its topology
// was open). A key's rows are in partition connector.PartitionOf(key bytes,
// Partitions()).
func (t *Table[K, V]) Partitions() uint32 { return t.t.Partitions() }

// AppendKey appends the bytes the table's key codec encodes k as to dst:
// the bytes of the strand-key header of k's events, which pick their
// partition (connector.PartitionOf). A key the codec refuses (an empty or too
// long string, say) is an error naming the table.
func (t *Table[K, V]) AppendKey(dst []byte, k K) ([]byte, error) { return t.t.AppendKey(dst, k) }

// ScanPartition calls fn with the committed rows filed under one partition,
// in the order of their key bytes, starting after the key bytes after
// (from the partition's first row when after is nil), until fn returns
// false. fn gets each row's key bytes, valid only during the call, with its
// key and value: a caller that stops can resume after the last key bytes
// it saw, and sees every row committed by then that sorts after them. Each
// call sees one consistent state, as Scan does.
func (t *Table[K, V]) ScanPartition(ctx context.Context, partition uint32, after []byte, fn func(key []byte, k K, v V) bool) error {
	return wrapNotOpen(t.t.ScanPartition(ctx, partition, after, fn))
}

// Processes reports whether the App processes partition p of its sources:
// every partition, or those given to WithPartitions; in a group
// (WithGroup), the partitions it serves now (Phase). The rows of the
// others are not in its store, or not current.
func (a *App) Processes(p uint32) bool { return a.runs(p) }
