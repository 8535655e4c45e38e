package membership

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// logBuilder appends records to a State as the broker would: each at
// the next offset, stamped with a timestamp.
type logBuilder struct {
	s   *State
	off uint64
}

func (b *logBuilder) add(ts uint64, r Record) Outcome {
	_, out := b.s.Apply(b.off, ts, r.Encode())
	b.off++
	return out
}

func join(nonce string, parts uint32) Record {
	return Record{Kind: KindJoin, Nonce: nonce, Name: nonce, Timeout: 1000, Parts: parts}
}

func owners(s *State) []MemberID {
	out := make([]MemberID, len(s.Parts))
	for i, p := range s.Parts {
		out[i] = p.Owner
	}
	return out
}

func TestGroupStateGrantsRevokesAndExpires(t *testing.T) {
	b := &logBuilder{s: NewState()}
	a := b.add(10, join("a", 4)).Joined
	if a != 1 || fmt.Sprint(owners(b.s)) != "[1 1 1 1]" || b.s.Parts[3].Epoch != 1 {
		t.Fatalf("first join: member %d, owners %v", a, owners(b.s))
	}
	bb := b.add(20, join("b", 4)).Joined
	// b owns nothing yet: a must release two partitions first.
	if fmt.Sprint(owners(b.s)) != "[1 1 1 1]" || !b.s.Parts[2].Revoking || !b.s.Parts[3].Revoking || b.s.Parts[0].Revoking {
		t.Fatalf("after b joined: %+v", b.s.Parts)
	}
	if out := b.add(30, join("b", 4)); out.Joined != 0 || out.Rejected {
		t.Fatalf("a repeated join was applied: %+v", out)
	}
	if out := b.add(35, join("c", 5)); !out.Rejected {
		t.Fatal("a join with another partition count was accepted")
	}
	p2 := uint32(2)
	b.add(40, Record{Kind: KindHandBack, M: a, P: &p2, E: 99}) // wrong epoch: ignored
	if b.s.Parts[2].Owner != a {
		t.Fatal("a release with a wrong epoch was applied")
	}
	b.add(50, Record{Kind: KindHandBack, M: a, P: &p2, E: 1})
	if b.s.Parts[2].Owner != bb || b.s.Parts[2].Epoch != Epoch(b.off) {
		t.Fatalf("released partition: %+v (Record at %d)", b.s.Parts[2], b.off-1)
	}
	b.s.Apply(b.off, 60, []byte("not json")) // garbage advances time only
	b.off++
	// a has not released partition 3 within its timeout (1000µs from 20):
	// at 1021 it is dead and b gets everything.
	b.add(1020, Record{Kind: KindBeat, M: bb})
	if b.s.Members[a] == nil {
		t.Fatal("a died exactly at its revocation deadline")
	}
	b.add(1021, Record{Kind: KindBeat, M: bb})
	if b.s.Members[a] != nil || fmt.Sprint(owners(b.s)) != fmt.Sprintf("[%d %d %d %d]", bb, bb, bb, bb) {
		t.Fatalf("a kept a revoked partition past its timeout: owners %v", owners(b.s))
	}
	// b stays silent: dead after its own timeout; the group is empty and
	// forgets its partition count.
	b.add(2022, Record{Kind: KindBeat, M: bb})
	if len(b.s.Members) != 0 || b.s.Partitions != 0 {
		t.Fatalf("silent member survived: %+v", b.s.Members)
	}
	if out := b.add(2030, join("d", 6)); out.Joined == 0 || len(b.s.Parts) != 6 {
		t.Fatal("a new group with another partition count was refused")
	}
}

func TestGroupStateRebalanceIsStickyAndEven(t *testing.T) {
	b := &logBuilder{s: NewState()}
	ids := []MemberID{b.add(1, join("a", 8)).Joined, b.add(2, join("b", 8)).Joined}
	settle := func() {
		for ts := uint64(3); ; ts++ {
			moved := false
			for i := range b.s.Parts {
				if p := b.s.Parts[i]; p.Revoking {
					pi := uint32(i)
					b.add(ts, Record{Kind: KindHandBack, M: p.Owner, P: &pi, E: p.Epoch})
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
	ids = append(ids, b.add(10, join("c", 8)).Joined)
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
// carries the Record's position as a strictly larger epoch.
func TestGroupStateInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.Uint32Range(1, 9).Draw(rt, "partitions")
		b := &logBuilder{s: NewState()}
		ts := uint64(0)
		var nonces []string
		var loaded *State
		for step := 0; step < 80; step++ {
			ts += rapid.Uint64Range(0, 600).Draw(rt, "dt")
			prev := append([]Partition(nil), b.s.Parts...)
			prevMembers := map[MemberID]bool{}
			for id := range b.s.Members {
				prevMembers[id] = true
			}
			var r Record
			var from MemberID
			switch k := rapid.IntRange(0, 4).Draw(rt, "kind"); {
			case k == 0 || len(b.s.IDs) == 0:
				nonce := fmt.Sprint(step)
				nonces = append(nonces, nonce)
				r = join(nonce, n)
				if i := rapid.IntRange(-1, 2).Draw(rt, "instance"); i >= 0 {
					r.Instance = fmt.Sprint("instance-", i)
				}
				if len(b.s.IDs) > 0 && rapid.Bool().Draw(rt, "replace") {
					r.Replaces = b.s.IDs[rapid.IntRange(0, len(b.s.IDs)-1).Draw(rt, "replaced")]
				}
			case k == 1 && rapid.IntRange(0, 3).Draw(rt, "snap") == 0:
				r = b.s.Snapshot(b.off)
			case k == 1:
				from = b.s.IDs[rapid.IntRange(0, len(b.s.IDs)-1).Draw(rt, "leaver")]
				r = Record{Kind: KindLeave, M: from}
			case k == 2:
				from = b.s.IDs[rapid.IntRange(0, len(b.s.IDs)-1).Draw(rt, "releaser")]
				p := rapid.Uint32Range(0, n-1).Draw(rt, "p")
				r = Record{Kind: KindHandBack, M: from, P: &p, E: b.s.Parts[p].Epoch}
			default:
				from = b.s.IDs[rapid.IntRange(0, len(b.s.IDs)-1).Draw(rt, "beater")]
				r = Record{Kind: KindBeat, M: from}
			}
			off := b.off
			if loaded == nil && rapid.IntRange(0, 20).Draw(rt, "load") == 0 && off > 0 {
				// A member joining now starts from a snapshot of the
				// state (through its JSON) and must agree with the full
				// replay from here on.
				snap := b.s.Snapshot(off)
				d, ok := DecodeRecord(snap.Encode())
				st, at, ok2 := FromSnapshot(d)
				if !ok || !ok2 || at != off {
					rt.Fatalf("snapshot at %d does not load: %v %v %d", off, ok, ok2, at)
				}
				loaded = st
			}
			payload := r.Encode()
			b.add(ts, r)
			if loaded != nil {
				loaded.Apply(off, ts, payload)
				if (step%8 == 0 || step == 79) && !reflect.DeepEqual(normal(loaded), normal(b.s)) {
					rt.Fatalf("after offset %d the state loaded from a snapshot differs:\n%+v\n%+v", off, normal(loaded), normal(b.s))
				}
			}
			if r.Kind == KindJoin && r.Instance != "" {
				for _, m := range b.s.Members {
					if m.Instance == r.Instance && m.Nonce != r.Nonce {
						rt.Fatalf("two live members of instance %s", r.Instance)
					}
				}
			}
			for i, p := range b.s.Parts {
				if len(b.s.IDs) > 0 && (p.Owner == 0 || b.s.Members[p.Owner] == nil) {
					rt.Fatalf("partition %d owned by %d, not a live member", i, p.Owner)
				}
				if i >= len(prev) || p.Owner == prev[i].Owner {
					continue
				}
				old := prev[i].Owner
				okMove := old == 0 || b.s.Members[old] == nil ||
					(r.Kind == KindHandBack && r.M == old && *r.P == uint32(i))
				if !okMove {
					rt.Fatalf("partition %d moved from live member %d to %d at %+v", i, old, p.Owner, r)
				}
				if p.Epoch != Epoch(off+1) || p.Epoch <= prev[i].Epoch {
					rt.Fatalf("partition %d granted with epoch %d at offset %d (before %d)", i, p.Epoch, off, prev[i].Epoch)
				}
			}
		}
	})
}

// normal returns s with empty collections as nil, for comparing.
func normal(s *State) State {
	c := *s
	if len(c.Members) == 0 {
		c.Members = nil
	}
	if len(c.IDs) == 0 {
		c.IDs = nil
	}
	if len(c.Parts) == 0 {
		c.Parts = nil
	}
	return c
}

// BenchmarkGroupStateApply measures what a joining member pays per record
// of history it replays (decode and apply one heartbeat, 3 members, 8
// partitions).
func BenchmarkGroupStateApply(b *testing.B) {
	lb := &logBuilder{s: NewState()}
	var ids []MemberID
	for i := range 3 {
		r := join(fmt.Sprint(i), 8)
		r.Timeout = 1 << 40
		ids = append(ids, lb.add(uint64(i+1), r).Joined)
	}
	beats := make([][]byte, len(ids))
	for i, id := range ids {
		r := Record{Kind: KindBeat, M: id, Seq: 12345}
		beats[i] = r.Encode()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lb.s.Apply(lb.off, uint64(10+i), beats[i%len(beats)])
		lb.off++
	}
}

// TestStaticMemberTakesOverAtOnce: a join with the Instance of a live
// member (a restarted process with a stable instance id) takes over that
// member's partitions at the join, with the join's epoch, without waiting
// for the old incarnation's session timeout; the other members keep
// theirs. A join without an Instance, or with another, does not.
func TestStaticMemberTakesOverAtOnce(t *testing.T) {
	b := &logBuilder{s: NewState()}
	ja := join("a", 6)
	ja.Instance = "A"
	a := b.add(10, ja).Joined
	jb := join("b", 6)
	jb.Instance = "B"
	bb := b.add(20, jb).Joined
	for _, p := range []uint32{3, 4, 5} {
		b.add(30, Record{Kind: KindHandBack, M: a, P: &p, E: b.s.Parts[p].Epoch})
	}
	if got := fmt.Sprint(owners(b.s)); got != fmt.Sprintf("[%d %d %d %d %d %d]", a, a, a, bb, bb, bb) {
		t.Fatalf("owners before the restart %s", got)
	}
	before := slices.Clone(b.s.Parts)
	// B restarts (its old incarnation never wrote a leave).
	jb2 := join("b2", 6)
	jb2.Instance = "B"
	off := b.off
	out := b.add(40, jb2)
	if out.Joined == 0 || out.TookOver != bb {
		t.Fatalf("restart of B: %+v", out)
	}
	for i, p := range b.s.Parts {
		switch {
		case i < 3 && p != before[i]:
			t.Errorf("partition %d of A changed: %+v", i, p)
		case i >= 3 && (p.Owner != out.Joined || p.Epoch != Epoch(off+1) || p.Revoking):
			t.Errorf("partition %d of B: %+v, want owner %d epoch %d", i, p, out.Joined, off+1)
		}
	}
	if b.s.Members[bb] != nil || len(b.s.IDs) != 2 {
		t.Errorf("the old incarnation is still a member: %v", b.s.IDs)
	}
	// A join of another instance takes nothing over.
	jc := join("c", 6)
	jc.Instance = "C"
	if out := b.add(50, jc); out.TookOver != 0 {
		t.Errorf("instance C took over %d", out.TookOver)
	}
}

// TestSnapshotBoundsTheReplay: a state loaded from a snapshot after a long
// history equals the full replay, and applying it costs one record.
func TestSnapshotBoundsTheReplay(t *testing.T) {
	b := &logBuilder{s: NewState()}
	var ids []MemberID
	for i := range 3 {
		ids = append(ids, b.add(uint64(i+1), join(fmt.Sprint(i), 8)).Joined)
	}
	for i := range 5_000 {
		b.add(uint64(10+i/10), Record{Kind: KindBeat, M: ids[i%3], Seq: uint64(i)})
	}
	snap := b.s.Snapshot(b.off)
	payload := snap.Encode()
	d, ok := DecodeRecord(payload)
	st, at, ok2 := FromSnapshot(d)
	if !ok || !ok2 || at != b.off {
		t.Fatalf("snapshot does not load (%d bytes)", len(payload))
	}
	if !reflect.DeepEqual(normal(st), normal(b.s)) {
		t.Fatalf("loaded %+v\nfull %+v", normal(st), normal(b.s))
	}
	t.Logf("a snapshot of 3 members and 8 partitions after %d records: %d bytes", b.off, len(payload))
}
