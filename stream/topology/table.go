package topology

import (
	"context"

	"github.com/strand-io/strand/stream"

	"github.com/strand-io/strand/internal/state"
)

// Table is a table of a topology's state: typed values under typed keys,
// folded by the topology's projections and stored in its App's state
// directory. Make one with NewTable. Get and Scan read the state as of the
// last commit, from any goroutine, while the App runs and after Run
// returned, until the App is closed; before an App of the topology is open
// they return an error wrapping ErrNotOpen.
type Table[K, V any] struct {
	t *state.Table[K, V]
}

// Name returns the table's name.
func (t *Table[K, V]) Name() string { return t.t.Name() }

// Codecs returns the codecs the table's keys and values are stored with
// (stream/state decodes a store's rows with them).
func (t *Table[K, V]) Codecs() (keys stream.Codec[K], values stream.Codec[V]) {
	k, v := t.t.Codecs()
	return k, v
}

// Get returns the committed value of k, and false when k has no row. It
// shows every commit that returned before the call and nothing a crash can
// take back: it reads a durable view of the store (docs/design.md §2), so
// a value once seen is still there after a crash and restart. A row is
// found whatever partition wrote it: the key's own partition is read
// first, the others only on a miss (cheap, with Pebble's bloom filters). It
// costs one Pebble point read and one decode, plus one write-ahead log
// fsync shared with the concurrent reads when a commit returned since the
// last read. GetFresh also says which checkpoints the answer reflects.
func (t *Table[K, V]) Get(ctx context.Context, k K) (V, bool, error) {
	v, ok, err := t.t.Get(ctx, k)
	return v, ok, wrapNotOpen(err)
}

// Scan calls fn with every committed key and value of the table, partition
// by partition and in key order within a partition, until fn returns false.
// It sees one consistent, durable state (as Get): commits made during the
// scan are not seen.
// A long scan pins old data in the store until it ends.
func (t *Table[K, V]) Scan(ctx context.Context, fn func(k K, v V) bool) error {
	return wrapNotOpen(t.t.Scan(ctx, fn))
}
