package state

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/strand-io/strand/internal/strerr"
)

// Partitions returns the count given to SetPartitions (0 before).
func (t *Table[K, V]) Partitions() uint32 { return t.parts.Load() }

// AppendKey appends k's bytes, as the table's key codec encodes them, to
// dst.
func (t *Table[K, V]) AppendKey(dst []byte, k K) ([]byte, error) {
	if t.keys == nil {
		return dst, fmt.Errorf("%w: table %q has no key codec", ErrInvalidTable, t.name)
	}
	out, err := t.keys.Append(dst, k)
	if err != nil {
		return dst, strerr.Errorf("strand: table %q: encode key %v: %w", t.name, k, err)
	}
	return out, nil
}

// ScanPartition calls fn with the committed rows of the table filed under
// one partition, in key byte order, starting after the key bytes after
// (from the first row when after is nil), until fn returns false. fn gets
// the row's key bytes (valid only during the call), its key and its value.
// Like Scan it reads one consistent durable view of the store, and a
// key or value that cannot be decoded stops it with an error naming it.
func (t *Table[K, V]) ScanPartition(ctx context.Context, partition uint32, after []byte, fn func(key []byte, k K, v V) bool) error {
	_, err := t.ScanPartitionFresh(ctx, partition, after, fn)
	return err
}

// ScanPartitionFresh is ScanPartition that also says how fresh the rows
// are: the partition's committed checkpoints, read from the same durable
// view as the rows.
func (t *Table[K, V]) ScanPartitionFresh(ctx context.Context, partition uint32, after []byte, fn func(key []byte, k K, v V) bool) (Freshness, error) {
	return t.scanPartition(ctx, partition, after, fn, true)
}

// ScanPartitionRecent is ScanPartitionFresh that never waits for an fsync
// (as GetRecent).
func (t *Table[K, V]) ScanPartitionRecent(ctx context.Context, partition uint32, after []byte, fn func(key []byte, k K, v V) bool) (Freshness, error) {
	return t.scanPartition(ctx, partition, after, fn, false)
}

func (t *Table[K, V]) scanPartition(ctx context.Context, partition uint32, after []byte, fn func(key []byte, k K, v V) bool, wait bool) (Freshness, error) {
	b, err := t.binding()
	if err != nil {
		return Freshness{Partition: partition}, err
	}
	return t.tableCore.scanPartition(ctx, b.db, b.id, partition, after, wait, t.rowDecoder(fn))
}

// rowDecoder is the one step of a scan that depends on the table's types:
// decode a row's key and value and hand them to fn.
func (t *Table[K, V]) rowDecoder(fn func(key []byte, k K, v V) bool) rowFunc {
	return func(partition uint32, kb, val []byte) (bool, error) {
		k, err := t.keys.Decode(kb)
		if err != nil {
			return false, strerr.Errorf("strand: scan table %q: decode key %q partition %d: %w", t.name, kb, partition, err)
		}
		v, err := t.values.Decode(val)
		if err != nil {
			return false, strerr.Errorf("strand: scan table %q: decode value of key %q partition %d: %w", t.name, kb, partition, err)
		}
		return fn(kb, k, v), nil
	}
}

// rowFunc is handed each row a scan reads (its partition, key bytes and
// encoded value, valid during the call); false stops the scan.
type rowFunc func(partition uint32, key, val []byte) (bool, error)

// scanPartition is Table.scanPartition without the types: it reads the
// rows of table id in one partition from one view and hands them to row.
func (t *tableCore) scanPartition(ctx context.Context, db *DB, bid uint32, partition uint32, after []byte, wait bool, row rowFunc) (Freshness, error) {
	fr := Freshness{Partition: partition}
	if err := db.enter(); err != nil {
		return fr, err
	}
	defer db.exit()
	var v *view
	var err error
	if wait {
		v, err = db.readView()
		if err == nil {
			if err = db.confirmRead(ctx, partition); err != nil {
				v.release()
			} else {
				db.promoteConfirmed(partition, v)
			}
		}
	} else {
		// The confirmed view in a group (never waits), else a recent one.
		v, err = db.recentConfirmed(ctx, partition)
	}
	if err != nil {
		return fr, strerr.Errorf("strand: scan table %q partition %d: %w", t.name, partition, err)
	}
	defer v.release()
	id, err := t.readID(bid, v)
	if err != nil {
		return fr, err
	}
	if fr.Checkpoints, err = checkpointsIn(v, partition); err != nil {
		return fr, err
	}
	lower := appendTableKey(make([]byte, 0, rowKeyExtra+len(after)+1), id, partition, after)
	if after != nil {
		lower = append(lower, 0) // the smallest key after after
	}
	it, err := v.snap.NewIter(&pebble.IterOptions{
		LowerBound: lower,
		UpperBound: prefixEnd(appendTableKey(nil, id, partition, nil)),
	})
	if err != nil {
		return fr, strerr.Errorf("strand: scan table %q partition %d: %w", t.name, partition, err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		if err := ctx.Err(); err != nil {
			return fr, err
		}
		kb := it.Key()[rowKeyExtra:]
		val, err := it.ValueAndErr()
		if err != nil {
			return fr, strerr.Errorf("strand: scan table %q: read key %q partition %d: %w", t.name, kb, partition, err)
		}
		if more, err := row(partition, kb, val); err != nil || !more {
			return fr, err
		}
	}
	if err := it.Error(); err != nil {
		return fr, strerr.Errorf("strand: scan table %q partition %d: %w", t.name, partition, err)
	}
	return fr, nil
}

// CopyTo writes a consistent copy of the store as it is now into dir, which
// must not exist: its files hard-linked where the file system allows (so a
// copy inside the store's own directory costs next to nothing), the
// write-ahead log synced and copied first, so every commit that returned is
// in the copy. ScanReadOnly reads the copy while db stays open.
func (db *DB) CopyTo(dir string) error {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	if err := db.pdb.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return strerr.Errorf("strand: copy %s to %s: %w", db.dir, dir, err)
	}
	return nil
}
