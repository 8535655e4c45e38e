package rebalance

import (
	"context"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/stream/connector"
)

// groupView is a membership whose Members the test sets (this instance is
// member 1).
type groupView struct {
	*membership
	mu      sync.Mutex
	members []connector.Member
}

func (g *groupView) Members() []connector.Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.members)
}

func (g *groupView) setMembers(ms ...connector.Member) {
	g.mu.Lock()
	g.members = ms
	g.mu.Unlock()
}

func owning(id connector.MemberID, parts ...uint32) connector.Member {
	m := connector.Member{ID: id}
	for _, p := range parts {
		m.Partitions = append(m.Partitions, connector.PartitionOwnership{Partition: p, Epoch: 5})
	}
	return m
}

// standbyLog is a changelog that keeps standby copies; a restore of
// partition 1 ends only once cancelled (and then keeps the partition, as
// a restore that finished while it was being cancelled does).
type standbyLog struct{ changelog }

func (c standbyLog) Standby(ctx context.Context, p uint32) error {
	c.j.add("standby %d", p)
	<-ctx.Done()
	c.j.add("standby %d ended", p)
	return nil
}

func (c standbyLog) Restore(ctx context.Context, p uint32, e Epoch) error {
	c.j.add("restore %d@%d", p, e)
	if p == 1 {
		<-ctx.Done()
		c.j.add("restore %d@%d ended", p, e)
	}
	return nil
}

func lastIndex(j *journal, call string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.calls) - 1; i >= 0; i-- {
		if j.calls[i] == call {
			return i
		}
	}
	return -1
}

// The loop keeps standby copies of the partitions membership.Standbys
// gives this member, stops a copy before restoring its partition when it
// is granted here, and, when a partition is dropped while its restore
// ends, ends the restore's epoch in the changelog after the restore
// stopped.
func TestLoopStandbys(t *testing.T) {
	defer goleak.VerifyNone(t)
	j := &journal{added: make(chan struct{}, 1)}
	m := &groupView{membership: &membership{out: make(chan connector.Assignment), owns: map[uint32]Epoch{}}}
	// Member 2 owns both partitions: this member (1) is where they go if
	// it dies, so it keeps both standby copies.
	m.setMembers(owning(1), owning(2, 0, 1))
	clk := &clock{added: make(chan struct{}, 1)}
	loop, err := NewLoop(Config{
		Membership: m,
		Changelog:  standbyLog{changelog{j}},
		Clock:      clk,
		Run: func(ctx context.Context, parts []uint32) error {
			<-ctx.Done()
			return nil
		},
		Fenced:     func(error) (uint32, Epoch, bool) { return 0, 0, false },
		Standbys:   1,
		Partitions: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewLoop(Config{Membership: m, Changelog: changelog{j}, Run: func(context.Context, []uint32) error { return nil },
		Fenced: func(error) (uint32, Epoch, bool) { return 0, 0, false }, Standbys: 1, Partitions: 2}); err == nil {
		t.Fatal("NewLoop took standbys with a changelog that cannot keep them")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	j.wait(t, "standby 0")
	j.wait(t, "standby 1")

	// Member 2 dies: both partitions are granted here and promoted.
	m.setMembers(owning(1, 0, 1))
	m.set(0, 9)
	m.out <- connector.Assignment{Kind: connector.Gained, Partition: 0, Epoch: 9}
	j.wait(t, "restore 0@9")
	if s, r := j.index("standby 0 ended"), j.index("restore 0@9"); s < 0 || s > r {
		t.Errorf("partition 0 restored before its standby copy stopped: %q", j.calls)
	}
	m.set(1, 9)
	m.out <- connector.Assignment{Kind: connector.Gained, Partition: 1, Epoch: 9}
	j.wait(t, "restore 1@9")
	// Partition 1 is lost while its restore runs: the loop ends epoch 9
	// in the changelog again once the restore stopped.
	m.set(1, 0)
	m.out <- connector.Assignment{Kind: connector.Lost, Partition: 1, Epoch: 9, Reason: connector.Expired}
	j.wait(t, "restore 1@9 ended")
	cancel() // every call of the loop is in the journal once Run returned
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if lastIndex(j, "lost 1@9") < j.index("restore 1@9 ended") {
		t.Errorf("partition 1 was not lost in the changelog after its restore ended: %q", j.calls)
	}
}
