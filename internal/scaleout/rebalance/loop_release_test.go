package rebalance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

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

// Issue 34 through the real Loop: partition 5 is revoked and handed back,
// granted again under a newer epoch and revoked again. The second hand-back
// is asked for too (its changelog flushed, then handed back) and the
// partition ends not owned; before the fix the first hand-back's state made
// the node skip the second one, and 5 stayed listed as current for good.
func TestLoopHandsBackAgainAfterARegain(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := startLoop(t, func(j *journal) Changelog { return changelog{j} }, nil)
	serveThenHandBack(t, r, 5, 1, 1)
	serveThenHandBack(t, r, 5, 161, 2) // its flush was never asked for before the fix
	r.stop(t)
}

// serveThenHandBack grants p under epoch e, waits for generation gen to
// process it, revokes it and waits until it is flushed and handed back.
func serveThenHandBack(t *testing.T, r *loopRig, p uint32, e Epoch, gen int) {
	t.Helper()
	r.assign(connector.Gained, p, e, e)
	r.j.wait(t, fmt.Sprintf("serve %d@%d", p, e))
	r.clk.fireAll(t)
	r.j.wait(t, fmt.Sprintf("gen %d [%d]", gen, p))
	r.assign(connector.Revoking, p, e, e)
	r.j.wait(t, fmt.Sprintf("flush %d@%d", p, e))
	waitStates(t, r, nil) // handed back
}

// waitStates waits until the loop reported want (nil: no partition).
func waitStates(t *testing.T, r *loopRig, want []PartitionState) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if got := r.lastStates(); slices.Equal(got, want) {
			return
		}
		select {
		case <-r.j.added:
		case <-deadline:
			t.Fatalf("states %v, want %v; calls %q", r.lastStates(), want, r.j.calls)
		}
	}
}
