package rebalance

import (
	"context"
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
	fence := make(chan struct{})
	r := startLoop(t, func(j *journal) Changelog { return blockingChangelog{changelog{j}, fence} }, nil)
	j := r.j

	r.assign(connector.Gained, 5, 219, 219)
	j.wait(t, "serve 5@219")
	r.clk.fireAll(t)
	j.wait(t, "gen 1 [5]")
	r.assign(connector.Revoking, 5, 219, 219)
	j.wait(t, "flush 5@219")
	r.assign(connector.Lost, 5, 219, 0)
	close(fence)
	j.wait(t, "states []")
	if got := r.lastStates(); len(got) != 0 {
		t.Errorf("states %v, want none", got)
	}
	r.stop(t)
}
