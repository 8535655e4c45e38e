package iggytest

import (
	"fmt"
	"os"
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

// batch is the stored form of one SendMessages request: its messages
// section with offsets, timestamp, ids and checksums stamped in place. The
// bytes are never modified again, so polls hand out sub-slices without
// copying. In memory they are always resident; with a data directory they
// live in a segment file and are resident only while the read cache holds
// them (see cache).
type batch struct {
	base uint64   // offset of the first message
	ts   uint64   // server timestamp of every message in it
	n    uint32   // messages
	size uint32   // bytes of the messages
	seg  *segMeta // segment holding it
	pos  int64    // with a data directory: offset of the bytes in seg's file
	res  atomic.Pointer[resident]
}

// resident is a batch's bytes in memory and the end of every message in
// them.
type resident struct {
	data []byte
	ends []uint32 // ends[i]: end of message i in data
	gen  uint64   // identifies this load for the cache
}

func newBatch(base, ts uint64, data []byte, ends []uint32) *batch {
	b := &batch{base: base, ts: ts, n: uint32(len(ends)), size: uint32(len(data))}
	b.res.Store(&resident{data: data, ends: ends})
	return b
}

func (b *batch) last() uint64 { return b.base + uint64(b.n) - 1 }

// pos returns the start of message off (which must be in b).
func (r *resident) pos(b *batch, off uint64) uint32 {
	i := off - b.base
	if i == 0 {
		return 0
	}
	return r.ends[i-1]
}

// segMeta is one segment of a partition: a run of consecutive batches
// that retention deletes as a whole (with a data directory, one file).
// Callers hold the partition's mutex.
type segMeta struct {
	base    uint64 // offset of its first message
	next    uint64 // offset after its last message
	startTS uint64
	endTS   uint64
	bytes   uint64 // retained message bytes
	hole    uint64 // offsets before base that hold no message (a repair's hole)
	path    string // with a data directory
	rf      *os.File
}

func (sg *segMeta) readAt(b []byte, off int64) error {
	if sg.rf == nil {
		f, err := os.Open(sg.path)
		if err != nil {
			return err
		}
		sg.rf = f
	}
	_, err := sg.rf.ReadAt(b, off)
	return err
}

func (sg *segMeta) closeFile() {
	if sg.rf != nil {
		sg.rf.Close()
		sg.rf = nil
	}
}

type partition struct {
	id        uint32
	createdAt uint64

	mu           sync.Mutex
	deleted      bool
	batches      []*batch
	segs         []*segMeta
	first, next  uint64 // retained offsets are [first, next)
	size         uint64 // bytes of retained messages
	holes        uint64 // offsets in [first, next) that hold no message (see addHoleLocked)
	lastTS       uint64
	offsets      map[uint64]uint64 // single consumers: id (or XXH32 of name) → last consumed offset
	groupOffsets map[uint32]uint64 // consumer groups: group id → last consumed offset
	lastPolled   map[uint32]uint64 // consumer groups: group id → last offset a member's poll returned
	disk         *partDisk
	cache        *cache // with a data directory: the broker's read cache
	segBytes     int64  // in memory: size at which a segment is sealed
}

func newPartition(id uint32, createdAt uint64) *partition {
	return &partition{id: id, createdAt: createdAt, offsets: map[uint64]uint64{}, groupOffsets: map[uint32]uint64{},
		lastPolled: map[uint32]uint64{}, segBytes: segmentSizeDefault}
}

// currentOffset is the server's partition offset: the last message's offset,
// 0 when empty.
func (p *partition) currentOffset() uint64 {
	if p.next == 0 {
		return 0
	}
	return p.next - 1
}

// count is the number of retained messages: the offsets in [first, next)
// but those of holes a repair left between segments.
func (p *partition) count() uint64 { return p.next - p.first - p.holes }

// addHoleLocked records that the offsets [from, base) before the newest
// segment (which starts at base) hold no messages.
func (p *partition) addHoleLocked(from uint64) {
	sg := p.segs[len(p.segs)-1]
	if len(p.segs) > 1 && from < sg.base {
		sg.hole = sg.base - from
		p.holes += sg.hole
	}
}

// segmentsCount is what GetTopic reports: at least the active segment.
func (p *partition) segmentsCount() uint32 { return uint32(max(1, len(p.segs))) }

// addSegLocked starts a new segment at base (the previous one is sealed).
func (p *partition) addSegLocked(base uint64, path string) {
	p.segs = append(p.segs, &segMeta{base: base, next: base, path: path})
}

// appendLocked stores b (already stamped, and written to its segment file
// with a data directory) and applies WithMaxMessagesPerPartition.
func (p *partition) appendLocked(b *batch, max int) {
	if p.disk == nil && (len(p.segs) == 0 || int64(p.segs[len(p.segs)-1].bytes) >= p.segBytes) {
		p.addSegLocked(b.base, "")
	}
	if len(p.segs) == 0 {
		p.addSegLocked(b.base, "")
	}
	sg := p.segs[len(p.segs)-1]
	if sg.next == sg.base {
		sg.startTS = b.ts
	}
	sg.next = b.base + uint64(b.n)
	sg.endTS = b.ts
	sg.bytes += uint64(b.size)
	b.seg = sg
	p.batches = append(p.batches, b)
	p.next = b.base + uint64(b.n)
	p.size += uint64(b.size)
	p.lastTS = b.ts
	if max > 0 && p.count() > uint64(max) {
		p.trimLocked(p.next - uint64(max))
	}
}

// residentLocked returns b's bytes, reading them from its segment file
// when the cache let them go.
func (p *partition) residentLocked(b *batch) (*resident, error) {
	if r := b.res.Load(); r != nil {
		return r, nil
	}
	if b.seg == nil || b.seg.path == "" {
		return nil, errCorrupt
	}
	data := make([]byte, b.size)
	if err := b.seg.readAt(data, b.pos); err != nil {
		return nil, fmt.Errorf("read segment %s: %w", b.seg.path, err)
	}
	nb, err := parseStoredBatch(data, b.base)
	if err != nil || nb.n != b.n {
		return nil, fmt.Errorf("segment %s at %d: %w", b.seg.path, b.pos, errCorrupt)
	}
	r := nb.res.Load()
	p.cache.add(b, r)
	return r, nil
}

// trimLocked drops messages below newFirst (WithMaxMessagesPerPartition).
func (p *partition) trimLocked(newFirst uint64) {
	for p.first < newFirst && len(p.batches) > 0 {
		b := p.batches[0]
		from := max(p.first, b.base)
		if b.last() < newFirst {
			var gone uint64
			if r, err := p.residentLocked(b); err == nil {
				gone = uint64(b.size - r.pos(b, from))
			} else {
				gone = uint64(b.size) * (b.last() + 1 - from) / uint64(b.n)
			}
			p.size -= gone
			b.seg.bytes -= gone
			b.res.Store(nil)
			p.batches[0] = nil
			p.batches = p.batches[1:]
			p.first = b.last() + 1
			continue
		}
		var gone uint64
		if r, err := p.residentLocked(b); err == nil {
			gone = uint64(r.pos(b, newFirst) - r.pos(b, from))
		} else {
			gone = uint64(b.size) * (newFirst - from) / uint64(b.n)
		}
		p.size -= gone
		b.seg.bytes -= gone
		p.first = newFirst
	}
	if p.first < newFirst {
		p.first = newFirst
	}
	// Segments wholly below first are gone (their files too).
	for len(p.segs) > 1 && p.segs[0].next <= p.first {
		p.dropFirstSegLocked()
	}
}

// dropFirstSegLocked forgets the oldest segment and deletes its file; its
// batches must already be gone from p.batches.
func (p *partition) dropFirstSegLocked() {
	sg := p.segs[0]
	sg.closeFile()
	if sg.path != "" {
		_ = os.Remove(sg.path)
	}
	p.segs[0] = nil
	p.segs = p.segs[1:]
	if len(p.segs) > 0 {
		p.holes -= p.segs[0].hole // now before first
		p.segs[0].hole = 0
		p.first = max(p.first, p.segs[0].base)
	}
}

// removeOldestSegLocked deletes the oldest segment with its messages, as
// the server's message cleaner does; the active (last) segment is never
// removed. It returns the number of messages removed.
func (p *partition) removeOldestSegLocked() uint64 {
	if len(p.segs) < 2 {
		return 0
	}
	sg := p.segs[0]
	i := 0
	for i < len(p.batches) && p.batches[i].base < sg.next {
		p.batches[i].res.Store(nil)
		p.batches[i] = nil
		i++
	}
	p.batches = p.batches[i:]
	removed := uint64(0)
	if sg.next > p.first {
		removed = sg.next - p.first
		p.first = sg.next
	}
	p.size -= sg.bytes
	p.dropFirstSegLocked()
	return removed
}

func (p *partition) purgeLocked() {
	for _, b := range p.batches {
		b.res.Store(nil)
	}
	for _, sg := range p.segs {
		sg.closeFile()
	}
	p.batches, p.segs = nil, nil
	p.first, p.next, p.size, p.holes = 0, 0, 0, 0
	clear(p.offsets)
	clear(p.groupOffsets) // lastPolled stays: the server keeps it across a purge
}

// closeFilesLocked closes the segments' read handles.
func (p *partition) closeFilesLocked() {
	for _, sg := range p.segs {
		sg.closeFile()
	}
}

// read collects up to count messages from offset start as sub-slices of
// stored batches, appending them to dst, and stops before the message
// that would take the bytes past maxBytes (the first message is always
// taken); it returns the slices, the number of messages, the bytes and the
// last offset.
func (p *partition) readLocked(dst [][]byte, start uint64, count uint32, maxBytes int) ([][]byte, uint32, int, uint64, error) {
	if start < p.first {
		start = p.first
	}
	if count == 0 || start >= p.next || len(p.batches) == 0 {
		return dst, 0, 0, 0, nil
	}
	i := sort.Search(len(p.batches), func(i int) bool { return p.batches[i].last() >= start })
	var n uint32
	size := 0
	last := uint64(0)
	for ; i < len(p.batches) && n < count; i++ {
		b := p.batches[i]
		r, err := p.residentLocked(b)
		if err != nil {
			return dst, 0, 0, 0, err
		}
		from := max(start, b.base)
		to := b.last()
		if rem := uint64(count - n); to-from+1 > rem {
			to = from + rem - 1
		}
		s, e := r.pos(b, from), r.ends[to-b.base]
		if size+int(e-s) > maxBytes {
			// The last message of [from, to] that still fits, if any.
			k := sort.Search(int(to-from+1), func(k int) bool {
				return size+int(r.ends[from-b.base+uint64(k)]-s) > maxBytes
			})
			if k == 0 && n > 0 {
				break
			}
			to = from + uint64(max(k, 1)) - 1
			e = r.ends[to-b.base]
			i = len(p.batches) // nothing more after this batch
		}
		dst = append(dst, r.data[s:e])
		size += int(e - s)
		n += uint32(to - from + 1)
		last = to
	}
	return dst, n, size, last, nil
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
	cur, size, msgs, segs := p.currentOffset(), p.size, p.count(), p.segmentsCount()
	p.mu.Unlock()
	return e.u32(p.id).u64(p.createdAt).u32(segs).u64(cur).u64(size).u64(msgs)
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
