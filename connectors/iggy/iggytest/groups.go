package iggytest

import (
	"sync/atomic"
	"time"
)

// Consumer groups follow server 0.8.0 (ConsumerGroupMeta and the shard's
// consumer-group handlers at tag server-0.8.0):
//
//   - A leave, a disconnect, a stale client and a change of the partition
//     count deal every partition round-robin over the members in slot
//     order again and drop every pending revocation (rebalanceFull).
//   - A join is cooperative (rebalanceCooperative): partitions nobody owns
//     go to idle members, then each idle member may be promised one
//     partition taken from the end of an over-assigned member's list. The
//     promise is a pending revocation: the old owner keeps the partition
//     (GetConsumerGroup lists it there, polls with an explicit partition
//     still serve it, rotating polls skip it) until the group has
//     committed an offset at or past the last offset polled from it (or
//     nothing was ever polled), checked at joins and at every offset store
//     of the old owner; after the rebalancing timeout it moves anyway.
//     Because each idle member gets at most one partition per join, joins
//     one after another leave the group unbalanced (4 partitions, 2
//     members: [0 1 2] and [3]), as on the server.

const (
	rebalancingTimeoutDefault = 30 * time.Second // server: consumer_group.rebalancing_timeout
	rebalancingCheckDefault   = 5 * time.Second  // server: consumer_group.rebalancing_check_interval
)

// WithRebalancing sets how long a partition may stay pending revocation
// after a join before it moves to its new member whether or not its old
// owner committed (timeout), and how often the broker looks for such
// partitions (every), as server 0.8.0's consumer_group.rebalancing_timeout
// and rebalancing_check_interval do (defaults 30s and 5s). Values ≤ 0 keep
// the defaults.
func WithRebalancing(timeout, every time.Duration) Option {
	return optionFunc(func(c *config) { c.rebalanceTimeout, c.rebalanceEvery = timeout, every })
}

type group struct {
	id      uint32
	name    string
	nparts  uint32
	members slab[member]
}

type member struct {
	id       uint32
	slot     uint32 // index in the group's members slab
	clientID uint32
	parts    []uint32
	index    atomic.Uint64 // rotation for polls without an explicit partition
	pending  []revocation
}

// revocation is a partition promised to another member (server:
// PendingRevocation).
type revocation struct {
	partition  uint32
	targetSlot uint32
	targetID   uint32
	createdAt  uint64 // µs
}

func (m *member) isPending(pid uint32) bool {
	for _, r := range m.pending {
		if r.partition == pid {
			return true
		}
	}
	return false
}

// active returns the member's partitions that are not pending revocation.
func (m *member) active() []uint32 {
	if len(m.pending) == 0 {
		return m.parts
	}
	var out []uint32
	for _, p := range m.parts {
		if !m.isPending(p) {
			out = append(out, p)
		}
	}
	return out
}

func (g *group) list() []*member {
	var ms []*member
	g.members.each(func(_ uint32, m *member) { ms = append(ms, m) })
	return ms
}

// rebalanceFull deals every partition round-robin over the members in slot
// order and drops every pending revocation (server: rebalance_members).
func (g *group) rebalanceFull() {
	ms := g.list()
	if len(ms) == 0 || g.nparts == 0 {
		return
	}
	for _, m := range ms {
		m.parts, m.pending = m.parts[:0], nil
	}
	for p := uint32(0); p < g.nparts; p++ {
		m := ms[int(p)%len(ms)]
		m.parts = append(m.parts, p)
	}
}

// rebalanceCooperative is server 0.8.0's rebalance_cooperative, step for
// step: unowned partitions go to idle members, then excess partitions of
// over-assigned members become pending revocations towards idle members
// that are not already promised one.
func (g *group) rebalanceCooperative(now uint64) {
	ms := g.list()
	if len(ms) == 0 || g.nparts == 0 {
		return
	}
	assigned := map[uint32]bool{}
	for _, m := range ms {
		for _, p := range m.parts {
			assigned[p] = true
		}
	}
	var unassigned []uint32
	for p := uint32(0); p < g.nparts; p++ {
		if !assigned[p] {
			unassigned = append(unassigned, p)
		}
	}
	if len(unassigned) > 0 {
		var idle []*member
		for _, m := range ms {
			if len(m.parts) == 0 {
				idle = append(idle, m)
			}
		}
		if len(idle) > 0 {
			for i, p := range unassigned {
				m := idle[i%len(idle)]
				m.parts = append(m.parts, p)
			}
		}
	}

	fair, remainder := int(g.nparts)/len(ms), int(g.nparts)%len(ms)
	targets := map[uint32]bool{}
	for _, m := range ms {
		for _, r := range m.pending {
			targets[r.targetSlot] = true
		}
	}
	var idle []*member
	for _, m := range ms {
		if len(m.parts) == 0 && !targets[m.slot] {
			idle = append(idle, m)
		}
	}
	withRemainder := remainder
	for _, m := range ms {
		if len(idle) == 0 {
			break
		}
		effective := len(m.active())
		maxAllowed := fair
		if withRemainder > 0 {
			maxAllowed = fair + 1
		}
		if effective <= maxAllowed {
			if effective > fair && withRemainder > 0 {
				withRemainder--
			}
			continue
		}
		excess := effective - maxAllowed
		if withRemainder > 0 && effective > fair {
			withRemainder--
		}
		var revocable []uint32
		for i := len(m.parts) - 1; i >= 0; i-- {
			if !m.isPending(m.parts[i]) {
				revocable = append(revocable, m.parts[i])
			}
		}
		for _, p := range revocable[:min(excess, len(revocable))] {
			if len(idle) == 0 {
				break
			}
			t := idle[0]
			idle = idle[1:]
			m.pending = append(m.pending, revocation{partition: p, targetSlot: t.slot, targetID: t.id, createdAt: now})
		}
	}
}

// completeRevocation moves a pending partition from the member in slot to
// its target (server: complete_revocation); a target that is gone or whose
// slot was reused makes a full rebalance. It reports whether anything
// changed.
func (g *group) completeRevocation(slot, memberID, pid uint32) bool {
	m := g.members.get(slot)
	if m == nil || m.id != memberID {
		return false
	}
	i := -1
	for k, r := range m.pending {
		if r.partition == pid {
			i = k
			break
		}
	}
	if i < 0 {
		return false
	}
	r := m.pending[i]
	m.pending = append(m.pending[:i], m.pending[i+1:]...)
	parts := m.parts[:0]
	for _, p := range m.parts {
		if p != pid {
			parts = append(parts, p)
		}
	}
	m.parts = parts
	t := g.members.get(r.targetSlot)
	if t == nil || t.id != r.targetID {
		g.rebalanceFull()
		return true
	}
	t.parts = append(t.parts, pid)
	return true
}

// revocable reports whether a pending revocation of part may complete now:
// the group never polled it, or has committed at or past what it polled
// (server: find_completable_revocations). The caller holds part.mu.
func revocableLocked(part *partition, gid uint32) bool {
	polled, has := part.lastPolled[gid]
	if !has {
		return true
	}
	committed, ok := part.groupOffsets[gid]
	return ok && committed >= polled
}

// completeRevocationsLocked completes every pending revocation of g that
// may complete (at a join). The caller holds s.mu.
func completeRevocationsLocked(t *topic, g *group) {
	type done struct{ slot, id, pid uint32 }
	var found []done
	for _, m := range g.list() {
		for _, r := range m.pending {
			if int(r.partition) >= len(t.partitions) {
				continue
			}
			part := t.partitions[r.partition]
			part.mu.Lock()
			ok := revocableLocked(part, g.id)
			part.mu.Unlock()
			if ok {
				found = append(found, done{m.slot, m.id, r.partition})
			}
		}
	}
	for _, d := range found {
		g.completeRevocation(d.slot, d.id, d.pid)
	}
}

// completeAfterCommit completes the revocation of pid from member m of g
// once its offset commit allowed it (server:
// maybe_complete_pending_revocation). It takes s.mu.
func (s *Server) completeAfterCommit(t *topic, g *group, slot, memberID, pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.groups.get(g.id) != g {
		return
	}
	g.completeRevocation(slot, memberID, pid)
}

func (s *Server) rebalanceLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.rebalanceEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
			s.forceTimedOutRevocations(nowMicros())
		}
	}
}

// forceTimedOutRevocations completes every revocation pending for longer
// than the rebalancing timeout (server: check_revocation_timeouts).
func (s *Server) forceTimedOutRevocations(now uint64) {
	limit := uint64(s.cfg.rebalanceTimeout.Microseconds())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams.each(func(_ uint32, st *stream) {
		st.topics.each(func(_ uint32, t *topic) {
			t.groups.each(func(_ uint32, g *group) {
				type due struct{ slot, id, pid uint32 }
				var late []due
				for _, m := range g.list() {
					for _, r := range m.pending {
						if now >= r.createdAt && now-r.createdAt >= limit {
							late = append(late, due{m.slot, m.id, r.partition})
						}
					}
				}
				for _, d := range late {
					s.log.Warn("iggytest: force-completing a timed out partition revocation",
						"stream", st.name, "topic", t.name, "group", g.name, "partition", d.pid)
					g.completeRevocation(d.slot, d.id, d.pid)
				}
			})
		})
	})
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

// forgetPolled drops the group's last polled offsets of the given
// partitions (all of them when pids is nil), as the server does on a leave
// (the leaver's partitions) and on a change of the partition count.
func forgetPolled(t *topic, gid uint32, pids []uint32) {
	clearOne := func(p *partition) {
		p.mu.Lock()
		delete(p.lastPolled, gid)
		p.mu.Unlock()
	}
	if pids == nil {
		for _, p := range t.partitions {
			clearOne(p)
		}
		return
	}
	for _, pid := range pids {
		if int(pid) < len(t.partitions) {
			clearOne(t.partitions[pid])
		}
	}
}
