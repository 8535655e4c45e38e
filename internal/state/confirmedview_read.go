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
func (t *tableCore) getConfirmed(ctx context.Context, db *DB, id uint32, key []byte, decode func([]byte) error) (bool, Freshness, error) {
	n := t.parts.Load()
	home := uint32(0)
	if n > 0 {
		home = xxh32.Partition(key, n)
	}
	buf := make([]byte, 0, rowKeyExtra+len(key))
	read := func(p uint32) (bool, *view, error) {
		v, err := db.recentConfirmed(ctx, p)
		if err != nil {
			return false, nil, strerr.Errorf("strand: table %q: read key %q partition %d: %w", t.name, key, p, err)
		}
		buf = appendTableKey(buf[:0], id, p, key)
		present, err := t.loadIn(db, v, buf, p, key, decode)
		if err != nil {
			v.release()
			return false, nil, err
		}
		return present, v, nil
	}
	answer := func(present bool, v *view, p uint32) (bool, Freshness, error) {
		defer v.release()
		cps, err := checkpointsIn(v, p)
		if err != nil {
			return false, Freshness{}, err
		}
		return present, Freshness{Partition: p, Checkpoints: cps}, nil
	}
	present, hv, err := read(home)
	if err != nil {
		return false, Freshness{}, err
	}
	if present {
		return answer(true, hv, home)
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
		present, v, err := read(p)
		if err != nil {
			hv.release()
			return false, Freshness{}, err
		}
		if present {
			hv.release()
			return answer(true, v, p)
		}
		v.release()
	}
	return answer(false, hv, home)
}
