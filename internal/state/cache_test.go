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
	const shard = 7 // one shard: the policy, not the hashing, is tested
	hot := make([]string, 100)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot-%03d", i)
		c.put(shard, hot[i], nil, int64(i), true, 8)
	}
	for i := range 20_000 {
		for _, k := range hot[:10] { // read on every round
			if ce, _, _, _ := c.lookup(shard, []byte(k)); ce == nil && i > 0 {
				t.Fatalf("round %d: %s was evicted", i, k)
			} else if ce == nil {
				c.put(shard, k, nil, 1, true, 8)
			}
		}
		c.put(shard, fmt.Sprintf("cold-%06d", i), nil, 0, true, 8) // read once
		if used := budget.used.Load(); used > budget.limit {
			t.Fatalf("round %d: %d bytes cached, budget %d", i, used, budget.limit)
		}
	}
	if n := c.len(); n < 900 {
		t.Fatalf("%d entries cached; want the budget's ~1000", n)
	}
}
