package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/strand-io/strand/internal/strerr"
)

// FamilyReplayMark holds one row per source and partition (key:
// rowenc-encoded source name) whose value (u64 BE) is the offset below
// which a partition's records were processed before a reset: their
// outputs (To, KeyBy, dead letters, ForEach) were published then and are
// not published again while the reset's rebuild replays them. Written by a
// reset, read by the engine (docs/design.md §19).
const FamilyReplayMark Family = 0x18

// CheckpointRow is one committed checkpoint: the next offset to read of a
// source's partition.
type CheckpointRow struct {
	Source    string
	Partition uint32
	Next      uint64
}

// Checkpoints lists every committed checkpoint, by partition then source.
func (db *DB) Checkpoints() ([]CheckpointRow, error) {
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.exit()
	lo := []byte{byte(FamilyCheckpoint)}
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{byte(FamilyCheckpoint) + 1}})
	if err != nil {
		return nil, strerr.Errorf("strand: %s: list checkpoints: %w", db.dir, err)
	}
	var out []CheckpointRow
	for valid := it.First(); valid; valid = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) < prefixLen || len(v) != 8 {
			_ = it.Close()
			return nil, fmt.Errorf("strand: %s: malformed checkpoint row %x", db.dir, k)
		}
		if buildSource(k[prefixLen:]) {
			continue // a build reader's (build.go)
		}
		out = append(out, CheckpointRow{Source: string(k[prefixLen:]), Partition: binary.BigEndian.Uint32(k[1:prefixLen]),
			Next: binary.BigEndian.Uint64(v)})
	}
	if err := it.Close(); err != nil {
		return nil, strerr.Errorf("strand: %s: list checkpoints: %w", db.dir, err)
	}
	return out, nil
}

// HasRows reports whether family f holds any row, in any partition.
func (db *DB) HasRows(f Family) (bool, error) {
	if err := db.enter(); err != nil {
		return false, err
	}
	defer db.exit()
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{byte(f)}, UpperBound: familyEnd(f)})
	if err != nil {
		return false, strerr.Errorf("strand: %s: read family %s: %w", db.dir, f, err)
	}
	found := it.First()
	if err := it.Close(); err != nil {
		return false, strerr.Errorf("strand: %s: read family %s: %w", db.dir, f, err)
	}
	return found, nil
}

// familyEnd is the first key after every key of family f (nil: none).
func familyEnd(f Family) []byte {
	if f == 0xff {
		return nil
	}
	return []byte{byte(f) + 1}
}

// RowPut is a row ResetState writes.
type RowPut struct {
	Family    Family
	Partition uint32
	Key       []byte
	Value     []byte
}

// ResetState makes the store ready to be rebuilt from the log. In one
// synced batch (flushed to a table file, like all metadata) it deletes
// every checkpoint, every table row, every row of the families in clear
// (which must not be reserved), and the stored fingerprint and topology
// description, so that the next EnsureTopology stores the topology it is
// given; and it writes put. Everything else (source partition counts and
// identities, the store's id, the table ids, rows of other families) is
// kept. No App may use the DB meanwhile: its tables' caches are not
// dropped.
func (db *DB) ResetState(ctx context.Context, clear []Family, put []RowPut) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, f := range clear {
		if f.Reserved() {
			return fmt.Errorf("%w: reset family %s", ErrReservedFamily, f)
		}
	}
	for _, r := range put {
		if r.Family.Reserved() {
			return fmt.Errorf("%w: reset writes family %s", ErrReservedFamily, r.Family)
		}
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.guard(func() error {
		b := db.pdb.NewBatch()
		defer b.Close()
		for _, f := range append([]Family{FamilyCheckpoint, FamilyTable}, clear...) {
			if end := familyEnd(f); end != nil {
				if err := b.DeleteRange([]byte{byte(f)}, end, nil); err != nil {
					return err
				}
				continue
			}
			it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{byte(f)}})
			if err != nil {
				return err
			}
			for valid := it.First(); valid; valid = it.Next() {
				_ = b.Delete(bytes.Clone(it.Key()), nil)
			}
			if err := it.Close(); err != nil {
				return err
			}
		}
		_ = b.Delete(metaKey(metaFingerprint), nil)
		_ = b.Delete(metaKey(metaTopology), nil)
		// Builds in progress (build.go) end: every table is rebuilt.
		bp := metaKey(metaBuildPrefix)
		_ = b.DeleteRange(bp, prefixEnd(bp), nil)
		_ = b.DeleteRange([]byte{byte(FamilyBuild)}, familyEnd(FamilyBuild), nil)
		for _, r := range put {
			_ = b.Set(rowKey(r.Family, r.Partition, r.Key), r.Value, nil)
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return strerr.Errorf("strand: %s: reset: %w", db.dir, err)
		}
		if err := db.pdb.Flush(); err != nil {
			return strerr.Errorf("strand: %s: reset: flush: %w", db.dir, err)
		}
		return nil
	})
}
