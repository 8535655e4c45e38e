package iggytest

import (
	"encoding/binary"
	"net"

	"github.com/strand-io/strand/internal/xxh32"
	"github.com/zeebo/xxh3"
)

// sendRequest is a parsed SendMessages payload.
type sendRequest struct {
	sid, tid ident
	kind     uint8 // partitioning: 1 balanced, 2 partition id, 3 messages key
	value    []byte
	count    uint32
	index    []byte
	msgs     []byte
	ends     []uint32
}

// rawIdent parses an Identifier the way the server's send path does
// (Identifier::from_raw_bytes): every defect is InvalidIdentifier.
func rawIdent(b []byte) (ident, int, uint32) {
	if len(b) < 2 {
		return ident{}, 0, StatusInvalidIdentifier
	}
	kind, n := b[0], int(b[1])
	if len(b) < 2+n || n == 0 {
		return ident{}, 0, StatusInvalidIdentifier
	}
	v := b[2 : 2+n]
	switch kind {
	case 1:
		if n != 4 {
			return ident{}, 0, StatusInvalidIdentifier
		}
		return ident{num: binary.LittleEndian.Uint32(v)}, 2 + n, 0
	case 2:
		return ident{name: string(v), isName: true}, 2 + n, 0
	}
	return ident{}, 0, StatusInvalidIdentifier
}

// parseSend decodes and validates a SendMessages payload as server 0.8.0
// does (send_messages_handler.rs, IggyMessagesBatchMut::validate), in the
// same order, returning the status the server would answer. maxPayload is
// the largest payload accepted.
func parseSend(p []byte, maxPayload int) (sendRequest, uint32) {
	var r sendRequest
	total := len(p)
	if total < 4 {
		return r, StatusInvalidCommand
	}
	msize := int(binary.LittleEndian.Uint32(p))
	if msize > total || 4+msize > total {
		return r, StatusInvalidCommand
	}
	meta := p[4 : 4+msize]
	var n int
	var st uint32
	if r.sid, n, st = rawIdent(meta); st != 0 {
		return r, st
	}
	pos := n
	if r.tid, n, st = rawIdent(meta[pos:]); st != 0 {
		return r, st
	}
	pos += n
	if pos+2 > len(meta) {
		return r, StatusInvalidCommand
	}
	r.kind = meta[pos]
	plen := int(meta[pos+1])
	switch {
	case r.kind < 1 || r.kind > 3,
		r.kind == 2 && plen != 4,
		r.kind == 1 && plen != 0,
		pos+2+plen > len(meta):
		return r, StatusInvalidCommand
	}
	r.value = meta[pos+2 : pos+2+plen]
	pos += 2 + plen
	if pos+4 > len(meta) {
		return r, StatusInvalidCommand
	}
	r.count = binary.LittleEndian.Uint32(meta[pos:])
	isize := uint64(r.count) * indexSize
	if isize > uint64(total) {
		return r, StatusInvalidCommand
	}
	if uint64(total) < uint64(msize)+isize+4 {
		return r, StatusInvalidCommand
	}
	r.index = p[4+msize : 4+msize+int(isize)]
	r.msgs = p[4+msize+int(isize):]
	if r.count == 0 {
		return r, StatusInvalidMessagesCount
	}
	r.ends = make([]uint32, r.count)
	var prevEnd uint32
	var prevOffset uint64
	var sum uint64
	for i := 0; i < int(r.count); i++ {
		ix := r.index[i*indexSize:]
		if binary.LittleEndian.Uint32(ix[0:]) != 0 {
			return r, StatusNonZeroOffset
		}
		if binary.LittleEndian.Uint64(ix[8:]) != 0 {
			return r, StatusNonZeroTimestamp
		}
		end := binary.LittleEndian.Uint32(ix[4:])
		if end < prevEnd || uint64(end) > uint64(len(r.msgs)) || end-prevEnd < messageHeaderSize {
			return r, StatusMissingIndex
		}
		m := r.msgs[prevEnd:end]
		hlen := uint64(binary.LittleEndian.Uint32(m[48:]))
		plen := uint64(binary.LittleEndian.Uint32(m[52:]))
		size := messageHeaderSize + plen + hlen
		if size > uint64(len(m)) {
			return r, StatusMissingIndex
		}
		if plen > uint64(maxPayload) {
			return r, StatusTooBigMessagePayload
		}
		if hlen > maxUserHeadersSize {
			return r, StatusTooBigUserHeaders
		}
		off := binary.LittleEndian.Uint64(m[24:])
		if off < prevOffset {
			return r, StatusInvalidOffset
		}
		if size != uint64(len(m)) {
			// The server would store a misaligned batch; refuse it.
			return r, StatusInvalidMessagesSize
		}
		prevOffset = off
		sum += size
		r.ends[i] = end
		prevEnd = end
	}
	if sum != uint64(len(r.msgs)) {
		return r, StatusInvalidMessagesSize
	}
	return r, 0
}

func (c *conn) sendMessages(p []byte) ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	r, status := parseSend(p, c.s.cfg.maxMsgSize)
	if status != 0 {
		return nil, statusError(status)
	}
	s := c.s
	s.mu.RLock()
	st, t, err := s.resolveTopic(r.sid, r.tid)
	if err == nil {
		err = c.can(permSend, st.id, t.id)
	}
	if err != nil {
		s.mu.RUnlock()
		return nil, err
	}
	n := uint64(len(t.partitions))
	var pid uint64
	switch r.kind {
	case 1:
		if n == 0 {
			s.mu.RUnlock()
			return nil, errTopicNF
		}
		for {
			cur := t.rr.Load()
			if t.rr.CompareAndSwap(cur, (cur+1)%n) {
				pid = cur % n
				break
			}
		}
	case 2:
		pid = uint64(binary.LittleEndian.Uint32(r.value))
	case 3:
		if n == 0 {
			s.mu.RUnlock()
			return nil, errPartitionNF
		}
		pid = uint64(xxh32.Sum(r.value, 0)) % n
	}
	if pid >= n {
		s.mu.RUnlock()
		return nil, errPartitionNF
	}
	part := t.partitions[pid]
	part.mu.Lock()
	s.mu.RUnlock()
	defer part.mu.Unlock()
	if part.deleted {
		return nil, errPartitionNF
	}
	ts := max(nowMicros(), part.lastTS)
	b := newBatch(part.next, ts, r.msgs, r.ends)
	c.stamp(b)
	if part.disk != nil {
		if err := part.disk.appendBatch(b); err != nil {
			if !isWriteError(err) {
				s.log.Error("iggytest: append to partition log failed", "partition", part.id, "err", err)
			}
			return nil, statusError(StatusError)
		}
		if len(part.segs) == 0 || part.segs[len(part.segs)-1].path != part.disk.path {
			part.addSegLocked(b.base, part.disk.path)
		}
	}
	part.appendLocked(b, s.cfg.maxPerPart)
	c.appended(b.base)
	if part.cache != nil {
		part.cache.add(b, b.res.Load())
	}
	return c.ok(), nil
}

// stamp writes offset, timestamp, id (when zero) and checksum into every
// message of b, as IggyMessagesBatchMut::prepare_for_persistence does.
func (c *conn) stamp(b *batch) {
	r := b.res.Load()
	start := uint32(0)
	for i, end := range r.ends {
		m := r.data[start:end]
		binary.LittleEndian.PutUint64(m[24:], b.base+uint64(i))
		binary.LittleEndian.PutUint64(m[32:], b.ts)
		if binary.LittleEndian.Uint64(m[8:]) == 0 && binary.LittleEndian.Uint64(m[16:]) == 0 {
			c.randomID(m[8:24])
		}
		binary.LittleEndian.PutUint64(m[0:], xxh3.Hash(m[8:]))
		start = end
	}
}

// randomID writes a random UUIDv4 as the server does (u128 little-endian of
// the UUID's big-endian bytes).
func (c *conn) randomID(dst []byte) {
	var u [16]byte
	binary.LittleEndian.PutUint64(u[0:], c.rng.Uint64())
	binary.LittleEndian.PutUint64(u[8:], c.rng.Uint64())
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	for i := 0; i < 16; i++ {
		dst[i] = u[15-i]
	}
}

func consumerKey(id ident) uint64 {
	if id.isName {
		return uint64(xxh32.Sum([]byte(id.name), 0))
	}
	return uint64(id.num)
}

// resolved is what a consumer works on: a partition and, for a group
// member, its group and member.
type resolved struct {
	pid uint32
	g   *group
	m   *member
	// revoking: the member's partition is pending revocation, so an offset
	// commit may complete it.
	revoking bool
}

// resolveConsumer returns the partition a consumer works on and, for a
// group member, its group and member. ok is false when a member has no
// partition to work on (the server's "None": empty poll, 3022 on store).
// calc advances the member's rotation (polls do, offset commands do not).
// Rotation skips partitions pending revocation; an explicit partition may
// be one (server: resolve_consumer_with_partition_id). Callers hold s.mu
// for reading.
func (c *conn) resolveConsumer(t *topic, cons consumerRef, pid uint32, explicit, calc bool) (resolved, bool, error) {
	if cons.kind == 1 {
		if !explicit {
			pid = 0
		}
		return resolved{pid: pid}, true, nil
	}
	g := t.findGroup(cons.id)
	if g == nil {
		return resolved{}, false, errGroupNF
	}
	m := g.memberOf(c.sess.clientID)
	if m == nil {
		return resolved{g: g}, false, errMemberNF
	}
	if explicit {
		for _, x := range m.parts {
			if x == pid {
				return resolved{pid: pid, g: g, m: m, revoking: m.isPending(pid)}, true, nil
			}
		}
		return resolved{g: g}, false, nil
	}
	parts := m.active()
	if len(parts) == 0 {
		return resolved{g: g}, false, nil
	}
	var i uint64
	if calc {
		i = m.index.Add(1) - 1
	} else {
		i = m.index.Load()
	}
	return resolved{pid: parts[i%uint64(len(parts))], g: g, m: m}, true, nil
}

// afterCommit completes r's revocation when the commit just made allowed it.
func (c *conn) afterCommit(t *topic, r resolved, ok bool) {
	if r.revoking && ok {
		c.s.completeAfterCommit(t, r.g, r.m.slot, r.m.id, r.pid)
	}
}

func (c *conn) pollMessages(p []byte) error {
	d := decoder{b: p}
	cons := d.consumer()
	sid, tid := d.ident(), d.ident()
	pid, explicit := d.optPartition()
	kind := d.u8()
	if d.st == 0 && (kind < 1 || kind > 5) {
		d.fail(StatusInvalidCommand)
	}
	value := d.u64()
	count := d.u32()
	autoCommit := d.u8() != 0
	if err := c.admit(&d); err != nil {
		return c.reply(nil, err)
	}
	s := c.s
	s.mu.RLock()
	st, t, err := s.resolveTopic(sid, tid)
	if err == nil {
		err = c.can(permPoll, st.id, t.id)
	}
	if err != nil {
		s.mu.RUnlock()
		return c.reply(nil, err)
	}
	r, ok, err := c.resolveConsumer(t, cons, pid, explicit, true)
	if err != nil || !ok {
		s.mu.RUnlock()
		if err != nil {
			return c.reply(nil, err)
		}
		return c.writePolled(0, 0, nil, 0, 0)
	}
	pid, g := r.pid, r.g
	if count == 0 {
		cur := uint64(0)
		if int(pid) < len(t.partitions) {
			pt := t.partitions[pid]
			pt.mu.Lock()
			cur = pt.currentOffset()
			pt.mu.Unlock()
		}
		s.mu.RUnlock()
		return c.writePolled(pid, cur, nil, 0, 0)
	}
	if int(pid) >= len(t.partitions) {
		s.mu.RUnlock()
		return c.reply(nil, errPartitionNF)
	}
	part := t.partitions[pid]
	part.mu.Lock()
	s.mu.RUnlock()
	if part.deleted {
		part.mu.Unlock()
		return c.reply(nil, errPartitionNF)
	}
	cur := part.currentOffset()
	var start uint64
	empty := false
	switch kind {
	case 1: // offset
		start = value
		empty = value > cur
	case 2: // timestamp
		start = part.firstAtOrAfterLocked(value)
	case 3: // first
		start = part.first
	case 4: // last
		req := uint64(count)
		if req > cur+1 {
			req = cur + 1
		}
		start = 1 + cur - req
	case 5: // next
		var stored uint64
		var has bool
		if g != nil {
			stored, has = part.groupOffsets[g.id]
		} else {
			stored, has = part.offsets[consumerKey(cons.id)]
		}
		if has {
			start = stored + 1
		} else {
			start = part.first
		}
	}
	if kind != 2 && start > cur {
		empty = true
	}
	var vec [][]byte
	var n uint32
	var size int
	var last uint64
	if !empty {
		var err error
		vec, n, size, last, err = part.readLocked(append(c.vec[:0], nil), start, count, s.cfg.limits.maxPollBytes)
		if err != nil {
			part.mu.Unlock()
			s.log.Error("iggytest: read from partition log failed", "partition", part.id, "err", err)
			return c.reply(nil, statusError(StatusError))
		}
	}
	complete := false
	if autoCommit && n > 0 {
		if err := c.storeOffsetLocked(part, cons, g, last); err != nil {
			part.mu.Unlock()
			return c.reply(nil, err)
		}
		// The server checks a pending revocation at the auto-commit, before
		// it records what this poll returned.
		complete = g != nil && revocableLocked(part, g.id)
	}
	if g != nil && n > 0 {
		part.lastPolled[g.id] = last
	}
	part.mu.Unlock()
	c.afterCommit(t, r, complete)
	return c.writePolled(pid, cur, vec, n, size)
}

// writePolled writes a PollMessages response: partition id, current offset,
// count, then the messages, with one vectored write. vec[0] is reserved for
// the header; vec[1:] are sub-slices of stored batches.
func (c *conn) writePolled(pid uint32, cur uint64, vec [][]byte, n uint32, size int) error {
	h := c.wbuf[:8]
	binary.LittleEndian.PutUint32(h[0:], 0)
	binary.LittleEndian.PutUint32(h[4:], uint32(16+size))
	h = binary.LittleEndian.AppendUint32(h, pid)
	h = binary.LittleEndian.AppendUint64(h, cur)
	h = binary.LittleEndian.AppendUint32(h, n)
	c.wbuf = h[:8]
	if len(vec) <= 1 {
		_, err := c.nc.Write(h)
		return err
	}
	vec[0] = h
	nb := net.Buffers(vec)
	_, err := nb.WriteTo(c.nc)
	clear(vec)
	c.vec = vec[:0]
	return err
}

func (c *conn) storeOffsetLocked(part *partition, cons consumerRef, g *group, off uint64) error {
	// Logged first: an offset that could not be written is not taken.
	if g != nil {
		if part.disk != nil {
			if err := part.disk.logOffset(offSetGroup, uint64(g.id), off); err != nil {
				return err
			}
		}
		part.groupOffsets[g.id] = off
		return nil
	}
	key := consumerKey(cons.id)
	if part.disk != nil {
		if err := part.disk.logOffset(offSetConsumer, key, off); err != nil {
			return err
		}
	}
	part.offsets[key] = off
	return nil
}

// lockOffsetPartition resolves the topic, the consumer and the partition an
// offset request (store, delete) works on, and returns that partition locked
// for the caller to unlock; s.mu is held only while resolving.
func (c *conn) lockOffsetPartition(cons consumerRef, sid, tid ident, pid uint32, explicit bool) (*partition, *topic, resolved, error) {
	s := c.s
	s.mu.RLock()
	st, t, err := s.resolveTopic(sid, tid)
	if err == nil {
		err = c.can(permPoll, st.id, t.id)
	}
	if err != nil {
		s.mu.RUnlock()
		return nil, nil, resolved{}, err
	}
	r, ok, err := c.resolveConsumer(t, cons, pid, explicit, false)
	if err != nil || !ok {
		s.mu.RUnlock()
		if err != nil {
			return nil, nil, resolved{}, err
		}
		return nil, nil, resolved{}, statusError(StatusNotResolvedConsumer)
	}
	if int(r.pid) >= len(t.partitions) {
		s.mu.RUnlock()
		return nil, nil, resolved{}, errPartitionNF
	}
	part := t.partitions[r.pid]
	part.mu.Lock()
	s.mu.RUnlock()
	return part, t, r, nil
}

func (c *conn) storeOffset(p []byte) ([]byte, error) {
	d := decoder{b: p}
	cons := d.consumer()
	sid, tid := d.ident(), d.ident()
	pid, explicit := d.optPartition()
	off := d.u64()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	part, t, r, err := c.lockOffsetPartition(cons, sid, tid, pid, explicit)
	if err != nil {
		return nil, err
	}
	complete, err := c.storeCheckedLocked(part, cons, r.g, off)
	part.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c.afterCommit(t, r, complete)
	return c.ok(), nil
}

// storeCheckedLocked validates and stores a consumer offset, and reports
// whether a pending revocation of the partition may complete after it.
func (c *conn) storeCheckedLocked(part *partition, cons consumerRef, g *group, off uint64) (bool, error) {
	if part.deleted {
		return false, errPartitionNF
	}
	if part.next == 0 || off > part.currentOffset() {
		return false, statusError(StatusInvalidOffset)
	}
	if err := c.storeOffsetLocked(part, cons, g, off); err != nil {
		return false, err
	}
	return g != nil && revocableLocked(part, g.id), nil
}

func (c *conn) getOffset(p []byte) ([]byte, error) {
	d := decoder{b: p}
	cons := d.consumer()
	sid, tid := d.ident(), d.ident()
	pid, explicit := d.optPartition()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	if !explicit {
		pid = 0
	}
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, t, err := s.resolveTopic(sid, tid)
	if err != nil {
		return c.ok(), nil
	}
	if err := c.can(permPoll, st.id, t.id); err != nil {
		return nil, err
	}
	var g *group
	if cons.kind == 2 {
		if g = t.findGroup(cons.id); g == nil {
			return c.ok(), nil
		}
	}
	if int(pid) >= len(t.partitions) {
		return c.ok(), nil
	}
	part := t.partitions[pid]
	part.mu.Lock()
	defer part.mu.Unlock()
	var stored uint64
	var has bool
	if g != nil {
		stored, has = part.groupOffsets[g.id]
	} else {
		stored, has = part.offsets[consumerKey(cons.id)]
	}
	if !has {
		return c.ok(), nil
	}
	return c.ok().u32(pid).u64(part.currentOffset()).u64(stored), nil
}

func (c *conn) deleteOffset(p []byte) ([]byte, error) {
	d := decoder{b: p}
	cons := d.consumer()
	sid, tid := d.ident(), d.ident()
	pid, explicit := d.optPartition()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	part, _, r, err := c.lockOffsetPartition(cons, sid, tid, pid, explicit)
	if err != nil {
		return nil, err
	}
	defer part.mu.Unlock()
	if g := r.g; g != nil {
		if _, has := part.groupOffsets[g.id]; !has {
			return nil, statusError(StatusConsumerOffsetNotFound)
		}
		delete(part.groupOffsets, g.id)
		if part.disk != nil {
			if err := part.disk.logOffset(offDelGroup, uint64(g.id), 0); err != nil {
				return nil, err
			}
		}
		return c.ok(), nil
	}
	key := consumerKey(cons.id)
	if _, has := part.offsets[key]; !has {
		return nil, statusError(StatusConsumerOffsetNotFound)
	}
	delete(part.offsets, key)
	if part.disk != nil {
		if err := part.disk.logOffset(offDelConsumer, key, 0); err != nil {
			return nil, err
		}
	}
	return c.ok(), nil
}
