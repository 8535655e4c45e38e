package iggytest

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// slab mirrors the Rust slab crate the server keeps its entities in: ids are
// 0-based slot indexes and a freed slot is reused by the next insert, most
// recently freed first.
type slab[T any] struct {
	items []*T
	free  []int
	n     int
}

func (s *slab[T]) insert(v *T) int {
	if k := len(s.free); k > 0 {
		id := s.free[k-1]
		s.free = s.free[:k-1]
		s.items[id] = v
		s.n++
		return id
	}
	s.items = append(s.items, v)
	s.n++
	return len(s.items) - 1
}

// insertAt puts v at id (replay of a persisted create); slots skipped over
// become free.
func (s *slab[T]) insertAt(id int, v *T) {
	for len(s.items) <= id {
		s.items = append(s.items, nil)
		s.free = append(s.free, len(s.items)-1)
	}
	if s.items[id] == nil {
		for i, f := range s.free {
			if f == id {
				s.free = append(s.free[:i], s.free[i+1:]...)
				break
			}
		}
		s.n++
	}
	s.items[id] = v
}

func (s *slab[T]) get(id uint32) *T {
	if int(id) >= len(s.items) {
		return nil
	}
	return s.items[id]
}

func (s *slab[T]) remove(id uint32) {
	if s.get(id) == nil {
		return
	}
	s.items[id] = nil
	s.free = append(s.free, int(id))
	s.n--
}

// each visits live entries in id order.
func (s *slab[T]) each(fn func(id uint32, v *T)) {
	for i, v := range s.items {
		if v != nil {
			fn(uint32(i), v)
		}
	}
}

type stream struct {
	id        uint32
	name      string
	createdAt uint64
	topics    slab[topic]
	byName    map[string]*topic
}

type topic struct {
	id          uint32
	uid         uint64 // unique across the broker's life: names the data directory
	name        string
	createdAt   uint64
	expiry      uint64
	compression uint8
	maxSize     uint64
	replication uint8
	partitions  []*partition
	groups      slab[group]
	groupByName map[string]*group
	rr          atomic.Uint64 // balanced partitioning, advanced once per send
}

type group struct {
	id      uint32
	name    string
	nparts  uint32
	members slab[member]
}

type member struct {
	id       uint32
	clientID uint32
	parts    []uint32
	index    atomic.Uint64 // rotation for polls without an explicit partition
}

// rebalance deals every partition round-robin over the members in slot
// order (server: ConsumerGroupMeta::rebalance_members). The broker uses it
// on join too, where server 0.8.0 uses its lopsided cooperative variant.
func (g *group) rebalance() {
	var ms []*member
	g.members.each(func(_ uint32, m *member) { m.parts = m.parts[:0]; ms = append(ms, m) })
	if len(ms) == 0 {
		return
	}
	for p := uint32(0); p < g.nparts; p++ {
		m := ms[int(p)%len(ms)]
		m.parts = append(m.parts, p)
	}
}

func (g *group) memberOf(clientID uint32) *member {
	var found *member
	g.members.each(func(_ uint32, m *member) {
		if m.clientID == clientID {
			found = m
		}
	})
	return found
}

// batch is the stored form of one SendMessages request: its messages section
// with offsets, timestamp, ids and checksums stamped in place. Stored bytes
// are never modified again, so polls hand out sub-slices without copying.
type batch struct {
	base uint64   // offset of the first message
	ts   uint64   // server timestamp of every message in it
	data []byte   // messages back to back (64-byte header, payload, user headers)
	ends []uint32 // ends[i]: end of message i in data
}

func (b *batch) last() uint64 { return b.base + uint64(len(b.ends)) - 1 }

// pos returns the start of message off (which must be in the batch).
func (b *batch) pos(off uint64) uint32 {
	i := off - b.base
	if i == 0 {
		return 0
	}
	return b.ends[i-1]
}

type partition struct {
	id        uint32
	createdAt uint64

	mu           sync.Mutex
	deleted      bool
	batches      []*batch
	first, next  uint64 // retained offsets are [first, next)
	size         uint64 // bytes of retained messages
	lastTS       uint64
	offsets      map[uint64]uint64 // single consumers: id (or XXH32 of name) → last consumed offset
	groupOffsets map[uint32]uint64 // consumer groups: group id → last consumed offset
	disk         *partDisk
}

func newPartition(id uint32, createdAt uint64) *partition {
	return &partition{id: id, createdAt: createdAt, offsets: map[uint64]uint64{}, groupOffsets: map[uint32]uint64{}}
}

// currentOffset is the server's partition offset: the last message's offset,
// 0 when empty.
func (p *partition) currentOffset() uint64 {
	if p.next == 0 {
		return 0
	}
	return p.next - 1
}

func (p *partition) count() uint64 { return p.next - p.first }

// appendLocked stores b (already stamped) and applies retention.
func (p *partition) appendLocked(b *batch, max int) {
	p.batches = append(p.batches, b)
	p.next = b.base + uint64(len(b.ends))
	p.size += uint64(len(b.data))
	p.lastTS = b.ts
	if max > 0 && p.count() > uint64(max) {
		p.trimLocked(p.next - uint64(max))
	}
}

// trimLocked drops messages below newFirst.
func (p *partition) trimLocked(newFirst uint64) {
	for p.first < newFirst && len(p.batches) > 0 {
		b := p.batches[0]
		from := p.first
		if from < b.base {
			from = b.base
		}
		if b.last() < newFirst {
			p.size -= uint64(uint32(len(b.data)) - b.pos(from))
			p.batches[0] = nil
			p.batches = p.batches[1:]
			p.first = b.last() + 1
			continue
		}
		p.size -= uint64(b.pos(newFirst) - b.pos(from))
		p.first = newFirst
	}
	if p.first < newFirst {
		p.first = newFirst
	}
}

func (p *partition) purgeLocked() {
	p.batches = nil
	p.first, p.next, p.size = 0, 0, 0
	clear(p.offsets)
	clear(p.groupOffsets)
}

// read collects up to count messages from offset start as sub-slices of
// stored batches, appending them to dst; it returns the slices, the number
// of messages, the bytes and the last offset.
func (p *partition) readLocked(dst [][]byte, start uint64, count uint32) ([][]byte, uint32, int, uint64) {
	if start < p.first {
		start = p.first
	}
	if count == 0 || start >= p.next || len(p.batches) == 0 {
		return dst, 0, 0, 0
	}
	i := sort.Search(len(p.batches), func(i int) bool { return p.batches[i].last() >= start })
	var n uint32
	size := 0
	last := uint64(0)
	for ; i < len(p.batches) && n < count; i++ {
		b := p.batches[i]
		from := start
		if from < b.base {
			from = b.base
		}
		to := b.last()
		if rem := uint64(count - n); to-from+1 > rem {
			to = from + rem - 1
		}
		s, e := b.pos(from), b.ends[to-b.base]
		dst = append(dst, b.data[s:e])
		size += int(e - s)
		n += uint32(to - from + 1)
		last = to
	}
	return dst, n, size, last
}

// firstAtOrAfter returns the offset of the first retained message whose
// server timestamp is ≥ ts, or p.next when there is none.
func (p *partition) firstAtOrAfterLocked(ts uint64) uint64 {
	i := sort.Search(len(p.batches), func(i int) bool { return p.batches[i].ts >= ts })
	if i == len(p.batches) {
		return p.next
	}
	off := p.batches[i].base
	if off < p.first {
		off = p.first
	}
	return off
}

// session is one TCP connection: the server's client.
type session struct {
	clientID uint32
	addr     string
	userID   atomic.Int64 // -1 when not logged in
	groups   []groupRef   // guarded by broker.mu
	lastBeat atomic.Int64 // unix nanoseconds of the last Ping (or of the connect)
	stale    atomic.Bool  // forgotten by the heartbeat verifier
}

type groupRef struct{ stream, topic, group uint32 }

func nowMicros() uint64 { return uint64(time.Now().UnixMicro()) }

// headers of response structures -----------------------------------------

func appendStreamHeader(e encoder, s *stream) encoder {
	var size, msgs uint64
	s.topics.each(func(_ uint32, t *topic) {
		ts, tm := t.stats()
		size += ts
		msgs += tm
	})
	e = e.u32(s.id).u64(s.createdAt).u32(uint32(s.topics.n)).u64(size).u64(msgs)
	return e.name(s.name)
}

func (t *topic) stats() (size, msgs uint64) {
	for _, p := range t.partitions {
		p.mu.Lock()
		size += p.size
		msgs += p.count()
		p.mu.Unlock()
	}
	return size, msgs
}

func appendTopicHeader(e encoder, t *topic) encoder {
	size, msgs := t.stats()
	e = e.u32(t.id).u64(t.createdAt).u32(uint32(len(t.partitions))).u64(t.expiry).u8(t.compression)
	e = e.u64(t.maxSize).u8(t.replication).u64(size).u64(msgs)
	return e.name(t.name)
}

func appendPartitionInfo(e encoder, p *partition) encoder {
	p.mu.Lock()
	cur, size, msgs := p.currentOffset(), p.size, p.count()
	p.mu.Unlock()
	return e.u32(p.id).u64(p.createdAt).u32(1).u64(cur).u64(size).u64(msgs)
}

func appendGroupHeader(e encoder, g *group) encoder {
	return e.u32(g.id).u32(g.nparts).u32(uint32(g.members.n)).name(g.name)
}

func appendClientHeader(e encoder, s *session) encoder {
	uid := uint32(0xFFFFFFFF)
	if v := s.userID.Load(); v >= 0 {
		uid = uint32(v)
	}
	return e.u32(s.clientID).u32(uid).u8(1).str32(s.addr).u32(uint32(len(s.groups)))
}
