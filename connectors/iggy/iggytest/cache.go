package iggytest

import "sync"

// cache bounds the message bytes a durable broker keeps in memory: batches
// read from (or just written to) segment files are resident until newer
// ones push them out, oldest first. Eviction only drops a batch's resident
// pointer, so a poll that already holds the bytes keeps them until its
// reply is written; no partition lock is taken (the cache's mutex is a
// leaf lock, taken under partition locks).
type cache struct {
	mu     sync.Mutex
	budget int64
	used   int64
	q      []cacheEntry
	head   int
	gen    uint64
}

type cacheEntry struct {
	b    *batch
	gen  uint64
	size int64
}

func newCache(budget int64) *cache { return &cache{budget: budget} }

// add makes r b's resident bytes and evicts the oldest entries beyond the
// budget (possibly r itself, which its caller still holds).
func (c *cache) add(b *batch, r *resident) {
	if c == nil {
		b.res.Store(r)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	r.gen = c.gen
	b.res.Store(r)
	size := int64(len(r.data))
	c.q = append(c.q, cacheEntry{b: b, gen: r.gen, size: size})
	c.used += size
	for c.used > c.budget && c.head < len(c.q) {
		e := c.q[c.head]
		c.q[c.head] = cacheEntry{}
		c.head++
		c.used -= e.size
		if cur := e.b.res.Load(); cur != nil && cur.gen == e.gen {
			e.b.res.CompareAndSwap(cur, nil)
		}
	}
	if c.head > 1024 && c.head > len(c.q)/2 {
		n := copy(c.q, c.q[c.head:])
		clear(c.q[n:])
		c.q = c.q[:n]
		c.head = 0
	}
}

// residentBytes reports the bytes the cache accounts for (for tests).
func (c *cache) residentBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}
