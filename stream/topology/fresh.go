package topology

import (
	"context"

	"github.com/strand-io/strand/internal/state"
)

// Checkpoint is the committed next offset of one source's partition: the
// events of the partition below it are in the state an answer was read
// from, and none at or above it.
type Checkpoint struct {
	Source string
	Next   uint64
}

// Freshness says which state an answer was read from: the partition the
// row is filed under (the key's own partition when there is no row) and
// that partition's committed checkpoints, one per source that feeds the
// App's store, read from the same view as the value. Reads only ever show
// durable commits (docs/design.md §2), so a later answer, even after a
// crash and restart of the same store, never has a lower checkpoint.
type Freshness struct {
	Partition   uint32
	Checkpoints []Checkpoint
}

func freshness(fr state.Freshness) Freshness {
	out := Freshness{Partition: fr.Partition, Checkpoints: make([]Checkpoint, len(fr.Checkpoints))}
	for i, c := range fr.Checkpoints {
		out.Checkpoints[i] = Checkpoint{Source: c.Source, Next: c.Next}
	}
	return out
}

// GetFresh is Get that also says how fresh the answer is.
func (t *Table[K, V]) GetFresh(ctx context.Context, k K) (V, bool, Freshness, error) {
	v, ok, fr, err := t.t.GetFresh(ctx, k)
	return v, ok, freshness(fr), wrapNotOpen(err)
}

// ScanPartitionFresh is ScanPartition that also says how fresh the rows
// are.
func (t *Table[K, V]) ScanPartitionFresh(ctx context.Context, partition uint32, after []byte, fn func(key []byte, k K, v V) bool) (Freshness, error) {
	fr, err := t.t.ScanPartitionFresh(ctx, partition, after, fn)
	return freshness(fr), wrapNotOpen(err)
}

// GetRecent is GetFresh that never waits for the store: it answers from
// the newest durable view, which may miss the commits of about the last
// write-ahead log fsync (the next reads see them). Like every read it
// never shows what a crash can take back, and a later answer is never
// older; its Freshness says which state it saw. The query server answers
// with it.
func (t *Table[K, V]) GetRecent(ctx context.Context, k K) (V, bool, Freshness, error) {
	v, ok, fr, err := t.t.GetRecent(ctx, k)
	return v, ok, freshness(fr), wrapNotOpen(err)
}

// ScanPartitionRecent is ScanPartitionFresh that never waits for the
// store (as GetRecent).
func (t *Table[K, V]) ScanPartitionRecent(ctx context.Context, partition uint32, after []byte, fn func(key []byte, k K, v V) bool) (Freshness, error) {
	fr, err := t.t.ScanPartitionRecent(ctx, partition, after, fn)
	return freshness(fr), wrapNotOpen(err)
}
