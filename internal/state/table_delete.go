package state

import "fmt"

// UpdateKeep is [Table.Update] for a fold that may remove the row: fn
// returns keep=false to delete key (the Txn then holds a deletion, a
// tombstone in the commit, as after [Table.Delete]) and true to write the
// value it left in *v. An error from fn writes nothing, as in Update.
func (t *Table[K, V]) UpdateKeep(tx *Txn, partition uint32, key []byte, fn func(v *V, ok bool) (keep bool, err error)) error {
	b, tt, err := t.txn(tx)
	if err != nil {
		return err
	}
	var buf [keyBuf]byte
	k := appendTableKey(buf[:0], b.id, partition, key)
	h := b.db.hash(k)
	s := tt.shard(h)
	s.mu.Lock()
	e := s.get(h, k)
	var present bool
	if e != nil {
		present = e.present
	}
	s.mu.Unlock()
	if e == nil {
		v, p, ref, _, err := t.resolve(tx, b, h, k, partition, key)
		if err != nil {
			return err
		}
		present = p
		s.mu.Lock()
		if e = s.get(h, k); e != nil { // the same key from another goroutine: keep its entry
			present = e.present
		} else {
			e = tt.newEntry(s, h, k)
			e.v, e.present, e.ce = v, present, ref
		}
		s.mu.Unlock()
	}
	// fn folds into the entry's value in place (no other goroutine uses
	// this key of the Txn meanwhile, and none reads the entry before the
	// Txn commits); old is what the entry goes back to if fn or the
	// encoding fails.
	old := e.v
	keep, err := fn(&e.v, present)
	if err != nil {
		e.v = old
		if rerr := t.revert(tt, s, h, k); rerr != nil {
			return rerr
		}
		return err
	}
	if !keep {
		var zero V
		s.mu.Lock()
		e.v, e.enc, e.present, e.dirty = zero, nil, false, true
		s.mu.Unlock()
		return nil
	}
	if err := tt.encode(s, t.values, e); err != nil {
		e.v = old
		if rerr := t.revert(tt, s, h, k); rerr != nil {
			return rerr
		}
		return fmt.Errorf("%w: table %q: value of key %q partition %d: %w", ErrEncode, t.name, key, partition, err)
	}
	return nil
}
