// Package membership is the state machine of a group's membership log
// (docs/design.md §12): every instance applies the same records in the
// same order, so every instance computes the same owners at every offset.
// Nothing here does I/O or reads a clock: time is the broker's timestamps
// of the records. connectors/iggy keeps the log on an Iggy topic and does
// the I/O (reading, appending, leases); the rules live here.
package membership

import (
	"encoding/json"
	"slices"

	"github.com/strand-io/strand/stream/connector"
)

// MemberID is connector.MemberID: the position (offset + 1) of a member's
// join record in the log.
type MemberID = connector.MemberID

// Epoch is connector.Epoch: the position (offset + 1) of the record at
// which a grant took effect.
type Epoch = connector.Epoch

// RecordVersion is the version of the membership records this package
// writes. Records of another version, or that do not decode, are skipped
// by every reader alike.
const RecordVersion = 1

// Kinds of membership records.
const (
	KindJoin     = "join"
	KindBeat     = "beat"
	KindHandBack = "release" // a member hands a partition back (wire value kept)
	KindLeave    = "leave"
	// KindSnapshot holds the whole State as of offset At (every record
	// before At applied): a joining member loads it instead of replaying
	// the log from its start. It changes nothing but time.
	KindSnapshot = "snap"
)

// Record is one message of the membership log (JSON).
type Record struct {
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
	// Instance is the instance's stable id (static membership, Kafka's
	// KIP-345): the join takes over the partitions of a live member with
	// the same Instance, under new epochs, at once.
	Instance string `json:"inst,omitempty"`

	// release
	P *uint32 `json:"p,omitempty"`
	E Epoch   `json:"e,omitempty"`

	// snapshot
	At    uint64 `json:"at,omitempty"`
	State *State `json:"st,omitempty"`
}

// Encode returns the record's JSON, stamped with RecordVersion.
func (r *Record) Encode() []byte {
	r.V = RecordVersion
	b, _ := json.Marshal(r) // plain fields: cannot fail
	return b
}

// DecodeRecord decodes a record; false if it does not decode or is of
// another version (every reader skips it alike).
func DecodeRecord(b []byte) (Record, bool) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil || r.V != RecordVersion {
		return Record{}, false
	}
	return r, true
}

// Member is a live member of the group.
type Member struct {
	ID       MemberID
	Instance string `json:",omitempty"`
	Nonce    string
	Name     string
	Addr     string
	Timeout  uint64 // µs
	LastTs   uint64 // broker µs of its last record
	JoinedAt uint64
	LastSeq  uint64
}

// Partition is one partition's grant.
type Partition struct {
	Owner    MemberID // 0: nobody
	Epoch    Epoch    // of the current (or last) grant
	Revoking bool     // the owner is asked to release it
	Since    uint64   // broker µs the revocation began
}

// State is the group as of some offset of the membership log.
type State struct {
	Partitions uint32 // fixed by the first join into an empty group
	Now        uint64 // largest broker timestamp seen
	Members    map[MemberID]*Member
	IDs        []MemberID // members in id (join) order
	Parts      []Partition
}

// NewState returns the state of an empty log.
func NewState() *State {
	return &State{Members: map[MemberID]*Member{}}
}

// Outcome is what applying one Record did that its writer may care about.
type Outcome struct {
	Joined MemberID // a join was accepted: the new member
	// TookOver is the member a join of the same Instance replaced: it
	// lost its partitions to the new member (it is fenced for good).
	TookOver MemberID
	Rejected bool // a join was refused (partition count mismatch)
	Counted  bool // the Record came from a live member and refreshed it
}

// Apply applies the record at offset off, stamped ts by the broker. An
// undecodable Record still advances time.
func (s *State) Apply(off, ts uint64, payload []byte) (Record, Outcome) {
	if ts > s.Now {
		s.Now = ts
	}
	s.expire()
	r, ok := DecodeRecord(payload)
	var out Outcome
	if ok {
		out = s.applyRecord(off, r)
	}
	s.rebalance(off)
	return r, out
}

// expire removes the members that are dead at s.Now: silent for longer
// than their timeout, or holding a partition they were asked to release
// longer than that.
func (s *State) expire() {
	for _, id := range slices.Clone(s.IDs) {
		m := s.Members[id]
		dead := s.Now-min(s.Now, m.LastTs) > m.Timeout
		for i := range s.Parts {
			p := &s.Parts[i]
			if p.Owner == id && p.Revoking && s.Now-min(s.Now, p.Since) > m.Timeout {
				dead = true
			}
		}
		if dead {
			s.remove(id)
		}
	}
}

func (s *State) applyRecord(off uint64, r Record) Outcome {
	if r.Kind == KindJoin {
		return s.join(off, r)
	}
	if r.Kind == KindSnapshot {
		return Outcome{} // only time: applied with every record
	}
	m := s.Members[r.M]
	if m == nil {
		return Outcome{} // a dead or unknown member's Record changes nothing
	}
	m.LastTs = s.Now
	if r.Seq > m.LastSeq {
		m.LastSeq = r.Seq
	}
	switch r.Kind {
	case KindHandBack:
		if r.P != nil && *r.P < uint32(len(s.Parts)) {
			p := &s.Parts[*r.P]
			if p.Owner == m.ID && p.Epoch == r.E {
				p.Owner, p.Revoking, p.Since = 0, false, 0
			}
		}
	case KindLeave:
		s.remove(m.ID)
	}
	return Outcome{Counted: true}
}

func (s *State) join(off uint64, r Record) Outcome {
	if r.Nonce == "" || r.Parts == 0 || r.Timeout == 0 {
		return Outcome{}
	}
	for _, m := range s.Members {
		if m.Nonce == r.Nonce {
			return Outcome{} // a repeated join (a retried send)
		}
	}
	if r.Replaces != 0 && s.Members[r.Replaces] != nil {
		s.remove(r.Replaces)
	}
	if len(s.Members) == 0 {
		s.Partitions = r.Parts
		s.Parts = make([]Partition, r.Parts)
	}
	if r.Parts != s.Partitions {
		return Outcome{Rejected: true}
	}
	id := MemberID(off + 1)
	var prev MemberID
	if r.Instance != "" {
		for _, mid := range s.IDs {
			if s.Members[mid].Instance == r.Instance {
				prev = mid
			}
		}
	}
	s.Members[id] = &Member{ID: id, Instance: r.Instance, Nonce: r.Nonce, Name: r.Name, Addr: r.Addr, Timeout: r.Timeout,
		LastTs: s.Now, JoinedAt: s.Now}
	s.IDs = append(s.IDs, id) // offsets only grow: ids stay sorted
	if prev != 0 {
		// A restarted instance takes its previous incarnation's place:
		// its partitions are granted to the new member at this record,
		// with this record's epoch, without waiting for the session
		// timeout to declare the old one dead.
		for i := range s.Parts {
			if p := &s.Parts[i]; p.Owner == prev {
				p.Owner, p.Epoch, p.Revoking, p.Since = id, Epoch(off+1), false, 0
			}
		}
		delete(s.Members, prev)
		s.IDs = slices.DeleteFunc(s.IDs, func(x MemberID) bool { return x == prev })
	}
	return Outcome{Joined: id, TookOver: prev, Counted: true}
}

// Snapshot returns a record that holds a copy of s, taken after applying
// every record before offset at.
func (s *State) Snapshot(at uint64) Record {
	c := &State{Partitions: s.Partitions, Now: s.Now, Members: make(map[MemberID]*Member, len(s.Members)),
		IDs: slices.Clone(s.IDs), Parts: slices.Clone(s.Parts)}
	for id, m := range s.Members {
		mc := *m
		c.Members[id] = &mc
	}
	return Record{Kind: KindSnapshot, At: at, State: c}
}

// FromSnapshot returns the state a snapshot record holds and the offset
// of the first record to apply after it; false if r is not a valid
// snapshot (then read the log from its start).
func FromSnapshot(r Record) (*State, uint64, bool) {
	if r.Kind != KindSnapshot || r.State == nil || r.At == 0 {
		return nil, 0, false
	}
	s := r.State
	if s.Members == nil {
		s.Members = map[MemberID]*Member{}
	}
	if len(s.Members) != len(s.IDs) || uint32(len(s.Parts)) != s.Partitions {
		return nil, 0, false
	}
	for _, id := range s.IDs {
		if m := s.Members[id]; m == nil || m.ID != id {
			return nil, 0, false
		}
	}
	for _, p := range s.Parts {
		if p.Owner != 0 && s.Members[p.Owner] == nil {
			return nil, 0, false
		}
	}
	return s, r.At, true
}

// remove forgets a member; its partitions have no owner until rebalance
// grants them again.
func (s *State) remove(id MemberID) {
	if s.Members[id] == nil {
		return
	}
	delete(s.Members, id)
	s.IDs = slices.DeleteFunc(s.IDs, func(x MemberID) bool { return x == id })
	for i := range s.Parts {
		if p := &s.Parts[i]; p.Owner == id {
			p.Owner, p.Revoking, p.Since = 0, false, 0
		}
	}
	if len(s.Members) == 0 {
		s.Partitions, s.Parts = 0, nil
	}
}

// rebalance computes the balanced, sticky target of every partition and
// moves towards it: a partition without an owner is granted to its target
// at once, with the epoch of this record; a partition whose owner is not
// its target is marked for revocation (its owner must release it first);
// a revocation whose owner became the target again is withdrawn.
func (s *State) rebalance(off uint64) {
	n, m := len(s.Parts), len(s.IDs)
	if n == 0 || m == 0 {
		return
	}
	owned := map[MemberID]int{}
	for _, p := range s.Parts {
		if p.Owner != 0 {
			owned[p.Owner]++
		}
	}
	// The members that own most get the n%m larger shares (older first),
	// so that a balanced group stays as it is.
	order := slices.Clone(s.IDs)
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
	for i, p := range s.Parts {
		if p.Owner != 0 && have[p.Owner] < quota[p.Owner] {
			target[i] = p.Owner
			have[p.Owner]++
		}
	}
	for i := range s.Parts {
		if target[i] != 0 {
			continue
		}
		for _, id := range s.IDs {
			if have[id] < quota[id] {
				target[i] = id
				have[id]++
				break
			}
		}
	}
	for i := range s.Parts {
		p := &s.Parts[i]
		switch {
		case p.Owner == 0:
			p.Owner, p.Epoch, p.Revoking, p.Since = target[i], Epoch(off+1), false, 0
		case p.Owner != target[i]:
			if !p.Revoking {
				p.Revoking, p.Since = true, s.Now
			}
		default:
			p.Revoking, p.Since = false, 0
		}
	}
}

// Deadline returns the broker time (µs) by which member id is dead unless
// it writes again (and releases what it is asked to release).
func (s *State) Deadline(id MemberID) (uint64, bool) {
	m := s.Members[id]
	if m == nil {
		return 0, false
	}
	d := m.LastTs + m.Timeout
	for _, p := range s.Parts {
		if p.Owner == id && p.Revoking {
			d = min(d, p.Since+m.Timeout)
		}
	}
	return d, true
}
