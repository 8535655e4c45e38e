package state

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestValueCacheKeepsKeysReadAgain checks the eviction policy: keys that
// are read again stay cached while many keys read once stream through.
func TestValueCacheKeepsKeysReadAgain(t *testing.T) {
	var budget cacheBudget
	budget.limit = 1000 * entrySize[int64]("hot-000", 8)
	c := newValueCache[int64](&budget)
	// All keys in shard 7: the policy, not the hashing, is tested.
	hash := func(i int) uint64 { return uint64(i)<<38 | uint64(i)<<6 | 7 }
	hot := make([]string, 100)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot-%03d", i)
		c.put(hash(i), hot[i], 0, int64(i), true, 8)
	}
	for i := range 20_000 {
		for j, k := range hot[:10] { // read on every round
			if ref, v, _, _ := c.lookup(hash(j), []byte(k)); ref == 0 || v != int64(j) {
				t.Fatalf("round %d: %s was evicted (or has %d)", i, k, v)
			}
		}
		c.put(hash(1000+i), fmt.Sprintf("cold-%06d", i), 0, 0, true, 8) // read once
		if used := budget.used.Load(); used > budget.limit {
			t.Fatalf("round %d: %d bytes cached, budget %d", i, used, budget.limit)
		}
	}
	if n := c.len(); n < 900 {
		t.Fatalf("%d entries cached; want the budget's ~1000", n)
	}
}

// TestValueCacheHashCollision checks that two keys of the same hash never
// serve each other's values, and that dropping one leaves the other.
func TestValueCacheHashCollision(t *testing.T) {
	var budget cacheBudget
	budget.limit = 1 << 20
	c := newValueCache[int64](&budget)
	const h = 42 << 32
	c.put(h, "a", 0, 1, true, 8)
	if ref, _, _, _ := c.lookup(h, []byte("b")); ref != 0 {
		t.Fatal("lookup of b found a's entry")
	}
	_, _, _, gen := c.lookup(h, []byte("b"))
	if ref := c.fill(h, []byte("b"), 2, true, 8, gen); ref == 0 {
		t.Fatal("fill of b refused")
	}
	c.put(h, "b", 0, 3, true, 8)
	if ref, v, _, _ := c.lookup(h, []byte("b")); ref == 0 || v != 3 {
		t.Fatalf("lookup of b after its put = %v %d; want 3", ref, v)
	}
	if ref, v, _, _ := c.lookup(h, []byte("a")); ref == 0 || v != 1 {
		t.Fatalf("lookup of a = %v %d; want 1", ref, v)
	}
	c.invalidate(h, "a")
	if ref, _, _, _ := c.lookup(h, []byte("a")); ref != 0 {
		t.Fatal("a still cached after its invalidation")
	}
	if ref, v, _, _ := c.lookup(h, []byte("b")); ref == 0 || v != 3 {
		t.Fatal("invalidate of a dropped b")
	}
}

// TestValueCacheStaleRef checks that a reference to a slot that was
// reused for another key does not update that key.
func TestValueCacheStaleRef(t *testing.T) {
	var budget cacheBudget
	budget.limit = 1 << 20
	c := newValueCache[int64](&budget)
	c.put(1<<32, "a", 0, 1, true, 8)
	ref, _, _, _ := c.lookup(1<<32, []byte("a"))
	c.invalidate(1<<32, "a")
	c.put(2<<32, "b", 0, 2, true, 8) // takes a's slot
	c.put(1<<32, "a", ref, 5, true, 8)
	if _, v, _, _ := c.lookup(2<<32, []byte("b")); v != 2 {
		t.Fatalf("b = %d after a stale put of a; want 2", v)
	}
	if _, v, _, _ := c.lookup(1<<32, []byte("a")); v != 5 {
		t.Fatalf("a = %d; want 5", v)
	}
}

// TestValueCacheModel runs random operations against the cache and a map
// of the committed values: whatever the cache returns must be the key's
// last committed value (it may forget keys, never confuse or keep stale
// ones), the budget's count must be the sum of the entries' sizes, and it
// must stay within the budget. Hashes are drawn from a few values so that
// collisions, long probe runs and backward shifts are common.
func TestValueCacheModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var budget cacheBudget
		budget.limit = rapid.SampledFrom([]int64{1, 2_000, 20_000, 1 << 20}).Draw(t, "limit")
		c := newValueCache[int64](&budget)
		nkeys := rapid.IntRange(1, 300).Draw(t, "keys")
		hashes := rapid.IntRange(1, 64).Draw(t, "hashes")
		keyOf := func(i int) string {
			k := make([]byte, 9, 64)
			k[0] = byte(FamilyTable)
			binary.BigEndian.PutUint32(k[1:5], uint32(i%3))
			k = append(k, fmt.Sprint(i)...)
			if i%7 == 0 {
				k = append(k, strings.Repeat("x", 30)...) // a key longer than a slot holds
			}
			return string(k)
		}
		hashOf := func(i int) uint64 {
			x := uint64(i%hashes) * 0x9e3779b97f4a7c15
			return x<<32 | x>>32&^0xffffffff | uint64(i%hashes)&cacheShardMask
		}
		model := map[int]int64{}
		refs := map[int]cacheRef{}
		gens := map[int]uint64{}
		var next int64
		for range rapid.IntRange(1, 600).Draw(t, "ops") {
			i := rapid.IntRange(0, nkeys-1).Draw(t, "key")
			k, h := keyOf(i), hashOf(i)
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1: // lookup
				ref, v, present, gen := c.lookup(h, []byte(k))
				if ref != 0 {
					want, ok := model[i]
					if !ok || !present || v != want {
						t.Fatalf("key %d: cached %d (present %v); committed %d (%v)", i, v, present, want, ok)
					}
					refs[i] = ref
				} else {
					gens[i] = gen
				}
			case 2: // fill after a miss, with the committed value
				if gen, ok := gens[i]; ok {
					if v, ok := model[i]; ok {
						c.fill(h, []byte(k), v, true, 8, gen)
					}
					delete(gens, i)
				}
			case 3, 4: // commit a new value
				next++
				model[i] = next
				c.put(h, k, refs[i], next, true, rapid.IntRange(0, 40).Draw(t, "encLen"))
			case 5:
				switch rapid.IntRange(0, 9).Draw(t, "drop") {
				case 0:
					c.dropPartition(uint32(i % 3))
				case 1:
					c.purge()
				default:
					c.invalidate(h, k)
				}
			}
			var sum int64
			n := 0
			for si := range c.shards {
				s := &c.shards[si]
				for j := int32(0); j < s.slots; j++ {
					if sl := s.slot(j); sl.live {
						sum += int64(sl.size)
						n++
						if f, _ := s.find(sl.h, string(s.keyBytes(j))); f != j {
							t.Fatalf("slot %d of shard %d not found through the index", j, si)
						}
					}
				}
				if int(s.count) != countQueue(s) {
					t.Fatalf("shard %d: count %d, queue %d", si, s.count, countQueue(s))
				}
			}
			if used := budget.used.Load(); used != sum {
				t.Fatalf("budget counts %d bytes, entries hold %d", used, sum)
			}
			// A shard evicts down to the entry it just changed, so the
			// DB may be over budget by about an entry per shard.
			if used := budget.used.Load(); used > budget.limit+cacheShards*entrySize[int64](strings.Repeat("x", 64), 40) {
				t.Fatalf("%d bytes cached in %d entries, budget %d", used, n, budget.limit)
			}
		}
	})
}

func countQueue[V any](s *cacheShard[V]) int {
	n := 0
	for i := s.tail; i != noSlot; i = s.slot(i).next {
		n++
	}
	return n
}

// TestEntryIndexModel checks a Txn shard's entry index against a map:
// random adds, removes and gets over a few hash values (long probe runs,
// wrap-around, backward shifts).
func TestEntryIndexModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var x entryIndex[int]
		hashes := rapid.IntRange(1, 40).Draw(t, "hashes")
		model := map[string]*txnEntry[int]{}
		for range rapid.IntRange(1, 400).Draw(t, "ops") {
			i := rapid.IntRange(0, 99).Draw(t, "key")
			k := fmt.Sprint("k", i)
			h := uint64(i%hashes) * 0x9e3779b97f4a7c15
			got := x.get(h, k)
			if got != model[k] {
				t.Fatalf("get(%s) = %p, want %p", k, got, model[k])
			}
			switch {
			case got == nil:
				e := &txnEntry[int]{key: k, h: h, v: i}
				x.add(e)
				model[k] = e
			case rapid.Bool().Draw(t, "remove"):
				x.remove(got)
				delete(model, k)
			}
			if x.len() != len(model) {
				t.Fatalf("index holds %d entries, want %d", x.len(), len(model))
			}
		}
		for k, e := range model {
			if got := x.get(e.h, k); got != e {
				t.Fatalf("get(%s) at the end = %p, want %p", k, got, e)
			}
		}
	})
}
