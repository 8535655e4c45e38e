package rebalance

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/stream/connector"
)

// blockingChangelog is changelog whose Serve of a partition ends fenced
// when the test closes fence, and whose Flush waits for that fence too.
type blockingChangelog struct {
	changelog
	fence chan struct{}
}

func (c blockingChangelog) Serve(ctx context.Context, p uint32, e Epoch) error {
	c.j.add("serve %d@%d", p, e)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.fence:
		c.j.add("serve %d@%d fenced", p, e)
		return fenceErr{p, e}
	}
}

func (c blockingChangelog) Flush(ctx context.Context, p uint32, e Epoch) error {
	c.j.add("flush %d@%d", p, e)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.fence:
		c.j.add("flush %d@%d fenced", p, e)
		return fenceErr{p, e}
	}
}

func TestLoopRevokedThenLostDuringFlushEndsNotOwned(t *testing.T) {
	defer goleak.VerifyNone(t)
	j := &journal{added: make(chan struct{}, 1)}
	m := &membership{out: make(chan connector.Assignment), owns: map[uint32]Epoch{}}
	clk := &clock{added: make(chan struct{}, 1)}
	cl := blockingChangelog{changelog{j}, make(chan struct{})}
	var stateMu sync.Mutex
	var states []PartitionState
	gens := 0
	loop, err := NewLoop(Config{
		Membership: m,
		Changelog:  cl,
		Clock:      clk,
		Run: func(ctx context.Context, parts []uint32) error {
			stateMu.Lock()
			gens++
			g := gens
			stateMu.Unlock()
			j.add("gen %d %v", g, parts)
			<-ctx.Done()
			j.add("gen %d ended", g)
			return nil
		},
		Fenced: func(err error) (uint32, Epoch, bool) {
			var f fenceErr
			if errors.As(err, &f) {
				return f.p, f.e, true
			}
			return 0, 0, false
		},
		OnChange: func(s []PartitionState) {
			stateMu.Lock()
			states = s
			stateMu.Unlock()
			j.add("states %v", s)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()

	m.set(5, 219)
	m.out <- connector.Assignment{Kind: connector.Gained, Partition: 5, Epoch: 219}
	j.wait(t, "serve 5@219")
	clk.fireAll(t)
	j.wait(t, "gen 1 [5]")
	m.out <- connector.Assignment{Kind: connector.Revoking, Partition: 5, Epoch: 219}
	j.wait(t, "flush 5@219")
	m.set(5, 0)
	m.out <- connector.Assignment{Kind: connector.Lost, Partition: 5, Epoch: 219, Reason: connector.Expired}
	close(cl.fence)
	j.wait(t, "states []")
	stateMu.Lock()
	got := slices.Clone(states)
	stateMu.Unlock()
	if len(got) != 0 {
		t.Errorf("states %v, want none", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}
