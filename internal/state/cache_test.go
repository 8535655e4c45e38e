package state

import (
	"fmt"
	"testing"
)

// TestValueCacheKeepsKeysReadAgain checks the eviction policy: keys that
// are read again stay cached while many keys read once stream through.
func TestValueCacheKeepsKeysReadAgain(t *testing.T) {
	var budget cacheBudget
	budget.limit = 1000 * entrySize[int64]("hot-000", 8)
	c := newValueCache[int64](&budget)
	// All keys in shard 7: the policy, not the hashing, is tested.
	hash := func(i int) uint64 { return uint64(i)<<6 | 7 }
	hot := make([]string, 100)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot-%03d", i)
		c.put(hash(i), hot[i], nil, int64(i), true, 8)
	}
	for i := range 20_000 {
		for j, k := range hot[:10] { // read on every round
			if ce, _, _, _ := c.lookup(hash(j), []byte(k)); ce == nil {
				t.Fatalf("round %d: %s was evicted", i, k)
			}
		}
		c.put(hash(1000+i), fmt.Sprintf("cold-%06d", i), nil, 0, true, 8) // read once
		if used := budget.used.Load(); used > budget.limit {
			t.Fatalf("round %d: %d bytes cached, budget %d", i, used, budget.limit)
		}
	}
	if n := c.len(); n < 900 {
		t.Fatalf("%d entries cached; want the budget's ~1000", n)
	}
}

// TestValueCacheHashCollision checks that two keys of the same hash never
// serve each other's values.
func TestValueCacheHashCollision(t *testing.T) {
	var budget cacheBudget
	budget.limit = 1 << 20
	c := newValueCache[int64](&budget)
	const h = 42
	c.put(h, "a", nil, 1, true, 8)
	if ce, _, _, _ := c.lookup(h, []byte("b")); ce != nil {
		t.Fatal("lookup of b found a's entry")
	}
	_, _, _, gen := c.lookup(h, []byte("b"))
	if ce := c.fill(h, "b", 2, true, 8, gen); ce != nil {
		t.Fatal("fill of b replaced a's entry")
	}
	c.put(h, "b", nil, 3, true, 8) // a committed value of b wins the slot
	if ce, v, _, _ := c.lookup(h, []byte("b")); ce == nil || v != 3 {
		t.Fatalf("lookup of b after its put = %v %d; want 3", ce, v)
	}
	if ce, _, _, _ := c.lookup(h, []byte("a")); ce != nil {
		t.Fatal("a still cached after b took its slot")
	}
	c.invalidate(h, "a") // not cached: leaves b alone
	if ce, _, _, _ := c.lookup(h, []byte("b")); ce == nil {
		t.Fatal("invalidate of a dropped b")
	}
}
