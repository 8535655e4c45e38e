package state

import (
	"bytes"
	"fmt"
	"github.com/strand-io/strand/internal/strerr"
)

// Peek returns the value of key (encoded key bytes) in the partition as the
// transaction sees it, as [Table.Read] does, for a reader that is not the
// key's writer (a lookup of another table): the Txn's own write of the key
// if it made one, else a committing predecessor's (NewTxnAfter), else the
// committed value. Unlike Read it never remembers the read in the Txn, so
// a table only peeked at costs the commit nothing, and the value it returns
// shares no memory with the Txn or the value cache: a value type with
// pointers, maps, slices or interfaces is copied through the table's codec
// (one encode and one decode), others are plain copies. ok is false when the
// key has no value.
//
// Peek is safe to call concurrently with Reads, Writes and Peeks of other
// keys; the caller must make sure no goroutine changes the same key of the
// table in this Txn at the same time (the engine's lookup rules do).
func (t *Table[K, V]) Peek(tx *Txn, partition uint32, key []byte) (V, bool, error) {
	var zero V
	var buf [keyBuf]byte
	f, err := t.lookup(tx, &buf, partition, key)
	switch {
	case err != nil:
		return zero, false, err
	case !f.present:
		return zero, false, nil
	case !t.shared:
		return f.v, true, nil
	case f.dirty:
		return t.decodeCopy(f.enc, key, partition)
	}
	return t.copyOf(f.v, key, partition)
}

// copyOf returns a copy of v that shares no memory with it, through the
// table's codec.
func (t *Table[K, V]) copyOf(v V, key []byte, partition uint32) (V, bool, error) {
	enc, err := t.values.Append(nil, v)
	if err != nil {
		var zero V
		return zero, false, fmt.Errorf("%w: table %q: copy the value of key %q partition %d: %w", ErrEncode, t.name, key, partition, err)
	}
	return t.decodeCopy(enc, key, partition)
}

// decodeCopy decodes a copy of enc, so the value shares no memory with the
// bytes the Txn keeps.
func (t *Table[K, V]) decodeCopy(enc, key []byte, partition uint32) (V, bool, error) {
	v, err := t.values.Decode(bytes.Clone(enc))
	if err != nil {
		var zero V
		return zero, false, strerr.Errorf("strand: table %q: decode the value of key %q partition %d: %w", t.name, key, partition, err)
	}
	return v, true, nil
}

// Clone returns v, or, when the table's value type has pointers, maps,
// slices or interfaces, a copy of it through the table's codec that shares
// no memory with v.
func (t *Table[K, V]) Clone(v V) (V, error) {
	if !t.shared {
		return v, nil
	}
	c, _, err := t.copyOf(v, nil, 0)
	return c, err
}

// PeekCommitted returns the committed value of key (encoded key bytes) in
// the partition: the newest commit that returned, whether or not its log is
// synced. A value type without pointers, maps, slices or interfaces is
// served from the value cache when no write of the table is in flight (and
// a value read from Pebble fills it); any other is read from Pebble and
// decoded afresh, never from the cache, whose values the partition's writer
// may be changing in place (committed.go). What it returns of a key never
// goes back: it is no older than the last commit that returned before the
// call and than any PeekCommitted that returned before it.
//
// It is safe to call while any transaction commits; a reader that commits
// what it derived from the value later in the same store cannot outlive it
// across a crash (the log keeps commits in order).
func (t *Table[K, V]) PeekCommitted(partition uint32, key []byte) (V, bool, error) {
	var zero V
	b, err := t.binding()
	if err != nil {
		return zero, false, err
	}
	var buf [keyBuf]byte
	k := appendTableKey(buf[:0], b.id, partition, key)
	h := b.db.hash(k)
	if t.shared {
		v, present, _, err := t.load(b.db, k, h, partition, key)
		if err != nil || !present {
			return zero, false, err
		}
		return v, true, nil
	}
	v, present, hit, w, gen := b.cache.lookupCommitted(h, k)
	if !hit {
		var encLen int
		v, present, encLen, err = t.load(b.db, k, h, partition, key)
		if err != nil {
			return zero, false, err
		}
		b.cache.fillCommitted(h, k, v, present, encLen, w, gen)
	}
	if !present {
		return zero, false, nil
	}
	return v, true, nil
}
