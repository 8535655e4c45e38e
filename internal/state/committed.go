package state

import (
	"sync/atomic"
	"unsafe"
)

// Committed reads through the value cache ([Table.PeekCommitted]).
//
// A reader outside every transaction (a lookup of a global table, which
// its own pipelines commit beside the reader) may use the value cache only
// where it holds nothing a transaction is changing, and only so that what
// it sees of a key never goes back:
//
//   - Values that may share memory (maps, slices, pointers) are changed in
//     place by the writers' handlers before they commit: such a table is
//     always read from Pebble, decoded afresh.
//   - Otherwise the cache holds committed values only (see cache.go), but a
//     commit reaches Pebble before it reaches the cache, and a fill of a
//     value read before the commit may land in between. So every write of
//     the table's rows (a Txn's commit that writes the table, logged writes
//     applied, a dropped partition) is bracketed: writeBegin before Pebble
//     gets it, writeEnd once the cache has it. While a write is in flight a
//     committed read neither hits nor fills: it reads Pebble. A fill is kept
//     only if no write began since the read started (the word below is
//     unchanged), checked under the shard's lock, so a fill that wins is
//     always followed by the write's own put.
//
// Hence a committed read sees a value no older than the last write that
// ended before it began, and never one older than a read that ended
// before it began.

// cacheWrites counts the writes of one table's rows: writes begun in the
// high 32 bits, writes in flight in the low 32 bits.
type cacheWrites struct{ w atomic.Uint64 }

func (c *cacheWrites) begin() { c.w.Add(1<<32 | 1) }
func (c *cacheWrites) end()   { c.w.Add(^uint64(0)) }

// lookupCommitted returns the cached committed value of key, with hit
// true, unless a write of the table is in flight. On a miss it returns the
// state to pass to fillCommitted.
func (c *valueCache[V]) lookupCommitted(h uint64, key []byte) (v V, present, hit bool, w, gen uint64) {
	w = c.writes.w.Load()
	if uint32(w) != 0 {
		return v, false, false, w, 0
	}
	ref, v, present, gen := c.lookup(h, key)
	return v, present, ref != 0, w, gen
}

// fillCommitted adds a value read from Pebble by a committed read that
// missed, unless a write of the table was in flight or began since (w), or
// the shard changed (gen), or the key is cached already.
func (c *valueCache[V]) fillCommitted(h uint64, key []byte, v V, present bool, encLen int, w, gen uint64) {
	if uint32(w) != 0 || !c.enabled() || len(key) > maxCacheKey {
		return
	}
	s := &c.shards[h&cacheShardMask]
	s.mu.Lock()
	if s.gen == gen && c.writes.w.Load() == w {
		k := unsafe.String(unsafe.SliceData(key), len(key))
		if i, _ := s.find(h, k); i == noSlot {
			c.insert(s, h, k, v, present, encLen)
		}
	}
	s.mu.Unlock()
}

// writes returns the write counts of the table's value cache, if the
// table is bound to db.
func (t *Table[K, V]) writes(db *DB) *cacheWrites {
	if b := t.b.Load(); b != nil && b.db == db {
		return &b.cache.writes
	}
	return nil
}

// writingTables begins a write of rows outside a Txn (logged writes
// applied, a partition dropped) for every attached table, before Pebble
// gets it, and returns the function that ends it, to call once the value
// caches dropped what it changed.
func (db *DB) writingTables() (end func()) {
	db.mu.Lock()
	ws := make([]*cacheWrites, 0, len(db.attached))
	for _, t := range db.attached {
		if w := t.writes(db); w != nil {
			w.begin()
			ws = append(ws, w)
		}
	}
	db.mu.Unlock()
	return func() {
		for _, w := range ws {
			w.end()
		}
	}
}
