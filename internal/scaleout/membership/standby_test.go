package membership

import (
	"fmt"
	"slices"
	"testing"

	"github.com/strand-io/strand/stream/connector"
	"pgregory.net/rapid"
)

// view is what a member reports of its group (connector.Membership.Members).
func view(s *State) []connector.Member {
	var out []connector.Member
	for _, id := range s.IDs {
		m := connector.Member{ID: id, Name: s.Members[id].Name}
		for p, pt := range s.Parts {
			if pt.Owner == id {
				m.Partitions = append(m.Partitions, connector.PartitionOwnership{Partition: uint32(p), Epoch: pt.Epoch, Revoking: pt.Revoking})
			}
		}
		out = append(out, m)
	}
	// Members may come in any order.
	slices.Reverse(out)
	return out
}

func TestStandbysSpreadAndNeverOnTheOwner(t *testing.T) {
	b := &logBuilder{s: NewState()}
	var ids []MemberID
	for _, n := range []string{"a", "b", "c"} {
		ids = append(ids, b.add(10, join(n, 6)).Joined)
	}
	// b and c own nothing until a releases: release what is revoked.
	for p := range b.s.Parts {
		if pt := b.s.Parts[p]; pt.Revoking {
			pp := uint32(p)
			b.add(10, Record{Kind: KindHandBack, M: pt.Owner, P: &pp, E: pt.Epoch})
		}
	}
	if got := fmt.Sprint(owners(b.s)); got != fmt.Sprintf("[%d %d %d %d %d %d]", ids[0], ids[0], ids[1], ids[1], ids[2], ids[2]) {
		t.Fatalf("owners %s", got)
	}
	sb := Standbys(view(b.s), 6, 1)
	per := map[MemberID]int{}
	for p, ms := range sb {
		if len(ms) != 1 || ms[0] == b.s.Parts[p].Owner {
			t.Fatalf("partition %d (owner %d): standbys %v", p, b.s.Parts[p].Owner, ms)
		}
		per[ms[0]]++
	}
	for _, id := range ids {
		if per[id] != 2 {
			t.Fatalf("standbys are not spread: %v (%v)", per, sb)
		}
	}
	sb2 := Standbys(view(b.s), 6, 5) // more than the other members: two each
	for p, ms := range sb2 {
		if len(ms) != 2 || slices.Contains(ms, b.s.Parts[p].Owner) || ms[0] == ms[1] || ms[0] != sb[p][0] {
			t.Fatalf("partition %d: %v", p, ms)
		}
	}
	if got := StandbyOf(sb, ids[0]); len(got) != 2 {
		t.Fatalf("StandbyOf(%d) = %v", ids[0], got)
	}
	if sb := Standbys(view(b.s), 6, 0); sb[0] != nil {
		t.Fatalf("standbys with n=0: %v", sb)
	}
	one := &logBuilder{s: NewState()}
	one.add(1, join("solo", 3))
	if sb := Standbys(view(one.s), 3, 2); sb[0] != nil {
		t.Fatalf("a lone member has standbys: %v", sb)
	}
}

// TestStandbysArePromoted: in a random group, the member that gets a
// partition when its owner leaves is the partition's first standby, and
// the next standby is the one that gets it when that one leaves too.
func TestStandbysArePromoted(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.Uint32Range(1, 9).Draw(rt, "partitions")
		b := &logBuilder{s: NewState()}
		const ts = 100 // one instant: nobody expires
		for step := 0; step < 40; step++ {
			switch k := rapid.IntRange(0, 3).Draw(rt, "kind"); {
			case k == 0 || len(b.s.IDs) < 2:
				b.add(ts, join(fmt.Sprint(step), n))
			case k == 1 && len(b.s.IDs) > 2:
				b.add(ts, Record{Kind: KindLeave, M: b.s.IDs[rapid.IntRange(0, len(b.s.IDs)-1).Draw(rt, "leaver")]})
			default:
				p := rapid.Uint32Range(0, n-1).Draw(rt, "p")
				if pt := b.s.Parts[p]; pt.Revoking || rapid.Bool().Draw(rt, "release anyway") {
					b.add(ts, Record{Kind: KindHandBack, M: pt.Owner, P: &p, E: pt.Epoch})
				}
			}
		}
		k := rapid.IntRange(1, 3).Draw(rt, "standbys")
		sb := Standbys(view(b.s), n, k)
		for p, ms := range sb {
			owner := b.s.Parts[p].Owner
			if len(ms) > k || len(ms) > len(b.s.IDs)-1 || slices.Contains(ms, owner) {
				rt.Fatalf("partition %d (owner %d): standbys %v", p, owner, ms)
			}
			seen := map[MemberID]bool{}
			for _, m := range ms {
				if seen[m] || b.s.Members[m] == nil {
					rt.Fatalf("partition %d: standbys %v", p, ms)
				}
				seen[m] = true
			}
		}
		// The owner of a random partition leaves, then its standbys one
		// by one: each time the partition goes to the next standby.
		p := rapid.Uint32Range(0, n-1).Draw(rt, "failed partition")
		c := &logBuilder{s: b.s.clone(), off: b.off}
		dead := b.s.Parts[p].Owner
		for _, want := range sb[p] {
			c.add(ts, Record{Kind: KindLeave, M: dead})
			if got := c.s.Parts[p].Owner; got != want {
				rt.Fatalf("partition %d went to %d when %d left, its standby is %d (standbys %v)", p, got, dead, want, sb[p])
			}
			dead = want
		}
	})
}
