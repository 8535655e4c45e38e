package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/strand-io/strand/internal/strerr"
)

// ErrNoStore is wrapped by ScanReadOnly and OpenReadOnly when dir holds no
// store.
var ErrNoStore = errors.New("strand: no store in directory")

// Meta is a store's metadata as ScanReadOnly reads it.
type Meta struct {
	// Layout is the key layout version; Fingerprint the topology's.
	Layout      int
	Fingerprint []byte
	// Description is the readable description of the topology that wrote
	// the store ("" for a store written before descriptions were kept).
	Description string
	// Tables maps table names to their ids; Sources source names to their
	// partition counts.
	Tables  map[string]uint32
	Sources map[string]uint32
}

// ReadOnly is a store opened read-only (OpenReadOnly): its metadata and
// its rows, by family and partition. Pebble takes the directory's lock
// while it is open, so no App can open the store meanwhile. Its methods
// are safe for concurrent use until Close.
type ReadOnly struct {
	Meta
	dir string
	pdb *pebble.DB
}

// OpenReadOnly opens the store in dir read-only (it fails while an App has
// the store open: Pebble locks the directory) and reads its metadata.
func OpenReadOnly(dir string) (*ReadOnly, error) {
	m := Meta{Tables: map[string]uint32{}, Sources: map[string]uint32{}}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoStore, dir, err)
	}
	// vfs.Default itself: Pebble's default wraps it in disk-health checks
	// whose goroutine a failed Open leaves running.
	opts := &pebble.Options{ReadOnly: true, ErrorIfNotExists: true, Logger: pebbleLogger{discardLogger()}, FS: vfs.Default}
	pdb, err := pebble.Open(dir, opts)
	if errors.Is(err, pebble.ErrDBDoesNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoStore, dir)
	}
	if err != nil {
		return nil, strerr.Errorf("strand: open %s read-only: %w", dir, err)
	}
	r := &ReadOnly{Meta: m, dir: dir, pdb: pdb}
	err = r.scan(context.Background(), FamilyMeta, nil, func(_ uint32, rest, v []byte) error {
		name := string(rest)
		switch {
		case name == metaLayout && len(v) == 1:
			r.Layout = int(v[0])
		case name == metaFingerprint:
			r.Fingerprint = append([]byte(nil), v...)
		case name == metaTopology:
			r.Description = string(v)
		case len(name) > len(metaTablePrefix) && name[:len(metaTablePrefix)] == metaTablePrefix && len(v) == 4:
			r.Tables[name[len(metaTablePrefix):]] = binary.BigEndian.Uint32(v)
		case len(name) > len(metaSourcePrefix) && name[:len(metaSourcePrefix)] == metaSourcePrefix && len(v) == 4:
			r.Sources[name[len(metaSourcePrefix):]] = binary.BigEndian.Uint32(v)
		}
		return nil
	})
	if err == nil && r.Layout == 0 {
		err = fmt.Errorf("%w: %s has no strand metadata", ErrNoStore, dir)
	}
	if err != nil {
		_ = pdb.Close()
		return nil, err
	}
	return r, nil
}

// Dir returns the store's directory.
func (r *ReadOnly) Dir() string { return r.dir }

// Close closes the store.
func (r *ReadOnly) Close() error {
	if err := r.pdb.Close(); err != nil {
		return strerr.Errorf("strand: close %s: %w", r.dir, err)
	}
	return nil
}

// Row returns a copy of the value of the row (f, partition, rest), and
// false when there is none.
func (r *ReadOnly) Row(f Family, partition uint32, rest []byte) ([]byte, bool, error) {
	v, closer, err := r.pdb.Get(rowKey(f, partition, rest))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, strerr.Errorf("strand: read %s: %w", r.dir, err)
	}
	out := append([]byte(nil), v...)
	_ = closer.Close()
	return out, true, nil
}

// Scan calls fn, in key order, with every row of family f in every
// partition whose key (after family and partition) starts with prefix: its
// partition, the rest of its key and its value (both valid only during the
// call). It stops at the first error fn returns, or when ctx is done.
func (r *ReadOnly) Scan(ctx context.Context, f Family, prefix []byte, fn func(partition uint32, rest, value []byte) error) error {
	return r.scan(ctx, f, prefix, fn)
}

// TableRow is Row for the table row of key (encoded key bytes) in the
// partition, of the table with id.
func (r *ReadOnly) TableRow(id, partition uint32, key []byte) ([]byte, bool, error) {
	return r.Row(FamilyTable, partition, appendTableKey(nil, id, partition, key)[prefixLen:])
}

// ScanTable is Scan for the rows of the table with id: fn gets the
// partition, the encoded key and the value.
func (r *ReadOnly) ScanTable(ctx context.Context, id uint32, fn func(partition uint32, key, value []byte) error) error {
	pre := binary.BigEndian.AppendUint32(nil, id)
	return r.scan(ctx, FamilyTable, pre, func(p uint32, rest, v []byte) error { return fn(p, rest[4:], v) })
}

// scan visits family f partition by partition: within a partition it
// iterates the keys starting with prefix, then seeks to the next
// partition that has any key of f.
func (r *ReadOnly) scan(ctx context.Context, f Family, prefix []byte, fn func(partition uint32, rest, value []byte) error) error {
	it, err := r.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{byte(f)}, UpperBound: []byte{byte(f) + 1}})
	if err != nil {
		return strerr.Errorf("strand: read %s: %w", r.dir, err)
	}
	defer it.Close()
	part := uint32(0)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !it.SeekGE(append(appendPrefix(nil, f, part), prefix...)) {
			break
		}
		if p := binary.BigEndian.Uint32(it.Key()[1:prefixLen]); p != part {
			part = p // the next partition that has rows of f: seek its prefix
			continue
		}
		for valid := true; valid; valid = it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := it.Key()
			if binary.BigEndian.Uint32(k[1:prefixLen]) != part || !hasPrefix(k[prefixLen:], prefix) {
				break
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return strerr.Errorf("strand: read %s: %w", r.dir, err)
			}
			if err := fn(part, k[prefixLen:], v); err != nil {
				return err
			}
		}
		if part == ^uint32(0) {
			break
		}
		part++
	}
	if err := it.Error(); err != nil {
		return strerr.Errorf("strand: read %s: %w", r.dir, err)
	}
	return nil
}

func hasPrefix(b, p []byte) bool { return len(b) >= len(p) && string(b[:len(p)]) == string(p) }

// ScanAll calls fn for every row but the metadata, in key order, with its
// family, partition, the rest of its key and its value (both valid only
// during the call).
func (r *ReadOnly) ScanAll(ctx context.Context, fn func(f Family, partition uint32, rest, value []byte) error) error {
	it, err := r.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{byte(FamilyMeta) + 1}})
	if err != nil {
		return strerr.Errorf("strand: read %s: %w", r.dir, err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := it.Key()
		if len(k) < prefixLen {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return strerr.Errorf("strand: read %s: %w", r.dir, err)
		}
		if err := fn(Family(k[0]), binary.BigEndian.Uint32(k[1:prefixLen]), k[prefixLen:], v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return strerr.Errorf("strand: read %s: %w", r.dir, err)
	}
	return nil
}

// ScanReadOnly opens the store in dir read-only (Pebble still takes the
// directory's lock, so it fails while an App has the store open), reads its
// metadata and calls fn for every other key in key order (see ScanAll).
func ScanReadOnly(dir string, fn func(f Family, partition uint32, rest, value []byte) error) (Meta, error) {
	r, err := OpenReadOnly(dir)
	if err != nil {
		return Meta{Tables: map[string]uint32{}, Sources: map[string]uint32{}}, err
	}
	defer r.Close()
	return r.Meta, r.ScanAll(context.Background(), fn)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
