package state

import (
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The value cache keeps decoded committed values of table rows so that a
// hot key is not read from Pebble and decoded again in every batch (the
// measured "pre-aggregate, state kept in memory write-through" approach).
//
// Correctness rules:
//   - Only committed values enter: Commit writes its values through after
//     the Pebble batch is committed; a Read miss fills the value it read
//     from Pebble.
//   - A value handed to a transaction may be mutated in place by a handler
//     (a map or slice inside V), so every key a transaction read but did not
//     write, and every key of a discarded or failed transaction, is
//     invalidated.
//   - A fill from a Read miss races with commits and invalidations of the
//     same shard: each of those bumps the shard's generation, and a fill
//     whose generation is stale is dropped, so an old value can never
//     replace a newer one.
//
// Memory is bounded by a byte budget shared by all tables of a DB; each
// shard evicts with the SIEVE algorithm when the DB is over budget: new
// entries go to the head of the shard's queue unvisited, a hit marks an
// entry visited, and the hand walks from the tail towards the head,
// sparing (and un-marking) visited entries and evicting the first
// unvisited one. Unlike CLOCK it lets a key read once (a first touch, or
// a cold key) leave without pushing out the keys that are read again
// (measured on the scale scenario's key sequence at a million keys: 29%
// fewer misses than CLOCK at the same size).
//
// Layout: a shard keeps its entries in fixed pages of slots (values
// inline, short keys inline, the SIEVE queue as slot indices), found
// through an open-addressing index of 8-byte words (part of the key's hash
// and the slot number; linear probing, deletion by backward shift). A
// lookup reads one index word and one slot, with no per-entry heap object
// and no pointer between entries, which is what a Go map of entry pointers
// cost (about four cache misses per lookup at a million keys).

const (
	cacheShards    = 64
	cacheShardMask = cacheShards - 1

	// inlineKey is the longest Pebble key kept inside a slot; longer keys
	// are kept in a string of their own.
	inlineKey = 20

	// slotPage is the number of slots allocated at once by a shard.
	slotPage = 64

	// indexShare is what an entry counts for its index words: the index
	// doubles when it is three quarters full, so it holds 1.33 to 2.67
	// words (11 to 21 bytes) per entry.
	indexShare = 16

	// maxCacheKey is the longest key cached (a slot keeps its length in
	// 16 bits); longer keys are always read from Pebble.
	maxCacheKey = 1<<16 - 1

	noSlot = -1

	// mapSlotSize is what a long key's entry in the shard's map of long
	// keys costs besides the key (hash slot, string header, the map's
	// slack).
	mapSlotSize = 40
)

type cacheBudget struct {
	limit int64
	used  atomic.Int64
}

// cacheRef names the slot a value was read from (its index + 1; 0: none).
// A slot may be reused for another key later: users check the key (put).
type cacheRef uint32

type cacheSlot[V any] struct {
	h          uint64
	v          V
	prev, next int32 // SIEVE queue: towards the tail (older) and the head (newer)
	size       int32 // what it counts against the budget
	klen       uint16
	present    bool
	visited    bool
	live       bool
	key        [inlineKey]byte // the key, if not longer; else it is in the shard's long map
}

// keyIs reports whether slot i holds key k.
func (s *cacheShard[V]) keyIs(i int32, k string) bool {
	sl := s.slot(i)
	if len(k) != int(sl.klen) {
		return false
	}
	if len(k) > inlineKey {
		return s.long[i] == k
	}
	return string(sl.key[:len(k)]) == k
}

// keyBytes returns the key of slot i (aliasing the slot or its string).
func (s *cacheShard[V]) keyBytes(i int32) []byte {
	sl := s.slot(i)
	if sl.klen > inlineKey {
		l := s.long[i]
		return unsafe.Slice(unsafe.StringData(l), len(l))
	}
	return sl.key[:sl.klen]
}

type cacheShard[V any] struct {
	mu         sync.Mutex
	gen        uint64
	idx        []uint64 // hash>>32 << 32 | slot+1; 0: empty. Length a power of two.
	pages      [][]cacheSlot[V]
	long       map[int32]string // keys longer than inlineKey, by slot
	slots      int32            // slots carved from pages so far
	free       int32            // a free slot, linked by next; noSlot: none
	count      int32            // live entries
	head, tail int32            // newest and oldest; noSlot when empty
	hand       int32            // next eviction candidate; noSlot: the tail
	// hits and misses count lookups (Stats).
	hits, misses int64
	_            [40]byte
}

type valueCache[V any] struct {
	budget *cacheBudget
	writes cacheWrites // the table's writes begun and in flight (committed.go)
	shards [cacheShards]cacheShard[V]
}

func newValueCache[V any](b *cacheBudget) *valueCache[V] {
	c := &valueCache[V]{budget: b}
	for i := range c.shards {
		c.shards[i].reset()
	}
	return c
}

func (s *cacheShard[V]) reset() {
	s.idx, s.pages, s.long = nil, nil, nil
	s.slots, s.count = 0, 0
	s.free, s.head, s.tail, s.hand = noSlot, noSlot, noSlot, noSlot
}

func (c *valueCache[V]) enabled() bool { return c.budget.limit > 0 }

func (s *cacheShard[V]) slot(i int32) *cacheSlot[V] {
	return &s.pages[i/slotPage][i%slotPage]
}

// find returns the slot of key k (hash h) and its index position, or
// noSlot.
func (s *cacheShard[V]) find(h uint64, k string) (int32, int) {
	if len(s.idx) == 0 {
		return noSlot, 0
	}
	mask := uint64(len(s.idx) - 1)
	tag := h >> 32
	for pos := tag & mask; ; pos = (pos + 1) & mask {
		e := s.idx[pos]
		if e == 0 {
			return noSlot, 0
		}
		if e>>32 == tag {
			i := int32(uint32(e)) - 1
			if s.slot(i).h == h && s.keyIs(i, k) {
				return i, int(pos)
			}
		}
	}
}

// lookup returns the cached value of key with a reference to its slot, or,
// on a miss, a zero reference and the shard's generation, to be passed to
// fill.
func (c *valueCache[V]) lookup(h uint64, key []byte) (ref cacheRef, v V, present bool, gen uint64) {
	s := &c.shards[h&cacheShardMask]
	s.mu.Lock()
	if i, _ := s.find(h, unsafe.String(unsafe.SliceData(key), len(key))); i != noSlot {
		sl := s.slot(i)
		sl.visited = true
		v, present = sl.v, sl.present
		ref = cacheRef(i + 1)
		s.hits++
	} else {
		s.misses++
	}
	gen = s.gen
	s.mu.Unlock()
	return ref, v, present, gen
}

// fill adds a value read from Pebble, unless the shard changed since the
// lookup that missed (gen) or the key is already cached. It returns the
// new entry's reference, or 0.
func (c *valueCache[V]) fill(h uint64, key []byte, v V, present bool, encLen int, gen uint64) cacheRef {
	if !c.enabled() || len(key) > maxCacheKey {
		return 0
	}
	var ref cacheRef
	s := &c.shards[h&cacheShardMask]
	s.mu.Lock()
	if s.gen == gen {
		k := unsafe.String(unsafe.SliceData(key), len(key))
		if i, _ := s.find(h, k); i == noSlot {
			ref = cacheRef(c.insert(s, h, k, v, present, encLen) + 1)
		}
	}
	s.mu.Unlock()
	return ref
}

// put writes a committed value through. ref, if not 0, is the slot the
// Txn read the key from: if it still holds the key it is updated without
// an index lookup.
func (c *valueCache[V]) put(h uint64, key string, ref cacheRef, v V, present bool, encLen int) {
	if !c.enabled() || len(key) > maxCacheKey {
		return
	}
	s := &c.shards[h&cacheShardMask]
	s.mu.Lock()
	s.gen++
	i := int32(ref) - 1
	if i < 0 || i >= s.slots || !s.slot(i).live || s.slot(i).h != h || !s.keyIs(i, key) {
		i, _ = s.find(h, key)
	}
	if i != noSlot {
		sl := s.slot(i)
		size := entrySize[V](key, encLen)
		c.budget.used.Add(size - int64(sl.size))
		sl.v, sl.present, sl.size = v, present, int32(size)
		c.evict(s, i)
	} else {
		c.insert(s, h, key, v, present, encLen)
	}
	s.mu.Unlock()
}

// invalidate drops key.
func (c *valueCache[V]) invalidate(h uint64, key string) {
	if !c.enabled() {
		return
	}
	s := &c.shards[h&cacheShardMask]
	s.mu.Lock()
	s.gen++
	if i, pos := s.find(h, key); i != noSlot {
		c.remove(s, i, pos)
	}
	s.mu.Unlock()
}

// dropPartition drops every entry of the given partition (keys are
// table row keys: family, partition, table id, key).
func (c *valueCache[V]) dropPartition(p uint32) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.gen++
		for j := int32(0); j < s.slots; j++ {
			if k := s.keyBytes(j); s.slot(j).live && len(k) >= prefixLen && binary.BigEndian.Uint32(k[1:prefixLen]) == p {
				c.remove(s, j, -1)
			}
		}
		s.mu.Unlock()
	}
}

// purge drops every entry.
func (c *valueCache[V]) purge() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.gen++
		for j := int32(0); j < s.slots; j++ {
			if sl := s.slot(j); sl.live {
				c.budget.used.Add(-int64(sl.size))
			}
		}
		s.reset()
		s.mu.Unlock()
	}
}

// stats returns the lookups that hit and missed, and the entries.
func (c *valueCache[V]) stats() (hits, misses, entries int64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		hits, misses, entries = hits+s.hits, misses+s.misses, entries+int64(s.count)
		s.mu.Unlock()
	}
	return hits, misses, entries
}

// len returns the number of cached entries (tests).
func (c *valueCache[V]) len() int {
	_, _, n := c.stats()
	return int(n)
}

// insert adds key, which s does not hold, at the head of s's queue and
// returns its slot.
func (c *valueCache[V]) insert(s *cacheShard[V], h uint64, key string, v V, present bool, encLen int) int32 {
	i := s.free
	if i != noSlot {
		s.free = s.slot(i).next
	} else {
		if s.slots%slotPage == 0 {
			s.pages = append(s.pages, make([]cacheSlot[V], slotPage))
		}
		i = s.slots
		s.slots++
	}
	size := entrySize[V](key, encLen)
	sl := s.slot(i)
	*sl = cacheSlot[V]{h: h, v: v, present: present, live: true, size: int32(size), klen: uint16(len(key)), prev: s.head, next: noSlot}
	if len(key) > inlineKey {
		if s.long == nil {
			s.long = make(map[int32]string)
		}
		s.long[i] = strings.Clone(key) // key may be the caller's
	} else {
		copy(sl.key[:], key)
	}
	if s.head != noSlot {
		s.slot(s.head).next = i
	} else {
		s.tail = i
	}
	s.head = i
	s.count++
	s.index(h, i)
	c.budget.used.Add(size)
	c.evict(s, i)
	return i
}

// index adds slot i of hash h to the index, growing it if it would be more
// than three quarters full.
func (s *cacheShard[V]) index(h uint64, i int32) {
	if int(s.count)*4 > len(s.idx)*3 {
		old := s.idx
		s.idx = make([]uint64, max(16, 2*len(old)))
		mask := uint64(len(s.idx) - 1)
		for _, e := range old {
			if e != 0 {
				pos := (e >> 32) & mask
				for s.idx[pos] != 0 {
					pos = (pos + 1) & mask
				}
				s.idx[pos] = e
			}
		}
	}
	mask := uint64(len(s.idx) - 1)
	pos := (h >> 32) & mask
	for s.idx[pos] != 0 {
		pos = (pos + 1) & mask
	}
	s.idx[pos] = (h>>32)<<32 | uint64(uint32(i+1))
}

// unindex removes slot i from the index; pos is its position if known,
// else -1.
func (s *cacheShard[V]) unindex(i int32, pos int) {
	mask := uint64(len(s.idx) - 1)
	p := uint64(pos)
	if pos < 0 {
		for p = (s.slot(i).h >> 32) & mask; uint32(s.idx[p]) != uint32(i+1); p = (p + 1) & mask {
		}
	}
	// Backward shift: move later words of the probe run into the hole
	// when their home position allows it.
	for j := (p + 1) & mask; ; j = (j + 1) & mask {
		e := s.idx[j]
		if e == 0 {
			break
		}
		home := (e >> 32) & mask
		// e may move to p if p lies cyclically in [home, j).
		if (j-home)&mask >= (j-p)&mask {
			s.idx[p] = e
			p = j
		}
	}
	s.idx[p] = 0
}

// entrySize is what an entry counts against the budget: its slot (with
// the decoded value's fixed part), its share of the index, its key's bytes
// if they are not in the slot, and its encoded value's length, which
// stands for what the decoded value holds outside the slot (strings,
// slices; for fixed fields it counts them twice).
func entrySize[V any](key string, encLen int) int64 {
	n := int64(unsafe.Sizeof(cacheSlot[V]{})) + indexShare + int64(encLen)
	if len(key) > inlineKey {
		n += int64(len(key)) + mapSlotSize
	}
	return n
}

// evict removes entries of s other than keep until the DB is within budget
// or only keep is left (SIEVE: visited entries are spared once).
func (c *valueCache[V]) evict(s *cacheShard[V], keep int32) {
	for c.budget.used.Load() > c.budget.limit && s.head != s.tail {
		i := s.hand
		if i == noSlot {
			i = s.tail
		}
		sl := s.slot(i)
		s.hand = sl.next
		if i == keep || sl.visited {
			sl.visited = false
			continue
		}
		c.remove(s, i, -1)
	}
}

// remove drops slot i (at index position pos, or -1 if not known).
func (c *valueCache[V]) remove(s *cacheShard[V], i int32, pos int) {
	s.unindex(i, pos)
	sl := s.slot(i)
	if s.hand == i {
		s.hand = sl.next
	}
	if sl.prev != noSlot {
		s.slot(sl.prev).next = sl.next
	} else {
		s.tail = sl.next
	}
	if sl.next != noSlot {
		s.slot(sl.next).prev = sl.prev
	} else {
		s.head = sl.prev
	}
	c.budget.used.Add(-int64(sl.size))
	s.count--
	if sl.klen > inlineKey {
		delete(s.long, i)
	}
	// Reused by a later insert of this shard; a Txn may still hold its
	// reference (put checks the key).
	*sl = cacheSlot[V]{prev: noSlot, next: s.free}
	s.free = i
}
