package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrNoStore is wrapped by ScanReadOnly when dir holds no store.
var ErrNoStore = errors.New("state: no store in directory")

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

// ScanReadOnly opens the store in dir read-only (Pebble still takes the
// directory's lock, so it fails while an App has the store open), reads its
// metadata and calls fn for every other key in key order with its family,
// partition, the rest of the key and the value (both valid only during the
// call).
func ScanReadOnly(dir string, fn func(f Family, partition uint32, rest, value []byte) error) (Meta, error) {
	m := Meta{Tables: map[string]uint32{}, Sources: map[string]uint32{}}
	if _, err := os.Stat(dir); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrNoStore, dir, err)
	}
	// vfs.Default itself: Pebble's default wraps it in disk-health checks
	// whose goroutine a failed Open leaves running.
	opts := &pebble.Options{ReadOnly: true, ErrorIfNotExists: true, Logger: pebbleLogger{discardLogger()}, FS: vfs.Default}
	pdb, err := pebble.Open(dir, opts)
	if err != nil {
		return m, fmt.Errorf("state: open %s read-only: %w", dir, err)
	}
	defer pdb.Close()
	it, err := pdb.NewIter(nil)
	if err != nil {
		return m, fmt.Errorf("state: read %s: %w", dir, err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) < prefixLen {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return m, fmt.Errorf("state: read %s: %w", dir, err)
		}
		f, part, rest := Family(k[0]), binary.BigEndian.Uint32(k[1:prefixLen]), k[prefixLen:]
		if f == FamilyMeta {
			name := string(rest)
			switch {
			case name == metaLayout && len(v) == 1:
				m.Layout = int(v[0])
			case name == metaFingerprint:
				m.Fingerprint = append([]byte(nil), v...)
			case name == metaTopology:
				m.Description = string(v)
			case len(name) > len(metaTablePrefix) && name[:len(metaTablePrefix)] == metaTablePrefix && len(v) == 4:
				m.Tables[name[len(metaTablePrefix):]] = binary.BigEndian.Uint32(v)
			case len(name) > len(metaSourcePrefix) && name[:len(metaSourcePrefix)] == metaSourcePrefix && len(v) == 4:
				m.Sources[name[len(metaSourcePrefix):]] = binary.BigEndian.Uint32(v)
			}
			continue
		}
		if err := fn(f, part, rest, v); err != nil {
			return m, err
		}
	}
	if err := it.Error(); err != nil {
		return m, fmt.Errorf("state: read %s: %w", dir, err)
	}
	if m.Layout == 0 {
		return m, fmt.Errorf("%w: %s has no strand metadata", ErrNoStore, dir)
	}
	return m, nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
