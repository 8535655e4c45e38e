package iggytest

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"pgregory.net/rapid"

	"github.com/strand-io/strand/internal/testrun"
)

// The cooperative-rebalance scenarios join the shared table, so they run
// against the embedded broker and, with STRAND_IGGY_ADDR, a real server.
// Their exact assignments are what server 0.8.0's rebalance_cooperative
// computes for a fresh group.
func init() { scenarios = append(scenarios, groupScenarios...) }

// members returns each member's partitions in member order.
func members(t *testing.T, cli iggcon.Client, sid, tid, gid iggcon.Identifier) [][]uint32 {
	t.Helper()
	g, err := cli.GetConsumerGroup(sid, tid, gid)
	must(t, err)
	out := make([][]uint32, len(g.Members))
	for i, m := range g.Members {
		if int(m.PartitionsCount) != len(m.Partitions) {
			t.Fatalf("member %+v: count and list disagree", m)
		}
		out[i] = append([]uint32{}, m.Partitions...)
	}
	return out
}

func wantMembers(t *testing.T, what string, got [][]uint32, want ...[]uint32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: members %v, want %v", what, got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) && (len(got[i]) > 0 || len(want[i]) > 0) {
			t.Fatalf("%s: members %v, want %v", what, got, want)
		}
	}
}

// pollPartition polls partition pid as a group member, without committing.
func pollPartition(t *testing.T, cli iggcon.Client, sid, tid, gid iggcon.Identifier, pid uint32, commit bool) *iggcon.PolledMessage {
	t.Helper()
	pm, err := cli.PollMessages(sid, tid, iggcon.NewGroupConsumer(gid), iggcon.NextPollingStrategy(), 10, commit, &pid)
	must(t, err)
	return pm
}

var groupScenarios = []scenario{
	{"groups: a join hands over never-polled partitions at once, one per idle member (0.8.0's lopsided split)", func(t *testing.T, tg target) {
		admin := tg.login(t)
		sid, tid := tg.newTopic(t, admin, 12)
		_, err := admin.CreateConsumerGroup(sid, tid, "g")
		must(t, err)
		gid := mustID("g")
		a, b, c := tg.login(t), tg.login(t), tg.login(t)
		must(t, a.JoinConsumerGroup(sid, tid, gid))
		wantMembers(t, "one member", members(t, admin, sid, tid, gid), []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
		must(t, b.JoinConsumerGroup(sid, tid, gid))
		wantMembers(t, "two members", members(t, admin, sid, tid, gid), []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, []uint32{11})
		must(t, c.JoinConsumerGroup(sid, tid, gid))
		wantMembers(t, "three members", members(t, admin, sid, tid, gid), []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, []uint32{11}, []uint32{10})
		// A leave deals everything round-robin again.
		must(t, b.LeaveConsumerGroup(sid, tid, gid))
		wantMembers(t, "after a leave", members(t, admin, sid, tid, gid), []uint32{0, 2, 4, 6, 8, 10}, []uint32{1, 3, 5, 7, 9, 11})
	}},
	{"groups: a polled, uncommitted partition stays with its owner, pending, until the owner commits it", func(t *testing.T, tg target) {
		admin := tg.login(t)
		sid, tid := tg.newTopic(t, admin, 2)
		_, err := admin.CreateConsumerGroup(sid, tid, "g")
		must(t, err)
		gid := mustID("g")
		must(t, admin.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, "p0", 1)))
		must(t, admin.SendMessages(sid, tid, iggcon.PartitionId(1), msgs(t, "p1", 1)))
		a, b := tg.login(t), tg.login(t)
		must(t, a.JoinConsumerGroup(sid, tid, gid))
		if pm := pollPartition(t, a, sid, tid, gid, 1, false); len(pm.Messages) != 1 {
			t.Fatalf("owner's poll of partition 1 = %+v", pm)
		}
		must(t, b.JoinConsumerGroup(sid, tid, gid))
		// Partition 1 is pending revocation towards b: still listed with a.
		wantMembers(t, "while pending", members(t, admin, sid, tid, gid), []uint32{0, 1}, nil)
		pm, err := b.PollMessages(sid, tid, iggcon.NewGroupConsumer(gid), iggcon.NextPollingStrategy(), 10, false, nil)
		must(t, err)
		if len(pm.Messages) != 0 || pm.PartitionId != 0 || pm.CurrentOffset != 0 {
			t.Fatalf("the new member's poll while pending = %+v", pm)
		}
		// a's rotating polls skip the pending partition; an explicit poll
		// still serves it.
		for range 3 {
			pm, err := a.PollMessages(sid, tid, iggcon.NewGroupConsumer(gid), iggcon.NextPollingStrategy(), 10, false, nil)
			must(t, err)
			if pm.PartitionId != 0 {
				t.Fatalf("rotating poll of the old owner went to partition %d", pm.PartitionId)
			}
		}
		if pm := pollPartition(t, a, sid, tid, gid, 1, false); len(pm.Messages) != 1 || pm.PartitionId != 1 {
			t.Fatalf("old owner's explicit poll of the pending partition = %+v", pm)
		}
		// Another join (a no-op for a member) does not complete it either.
		must(t, b.JoinConsumerGroup(sid, tid, gid))
		wantMembers(t, "after a second join", members(t, admin, sid, tid, gid), []uint32{0, 1}, nil)
		// Committing what was polled hands it over.
		must(t, a.StoreConsumerOffset(iggcon.NewGroupConsumer(gid), sid, tid, 0, u32p(1)))
		wantMembers(t, "after the commit", members(t, admin, sid, tid, gid), []uint32{0}, []uint32{1})
		if pm := pollPartition(t, a, sid, tid, gid, 1, false); len(pm.Messages) != 0 || pm.PartitionId != 0 {
			t.Fatalf("old owner's poll of a partition it lost = %+v", pm)
		}
		must(t, admin.SendMessages(sid, tid, iggcon.PartitionId(1), msgs(t, "p1-late", 1)))
		pm, err = b.PollMessages(sid, tid, iggcon.NewGroupConsumer(gid), iggcon.NextPollingStrategy(), 10, true, nil)
		must(t, err)
		if pm.PartitionId != 1 || len(pm.Messages) != 1 || string(pm.Messages[0].Payload) != "p1-late-0" {
			t.Fatalf("new owner resumes after the committed offset: %+v %v", pm, payloads(pm))
		}
	}},
	{"groups: an auto-committing poll of a pending partition completes its revocation", func(t *testing.T, tg target) {
		admin := tg.login(t)
		sid, tid := tg.newTopic(t, admin, 2)
		_, err := admin.CreateConsumerGroup(sid, tid, "g")
		must(t, err)
		gid := mustID("g")
		must(t, admin.SendMessages(sid, tid, iggcon.PartitionId(1), msgs(t, "p1", 2)))
		a, b := tg.login(t), tg.login(t)
		must(t, a.JoinConsumerGroup(sid, tid, gid))
		pid := uint32(1)
		pm, err := a.PollMessages(sid, tid, iggcon.NewGroupConsumer(gid), iggcon.OffsetPollingStrategy(0), 1, false, &pid)
		must(t, err)
		if len(pm.Messages) != 1 {
			t.Fatalf("first poll = %+v", pm)
		}
		must(t, b.JoinConsumerGroup(sid, tid, gid))
		wantMembers(t, "while pending", members(t, admin, sid, tid, gid), []uint32{0, 1}, nil)
		// Auto-commit stores offset 1 and is checked against the offset
		// polled before (0): the revocation completes.
		pm, err = a.PollMessages(sid, tid, iggcon.NewGroupConsumer(gid), iggcon.OffsetPollingStrategy(1), 1, true, &pid)
		must(t, err)
		if len(pm.Messages) != 1 || pm.Messages[0].Header.Offset != 1 {
			t.Fatalf("auto-committing poll = %+v", pm)
		}
		wantMembers(t, "after the auto-commit", members(t, admin, sid, tid, gid), []uint32{0}, []uint32{1})
	}},
	{"groups: a leave drops pending revocations and what the leaver polled", func(t *testing.T, tg target) {
		admin := tg.login(t)
		sid, tid := tg.newTopic(t, admin, 2)
		_, err := admin.CreateConsumerGroup(sid, tid, "g")
		must(t, err)
		gid := mustID("g")
		must(t, admin.SendMessages(sid, tid, iggcon.PartitionId(1), msgs(t, "p1", 1)))
		a, b, c := tg.login(t), tg.login(t), tg.login(t)
		must(t, a.JoinConsumerGroup(sid, tid, gid))
		pollPartition(t, a, sid, tid, gid, 1, false)
		must(t, b.JoinConsumerGroup(sid, tid, gid))
		wantMembers(t, "while pending", members(t, admin, sid, tid, gid), []uint32{0, 1}, nil)
		// a leaves: full deal to b alone, the pending revocation is gone,
		// and so is the offset a polled from partition 1.
		must(t, a.LeaveConsumerGroup(sid, tid, gid))
		wantMembers(t, "after the owner left", members(t, admin, sid, tid, gid), []uint32{0, 1})
		// c joins: partition 1 was never polled since, so it moves at once.
		must(t, c.JoinConsumerGroup(sid, tid, gid))
		wantMembers(t, "after a join", members(t, admin, sid, tid, gid), []uint32{0}, []uint32{1})
	}},
}

func TestGroupRevocationTimesOut(t *testing.T) {
	tg := embeddedTarget(t, WithRebalancing(150*time.Millisecond, 10*time.Millisecond))
	admin := tg.login(t)
	sid, tid := tg.newTopic(t, admin, 2)
	_, err := admin.CreateConsumerGroup(sid, tid, "g")
	must(t, err)
	gid := mustID("g")
	must(t, admin.SendMessages(sid, tid, iggcon.PartitionId(1), msgs(t, "p1", 1)))
	a, b := tg.login(t), tg.login(t)
	must(t, a.JoinConsumerGroup(sid, tid, gid))
	pollPartition(t, a, sid, tid, gid, 1, false)
	start := time.Now()
	must(t, b.JoinConsumerGroup(sid, tid, gid))
	wantMembers(t, "while pending", members(t, admin, sid, tid, gid), []uint32{0, 1}, nil)
	var got [][]uint32
	// The 5 s hang guard counts from the join, as the timing check does.
	testrun.WaitFor(t, time.Until(start.Add(5*time.Second)), func() error {
		got = members(t, admin, sid, tid, gid)
		if len(got[1]) == 0 {
			return fmt.Errorf("revocation never timed out: %v", got)
		}
		if waited := time.Since(start); waited < 150*time.Millisecond {
			t.Fatalf("revocation completed after %v, before its timeout", waited)
		}
		return nil
	})
	wantMembers(t, "after the timeout", got, []uint32{0}, []uint32{1})
}

func TestGroupRevocationCheckOff(t *testing.T) {
	tg := embeddedTarget(t, WithRebalancing(time.Millisecond, -1))
	admin := tg.login(t)
	sid, tid := tg.newTopic(t, admin, 2)
	_, err := admin.CreateConsumerGroup(sid, tid, "g")
	must(t, err)
	gid := mustID("g")
	must(t, admin.SendMessages(sid, tid, iggcon.PartitionId(1), msgs(t, "p1", 1)))
	a, b := tg.login(t), tg.login(t)
	must(t, a.JoinConsumerGroup(sid, tid, gid))
	pollPartition(t, a, sid, tid, gid, 1, false)
	must(t, b.JoinConsumerGroup(sid, tid, gid))
	time.Sleep(50 * time.Millisecond) // pacing: a window in which a revocation check would run
	wantMembers(t, "still pending", members(t, admin, sid, tid, gid), []uint32{0, 1}, nil)
}

// TestCooperativeRebalanceInvariants drives the group model through random
// joins, leaves, polls, commits and timeouts and checks what must always
// hold: every partition has exactly one owner once there are members,
// pending revocations name a partition their member owns and an idle
// target, no member is the target of two, and a full rebalance is
// balanced.
func TestCooperativeRebalanceInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.Uint32Range(1, 16).Draw(rt, "partitions")
		g := &group{nparts: n}
		nextID := uint32(0)
		for step := 0; step < 40; step++ {
			ms := g.list()
			switch op := rapid.IntRange(0, 3).Draw(rt, "op"); {
			case op == 0 || len(ms) == 0:
				m := &member{id: nextID}
				nextID++
				m.slot = uint32(g.members.insert(m))
				g.rebalanceCooperative(uint64(step))
			case op == 1:
				m := ms[rapid.IntRange(0, len(ms)-1).Draw(rt, "leaver")]
				g.members.remove(m.slot)
				g.rebalanceFull()
				checkBalanced(rt, g)
			default:
				var pend [][3]uint32
				for _, m := range ms {
					for _, r := range m.pending {
						pend = append(pend, [3]uint32{m.slot, m.id, r.partition})
					}
				}
				if len(pend) > 0 {
					p := pend[rapid.IntRange(0, len(pend)-1).Draw(rt, "complete")]
					if !g.completeRevocation(p[0], p[1], p[2]) {
						rt.Fatalf("pending revocation %v did not complete", p)
					}
				}
			}
			checkGroup(rt, g)
		}
	})
}

func checkGroup(t *rapid.T, g *group) {
	ms := g.list()
	if len(ms) == 0 {
		return
	}
	var all []uint32
	targets := map[uint32]bool{}
	for _, m := range ms {
		all = append(all, m.parts...)
		for _, r := range m.pending {
			if !slices.Contains(m.parts, r.partition) {
				t.Fatalf("member %d has a revocation of partition %d it does not own", m.id, r.partition)
			}
			if targets[r.targetSlot] {
				t.Fatalf("slot %d is the target of two revocations", r.targetSlot)
			}
			targets[r.targetSlot] = true
			tm := g.members.get(r.targetSlot)
			if tm == nil || tm.id != r.targetID || len(tm.parts) != 0 {
				t.Fatalf("revocation of %d targets %+v", r.partition, tm)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	want := make([]uint32, g.nparts)
	for i := range want {
		want[i] = uint32(i)
	}
	if !slices.Equal(all, want) {
		t.Fatalf("partitions %v are not one cover of 0..%d: %s", all, g.nparts-1, describe(g))
	}
}

func checkBalanced(t *rapid.T, g *group) {
	ms := g.list()
	for _, m := range ms {
		if k := len(m.parts); k < int(g.nparts)/len(ms) || k > (int(g.nparts)+len(ms)-1)/len(ms) || len(m.pending) > 0 {
			t.Fatalf("full rebalance is not balanced: %s", describe(g))
		}
	}
}

func describe(g *group) string {
	s := ""
	for _, m := range g.list() {
		s += fmt.Sprintf("[%d: %v pending %v] ", m.id, m.parts, m.pending)
	}
	return s
}
