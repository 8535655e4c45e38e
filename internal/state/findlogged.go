package state

import (
	"bytes"
	"fmt"
)

// FindLogged returns the value the last Set of row (f, partition, key) in
// writes (a batch representation, as ApplyLogged takes) gives it, and
// whether writes sets it at all (a Delete after the Set counts as not
// set). It reads without applying: the engine finds the head row of a
// snapshot's last chunk with it.
func FindLogged(writes []byte, f Family, partition uint32, key []byte) ([]byte, bool, error) {
	if len(writes) < reprHeaderLen {
		return nil, false, fmt.Errorf("%w: %d bytes", ErrBadLoggedWrites, len(writes))
	}
	want := rowKey(f, partition, key)
	var val []byte
	found := false
	for r := writes[reprHeaderLen:]; len(r) > 0; {
		e, rest, err := nextEntry(r)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrBadLoggedWrites, err)
		}
		if bytes.Equal(e.key, want) {
			val, found = e.value, e.set
		}
		r = rest
	}
	if !found {
		return nil, false, nil
	}
	return bytes.Clone(val), true, nil
}

// TableIDs returns the id of every table name this store has ever
// attached. Rows of a logged commit carry these ids, so two stores can
// exchange logged writes only if they agree on them.
func (db *DB) TableIDs() map[string]uint32 {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make(map[string]uint32, len(db.registry))
	for name, id := range db.registry {
		out[name] = id
	}
	return out
}
