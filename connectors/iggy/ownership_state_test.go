package iggy

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// logBuilder appends records to a groupState as the broker would: each at
// the next offset, stamped with a timestamp.
type logBuilder struct {
	s   *groupState
	off uint64
}

func (b *logBuilder) add(ts uint64, r record) outcome {
	_, out := b.s.apply(b.off, ts, r.encode())
	b.off++
	return out
}

func join(nonce string, parts uint32) record {
	return record{Kind: kindJoin, Nonce: nonce, Name: nonce, Timeout: 1000, Parts: parts}
}

func owners(s *groupState) []MemberID {
	out := make([]MemberID, len(s.parts))
	for i, p := range s.parts {
		out[i] = p.owner
	}
	return out
}

func TestGroupStateGrantsRevokesAndExpires(t *testing.T) {
	b := &logBuilder{s: newGroupState()}
	a := b.add(10, join("a", 4)).joined
	if a != 1 || fmt.Sprint(owners(b.s)) != "[1 1 1 1]" || b.s.parts[3].epoch != 1 {
		t.Fatalf("first join: member %d, owners %v", a, owners(b.s))
	}
	bb := b.add(20, join("b", 4)).joined
	// b owns nothing yet: a must release two partitions first.
	if fmt.Sprint(owners(b.s)) != "[1 1 1 1]" || !b.s.parts[2].revoking || !b.s.parts[3].revoking || b.s.parts[0].revoking {
		t.Fatalf("after b joined: %+v", b.s.parts)
	}
	if out := b.add(30, join("b", 4)); out.joined != 0 || out.rejected {
		t.Fatalf("a repeated join was applied: %+v", out)
	}
	if out := b.add(35, join("c", 5)); !out.rejected {
		t.Fatal("a join with another partition count was accepted")
	}
	p2 := uint32(2)
	b.add(40, record{Kind: kindRelease, M: a, P: &p2, E: 99}) // wrong epoch: ignored
	if b.s.parts[2].owner != a {
		t.Fatal("a release with a wrong epoch was applied")
	}
	b.add(50, record{Kind: kindRelease, M: a, P: &p2, E: 1})
	if b.s.parts[2].owner != bb || b.s.parts[2].epoch != Epoch(b.off) {
		t.Fatalf("released partition: %+v (record at %d)", b.s.parts[2], b.off-1)
	}
	b.s.apply(b.off, 60, []byte("not json")) // garbage advances time only
	b.off++
	// a has not released partition 3 within its timeout (1000µs from 20):
	// at 1021 it is dead and b gets everything.
	b.add(1020, record{Kind: kindBeat, M: bb})
	if b.s.members[a] == nil {
		t.Fatal("a died exactly at its revocation deadline")
	}
	b.add(1021, record{Kind: kindBeat, M: bb})
	if b.s.members[a] != nil || fmt.Sprint(owners(b.s)) != fmt.Sprintf("[%d %d %d %d]", bb, bb, bb, bb) {
		t.Fatalf("a kept a revoked partition past its timeout: owners %v", owners(b.s))
	}
	// b stays silent: dead after its own timeout; the group is empty and
	// forgets its partition count.
	b.add(2022, record{Kind: kindBeat, M: bb})
	if len(b.s.members) != 0 || b.s.partitions != 0 {
		t.Fatalf("silent member survived: %+v", b.s.members)
	}
	if out := b.add(2030, join("d", 6)); out.joined == 0 || len(b.s.parts) != 6 {
		t.Fatal("a new group with another partition count was refused")
	}
}

func TestGroupStateRebalanceIsStickyAndEven(t *testing.T) {
	b := &logBuilder{s: newGroupState()}
	ids := []MemberID{b.add(1, join("a", 8)).joined, b.add(2, join("b", 8)).joined}
	settle := func() {
		for ts := uint64(3); ; ts++ {
			moved := false
			for i := range b.s.parts {
				if p := b.s.parts[i]; p.revoking {
					pi := uint32(i)
					b.add(ts, record{Kind: kindRelease, M: p.owner, P: &pi, E: p.epoch})
					moved = true
					break
				}
			}
			if !moved {
				return
			}
		}
	}
	settle()
	before := owners(b.s)
	ids = append(ids, b.add(10, join("c", 8)).joined)
	settle()
	after := owners(b.s)
	count := map[MemberID]int{}
	for i, o := range after {
		count[o]++
		if o != ids[2] && o != before[i] {
			t.Fatalf("partition %d moved between old members: %v → %v", i, before, after)
		}
	}
	for _, id := range ids {
		if count[id] < 2 || count[id] > 3 {
			t.Fatalf("uneven: %v", after)
		}
	}
}

// TestGroupStateInvariants applies random records and checks what every
// reader relies on: owners are live members, a partition changes hands
// only at its owner's release, leave, replacement or death, and each grant
// carries the record's position as a strictly larger epoch.
func TestGroupStateInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.Uint32Range(1, 9).Draw(rt, "partitions")
		b := &logBuilder{s: newGroupState()}
		ts := uint64(0)
		var nonces []string
		for step := 0; step < 80; step++ {
			ts += rapid.Uint64Range(0, 600).Draw(rt, "dt")
			prev := append([]partState(nil), b.s.parts...)
			prevMembers := map[MemberID]bool{}
			for id := range b.s.members {
				prevMembers[id] = true
			}
			var r record
			var from MemberID
			switch k := rapid.IntRange(0, 4).Draw(rt, "kind"); {
			case k == 0 || len(b.s.ids) == 0:
				nonce := fmt.Sprint(step)
				nonces = append(nonces, nonce)
				r = join(nonce, n)
				if len(b.s.ids) > 0 && rapid.Bool().Draw(rt, "replace") {
					r.Replaces = b.s.ids[rapid.IntRange(0, len(b.s.ids)-1).Draw(rt, "replaced")]
				}
			case k == 1:
				from = b.s.ids[rapid.IntRange(0, len(b.s.ids)-1).Draw(rt, "leaver")]
				r = record{Kind: kindLeave, M: from}
			case k == 2:
				from = b.s.ids[rapid.IntRange(0, len(b.s.ids)-1).Draw(rt, "releaser")]
				p := rapid.Uint32Range(0, n-1).Draw(rt, "p")
				r = record{Kind: kindRelease, M: from, P: &p, E: b.s.parts[p].epoch}
			default:
				from = b.s.ids[rapid.IntRange(0, len(b.s.ids)-1).Draw(rt, "beater")]
				r = record{Kind: kindBeat, M: from}
			}
			off := b.off
			b.add(ts, r)
			for i, p := range b.s.parts {
				if len(b.s.ids) > 0 && (p.owner == 0 || b.s.members[p.owner] == nil) {
					rt.Fatalf("partition %d owned by %d, not a live member", i, p.owner)
				}
				if i >= len(prev) || p.owner == prev[i].owner {
					continue
				}
				old := prev[i].owner
				okMove := old == 0 || b.s.members[old] == nil ||
					(r.Kind == kindRelease && r.M == old && *r.P == uint32(i))
				if !okMove {
					rt.Fatalf("partition %d moved from live member %d to %d at %+v", i, old, p.owner, r)
				}
				if p.epoch != Epoch(off+1) || p.epoch <= prev[i].epoch {
					rt.Fatalf("partition %d granted with epoch %d at offset %d (before %d)", i, p.epoch, off, prev[i].epoch)
				}
			}
		}
	})
}

// BenchmarkGroupStateApply measures what a joining member pays per record
// of history it replays (decode and apply one heartbeat, 3 members, 8
// partitions).
func BenchmarkGroupStateApply(b *testing.B) {
	lb := &logBuilder{s: newGroupState()}
	var ids []MemberID
	for i := range 3 {
		r := join(fmt.Sprint(i), 8)
		r.Timeout = 1 << 40
		ids = append(ids, lb.add(uint64(i+1), r).joined)
	}
	beats := make([][]byte, len(ids))
	for i, id := range ids {
		r := record{Kind: kindBeat, M: id, Seq: 12345}
		beats[i] = r.encode()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lb.s.apply(lb.off, uint64(10+i), beats[i%len(beats)])
		lb.off++
	}
}
