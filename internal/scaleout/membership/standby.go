package membership

import (
	"slices"

	"github.com/strand-io/strand/stream/connector"
)

// Standbys returns, for each partition 0..partitions-1, the members that
// keep a warm copy of it (docs/design.md §15, "Standbys"): at most n,
// never its owner, in promotion order. The first is the member the group
// grants the partition to if its owner dies now and nothing else changes;
// the second is the one it goes to if that member dies too, and so on. So
// a failover promotes a standby: the new owner has the partition's rows
// already and restores only the tail of its changelog.
//
// It is a pure function of the group's state as members reports it (join
// order, what each owns), so every member computes the same standbys. A
// partition nobody owns has none. When the group's state at a death
// differs from the one the standbys were computed from (a revocation under
// way, two members dying together), the partition may go elsewhere: that
// owner restores it as without standbys (slower, never wrong).
func Standbys(members []connector.Member, partitions uint32, n int) [][]MemberID {
	out := make([][]MemberID, partitions)
	if n <= 0 || partitions == 0 || len(members) < 2 {
		return out
	}
	base := fromMembers(members, partitions)
	// succ[set of the dead] = the state after they died; one simulation
	// per distinct owner (and chain), not per partition.
	type key struct {
		dead string
	}
	cache := map[key]*State{}
	var after func(dead []MemberID) *State
	after = func(dead []MemberID) *State {
		k := key{dead: idsKey(dead)}
		if s := cache[k]; s != nil {
			return s
		}
		// One death at a time, as the group applies them.
		var s *State
		if len(dead) == 1 {
			s = base.clone()
		} else {
			s = after(dead[:len(dead)-1]).clone()
		}
		s.remove(dead[len(dead)-1])
		s.rebalance(0)
		cache[k] = s
		return s
	}
	for p := range partitions {
		owner := base.Parts[p].Owner
		if owner == 0 {
			continue
		}
		dead := []MemberID{owner}
		for len(out[p]) < n && len(dead) < len(base.IDs) {
			s := after(dead)
			next := s.Parts[p].Owner
			if next == 0 || slices.Contains(dead, next) {
				break
			}
			out[p] = append(out[p], next)
			dead = append(dead, next)
		}
	}
	return out
}

// StandbyOf returns the partitions member id keeps a standby copy of,
// in partition order (from Standbys).
func StandbyOf(standbys [][]MemberID, id MemberID) []uint32 {
	var out []uint32
	for p, ms := range standbys {
		if slices.Contains(ms, id) {
			out = append(out, uint32(p))
		}
	}
	return out
}

// fromMembers builds the part of a State rebalance needs from what a
// member reports of its group.
func fromMembers(members []connector.Member, partitions uint32) *State {
	s := &State{Partitions: partitions, Members: map[MemberID]*Member{}, Parts: make([]Partition, partitions)}
	for _, m := range members {
		if m.ID == 0 || s.Members[m.ID] != nil {
			continue
		}
		s.Members[m.ID] = &Member{ID: m.ID, Name: m.Name, Addr: m.Addr}
		s.IDs = append(s.IDs, m.ID)
		for _, po := range m.Partitions {
			if po.Partition < partitions {
				s.Parts[po.Partition] = Partition{Owner: m.ID, Epoch: po.Epoch, Revoking: po.Revoking}
			}
		}
	}
	slices.Sort(s.IDs) // join order
	return s
}

func (s *State) clone() *State {
	c := &State{Partitions: s.Partitions, Now: s.Now, Members: make(map[MemberID]*Member, len(s.Members)),
		IDs: slices.Clone(s.IDs), Parts: slices.Clone(s.Parts)}
	for id, m := range s.Members {
		mc := *m
		c.Members[id] = &mc
	}
	return c
}

func idsKey(ids []MemberID) string {
	b := make([]byte, 0, 8*len(ids))
	for _, id := range ids {
		for i := range 8 {
			b = append(b, byte(uint64(id)>>(8*i)))
		}
	}
	return string(b)
}
