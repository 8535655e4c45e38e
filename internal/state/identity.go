package state

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/strand-io/strand/internal/strerr"
)

// ErrSourceChanged is wrapped by [DB.EnsureSourceIdentity] when a source's
// topic is not the one the state was built from (it was deleted and
// created again under the same name).
var ErrSourceChanged = errors.New("strand: source topic changed")

// metaSourceIdentityPrefix names a source's identity (connector.Identifier)
// in the metadata; "source-identity/" never starts with metaSourcePrefix.
const metaSourceIdentityPrefix = "source-identity/"

// EnsureSourceIdentity compares the identity of the topic of the source
// named name (what its connector.Identifier answers) with the one stored
// when the database first ran the source. A source new to the database (or
// first run by a strand version that stored no identity) has it stored,
// durably, and accepted; another identity is refused with an error
// wrapping [ErrSourceChanged] that shows both: the topic was deleted and
// created again, and state and checkpoints of the old log do not describe
// the new one.
func (db *DB) EnsureSourceIdentity(name, identity string) error {
	if name == "" || identity == "" || len(identity) > 255 {
		return fmt.Errorf("strand: %s: source %q with an identity of %d bytes, want 1..255", db.dir, name, len(identity))
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	key := metaKey(metaSourceIdentityPrefix + name)
	stored, ok, err := db.getCopy(key)
	if err != nil {
		return strerr.Errorf("strand: %s: read the identity of source %q: %w", db.dir, name, err)
	}
	if !ok {
		if err := db.setMeta(key, []byte(identity)); err != nil {
			return strerr.Errorf("strand: %s: store the identity of source %q: %w", db.dir, name, err)
		}
		return nil
	}
	if string(stored) != identity {
		return fmt.Errorf("%w: source %q is %s now, but the state at %s was built from %s: the topic was deleted and "+
			"created again, and the checkpoints and tables of the old log do not describe the new one; "+
			"to rebuild the state from the new log, stop every instance, move the state directory away and start again",
			ErrSourceChanged, name, identity, db.dir, stored)
	}
	return nil
}

// SourceIdentity returns the identity stored for the source named name,
// and false when none is.
func (db *DB) SourceIdentity(name string) (string, bool, error) {
	if err := db.enter(); err != nil {
		return "", false, err
	}
	defer db.exit()
	v, ok, err := db.getCopy(metaKey(metaSourceIdentityPrefix + name))
	if err != nil {
		return "", false, strerr.Errorf("strand: %s: read the identity of source %q: %w", db.dir, name, err)
	}
	return string(v), ok, nil
}

// setMeta writes one metadata value so that it survives the loss of the
// write-ahead log it was written to: synced, then flushed into a table
// file. Metadata is written on the first start and when a topology gains a
// source or a table, so the flush is rare. The caller holds db.mu and has
// entered.
func (db *DB) setMeta(key, value []byte) error {
	return db.guard(func() error {
		if err := db.pdb.Set(key, value, pebble.Sync); err != nil {
			return err
		}
		return db.pdb.Flush()
	})
}
