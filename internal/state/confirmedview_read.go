package state

import (
	"context"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/internal/xxh32"
)

// getConfirmed is GetRecent with a ConfirmedCheck installed: every
// partition it reads (the key's own, then the others until the row is
// found) is read from that partition's confirmed view (recentConfirmed).
// The caller has entered db.
func (t *Table[K, V]) getConfirmed(ctx context.Context, db *DB, id uint32, key []byte) (V, bool, Freshness, error) {
	var zero V
	n := t.parts.Load()
	home := uint32(0)
	if n > 0 {
		home = xxh32.Partition(key, n)
	}
	buf := make([]byte, 0, rowKeyExtra+len(key))
	read := func(p uint32) (V, bool, *view, error) {
		v, err := db.recentConfirmed(ctx, p)
		if err != nil {
			return zero, false, nil, strerr.Errorf("strand: table %q: read key %q partition %d: %w", t.name, key, p, err)
		}
		buf = appendTableKey(buf[:0], id, p, key)
		val, present, err := t.loadIn(db, v, buf, p, key)
		if err != nil {
			v.release()
			return zero, false, nil, err
		}
		return val, present, v, nil
	}
	answer := func(val V, present bool, v *view, p uint32) (V, bool, Freshness, error) {
		defer v.release()
		cps, err := checkpointsIn(v, p)
		if err != nil {
			return zero, false, Freshness{}, err
		}
		return val, present, Freshness{Partition: p, Checkpoints: cps}, nil
	}
	val, present, hv, err := read(home)
	if err != nil {
		return zero, false, Freshness{}, err
	}
	if present {
		return answer(val, true, hv, home)
	}
	for p := uint32(0); p < n; p++ {
		if p == home {
			continue
		}
		buf = appendTableKey(buf[:0], id, p, key)
		if db.filter.absent(db.hash(buf)) {
			db.stats.skips.Add(1)
			continue // not in the store, so in no view of it
		}
		val, present, v, err := read(p)
		if err != nil {
			hv.release()
			return zero, false, Freshness{}, err
		}
		if present {
			hv.release()
			return answer(val, true, v, p)
		}
		v.release()
	}
	return answer(zero, false, hv, home)
}
