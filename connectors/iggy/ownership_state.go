package iggy

import (
	"encoding/json"
	"slices"
)

// The membership log's state machine. Every instance applies the same
// records in the same order, so every instance computes the same owners at
// every offset; nothing here does I/O or reads a clock: time is the
// broker's timestamps of the records. See docs/design.md, "Ownership".

// recordVersion is the version of the membership records this package
// writes. Records of another version, or that do not decode, are skipped
// by every reader alike.
const recordVersion = 1

// Kinds of membership records.
const (
	kindJoin    = "join"
	kindBeat    = "beat"
	kindRelease = "release"
	kindLeave   = "leave"
)

// record is one message of the membership log (JSON).
type record struct {
	V    int      `json:"v"`
	Kind string   `json:"k"`
	M    MemberID `json:"m,omitempty"` // the writer (all but join)
	Seq  uint64   `json:"s,omitempty"` // the writer's sequence number of its records

	// join
	Nonce    string   `json:"n,omitempty"`
	Name     string   `json:"name,omitempty"`
	Addr     string   `json:"addr,omitempty"`
	Timeout  uint64   `json:"to,omitempty"`    // µs of silence after which the member is dead
	Parts    uint32   `json:"parts,omitempty"` // partitions the member expects the group to have
	Replaces MemberID `json:"rep,omitempty"`   // an earlier incarnation that leaves at this join

	// release
	P *uint32 `json:"p,omitempty"`
	E Epoch   `json:"e,omitempty"`
}

func (r *record) encode() []byte {
	r.V = recordVersion
	b, _ := json.Marshal(r) // plain fields: cannot fail
	return b
}

func decodeRecord(b []byte) (record, bool) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.V != recordVersion {
		return record{}, false
	}
	return r, true
}

type memberState struct {
	id       MemberID
	nonce    string
	name     string
	addr     string
	timeout  uint64 // µs
	lastTs   uint64 // broker µs of its last record
	joinedAt uint64
	lastSeq  uint64
}

type partState struct {
	owner    MemberID // 0: nobody
	epoch    Epoch    // of the current (or last) grant
	revoking bool     // the owner is asked to release it
	since    uint64   // broker µs the revocation began
}

// groupState is the group as of some offset of the membership log.
type groupState struct {
	partitions uint32 // fixed by the first join into an empty group
	now        uint64 // largest broker timestamp seen
	members    map[MemberID]*memberState
	ids        []MemberID // members in id (join) order
	parts      []partState
}

func newGroupState() *groupState {
	return &groupState{members: map[MemberID]*memberState{}}
}

// outcome is what applying one record did that its writer may care about.
type outcome struct {
	joined   MemberID // a join was accepted: the new member
	rejected bool     // a join was refused (partition count mismatch)
	counted  bool     // the record came from a live member and refreshed it
}

// apply applies the record at offset off, stamped ts by the broker. An
// undecodable record still advances time.
func (s *groupState) apply(off, ts uint64, payload []byte) (record, outcome) {
	if ts > s.now {
		s.now = ts
	}
	s.expire()
	r, ok := decodeRecord(payload)
	var out outcome
	if ok {
		out = s.applyRecord(off, r)
	}
	s.rebalance(off)
	return r, out
}

// expire removes the members that are dead at s.now: silent for longer
// than their timeout, or holding a partition they were asked to release
// longer than that.
func (s *groupState) expire() {
	for _, id := range slices.Clone(s.ids) {
		m := s.members[id]
		dead := s.now-min(s.now, m.lastTs) > m.timeout
		for i := range s.parts {
			p := &s.parts[i]
			if p.owner == id && p.revoking && s.now-min(s.now, p.since) > m.timeout {
				dead = true
			}
		}
		if dead {
			s.remove(id)
		}
	}
}

func (s *groupState) applyRecord(off uint64, r record) outcome {
	if r.Kind == kindJoin {
		return s.join(off, r)
	}
	m := s.members[r.M]
	if m == nil {
		return outcome{} // a dead or unknown member's record changes nothing
	}
	m.lastTs = s.now
	if r.Seq > m.lastSeq {
		m.lastSeq = r.Seq
	}
	switch r.Kind {
	case kindRelease:
		if r.P != nil && *r.P < uint32(len(s.parts)) {
			p := &s.parts[*r.P]
			if p.owner == m.id && p.epoch == r.E {
				p.owner, p.revoking, p.since = 0, false, 0
			}
		}
	case kindLeave:
		s.remove(m.id)
	}
	return outcome{counted: true}
}

func (s *groupState) join(off uint64, r record) outcome {
	if r.Nonce == "" || r.Parts == 0 || r.Timeout == 0 {
		return outcome{}
	}
	for _, m := range s.members {
		if m.nonce == r.Nonce {
			return outcome{} // a repeated join (a retried send)
		}
	}
	if r.Replaces != 0 && s.members[r.Replaces] != nil {
		s.remove(r.Replaces)
	}
	if len(s.members) == 0 {
		s.partitions = r.Parts
		s.parts = make([]partState, r.Parts)
	}
	if r.Parts != s.partitions {
		return outcome{rejected: true}
	}
	id := MemberID(off + 1)
	s.members[id] = &memberState{id: id, nonce: r.Nonce, name: r.Name, addr: r.Addr, timeout: r.Timeout,
		lastTs: s.now, joinedAt: s.now}
	s.ids = append(s.ids, id) // offsets only grow: ids stay sorted
	return outcome{joined: id, counted: true}
}

// remove forgets a member; its partitions have no owner until rebalance
// grants them again.
func (s *groupState) remove(id MemberID) {
	if s.members[id] == nil {
		return
	}
	delete(s.members, id)
	s.ids = slices.DeleteFunc(s.ids, func(x MemberID) bool { return x == id })
	for i := range s.parts {
		if p := &s.parts[i]; p.owner == id {
			p.owner, p.revoking, p.since = 0, false, 0
		}
	}
	if len(s.members) == 0 {
		s.partitions, s.parts = 0, nil
	}
}

// rebalance computes the balanced, sticky target of every partition and
// moves towards it: a partition without an owner is granted to its target
// at once, with the epoch of this record; a partition whose owner is not
// its target is marked for revocation (its owner must release it first);
// a revocation whose owner became the target again is withdrawn.
func (s *groupState) rebalance(off uint64) {
	n, m := len(s.parts), len(s.ids)
	if n == 0 || m == 0 {
		return
	}
	owned := map[MemberID]int{}
	for _, p := range s.parts {
		if p.owner != 0 {
			owned[p.owner]++
		}
	}
	// The members that own most get the n%m larger shares (older first),
	// so that a balanced group stays as it is.
	order := slices.Clone(s.ids)
	slices.SortStableFunc(order, func(a, b MemberID) int { return owned[b] - owned[a] })
	quota := map[MemberID]int{}
	for i, id := range order {
		quota[id] = n / m
		if i < n%m {
			quota[id]++
		}
	}
	target := make([]MemberID, n)
	have := map[MemberID]int{}
	for i, p := range s.parts {
		if p.owner != 0 && have[p.owner] < quota[p.owner] {
			target[i] = p.owner
			have[p.owner]++
		}
	}
	for i := range s.parts {
		if target[i] != 0 {
			continue
		}
		for _, id := range s.ids {
			if have[id] < quota[id] {
				target[i] = id
				have[id]++
				break
			}
		}
	}
	for i := range s.parts {
		p := &s.parts[i]
		switch {
		case p.owner == 0:
			p.owner, p.epoch, p.revoking, p.since = target[i], Epoch(off+1), false, 0
		case p.owner != target[i]:
			if !p.revoking {
				p.revoking, p.since = true, s.now
			}
		default:
			p.revoking, p.since = false, 0
		}
	}
}

// deadline returns the broker time (µs) by which member id is dead unless
// it writes again (and releases what it is asked to release).
func (s *groupState) deadline(id MemberID) (uint64, bool) {
	m := s.members[id]
	if m == nil {
		return 0, false
	}
	d := m.lastTs + m.timeout
	for _, p := range s.parts {
		if p.owner == id && p.revoking {
			d = min(d, p.since+m.timeout)
		}
	}
	return d, true
}
