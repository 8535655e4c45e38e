package state

import (
	"bytes"
	"fmt"
	"github.com/strand-io/strand/internal/strerr"
)

// metaTopology names the metadata row holding the readable description of
// the topology that wrote the store (docs/design.md "Evolution").
const metaTopology = "topology"

// IncompatibleError is the error [DB.EnsureTopology] and
// [DB.EnsureFingerprint] return for a store written by a topology with
// another fingerprint. It wraps [ErrIncompatibleTopology] and carries the
// stored description, so that the caller can list what changed.
type IncompatibleError struct {
	// Dir is the store's directory.
	Dir string
	// Stored is the fingerprint the store was written by; Now the one of
	// the topology being started.
	Stored, Now []byte
	// StoredDescription is the description the store keeps of the
	// topology that wrote it, or "" for a store written before
	// descriptions were kept.
	StoredDescription string
}

// Error shows both fingerprints.
func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("%v: database at %s was written by topology fingerprint %x, the topology being started has fingerprint %x",
		ErrIncompatibleTopology, e.Dir, e.Stored, e.Now)
}

// Unwrap returns ErrIncompatibleTopology.
func (e *IncompatibleError) Unwrap() error { return ErrIncompatibleTopology }

// EnsureTopology compares fp, the fingerprint of the topology about to run,
// with the one stored in the database, as EnsureFingerprint does, and keeps
// description, a readable description of that topology, beside it. A store
// whose fingerprint is legacy (the fingerprint the same topology had before
// the description's newer lines were hashed; nil: none) is accepted and
// brought up to fp. A refusal is an *IncompatibleError holding the stored
// description. Both rows are written durably.
func (db *DB) EnsureTopology(fp, legacy []byte, description string) error {
	if len(fp) == 0 {
		return fmt.Errorf("strand: %s: empty topology fingerprint", db.dir)
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	stored, ok, err := db.getCopy(metaKey(metaFingerprint))
	if err != nil {
		return strerr.Errorf("strand: %s: read fingerprint: %w", db.dir, err)
	}
	desc, hasDesc, err := db.getCopy(metaKey(metaTopology))
	if err != nil {
		return strerr.Errorf("strand: %s: read the topology description: %w", db.dir, err)
	}
	switch {
	case ok && bytes.Equal(stored, fp):
		if hasDesc && string(desc) == description {
			return nil
		}
	case ok && len(legacy) > 0 && bytes.Equal(stored, legacy):
		// The same topology, fingerprinted before the newer lines: upgrade.
	case ok:
		return &IncompatibleError{Dir: db.dir, Stored: stored, Now: fp, StoredDescription: string(desc)}
	}
	if err := db.setMeta(metaKey(metaTopology), []byte(description)); err != nil {
		return strerr.Errorf("strand: %s: store the topology description: %w", db.dir, err)
	}
	if err := db.setMeta(metaKey(metaFingerprint), fp); err != nil {
		return strerr.Errorf("strand: %s: store fingerprint: %w", db.dir, err)
	}
	return nil
}

// CodecTypes returns the Go types of the table's key and value codecs ("" for
// a missing one), for the topology's description.
func (t *Table[K, V]) CodecTypes() (keys, values string) {
	if t.keys != nil {
		keys = fmt.Sprintf("%T", t.keys)
	}
	if t.values != nil {
		values = fmt.Sprintf("%T", t.values)
	}
	return keys, values
}

// SetVersion sets the version a topology declares for the table (0: none);
// it is part of the topology's description, so that a new version is
// refused by a store written with another (a changed fold or value). Call
// it before the table is attached.
func (t *Table[K, V]) SetVersion(v uint32) { t.version = v }

// Version returns the table's declared version (0: none).
func (t *Table[K, V]) Version() uint32 { return t.version }
