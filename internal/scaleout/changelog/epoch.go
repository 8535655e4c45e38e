package changelog

import (
	"context"
	"github.com/strand-io/strand/internal/executor"

	"github.com/strand-io/strand/stream/connector"
)

// kept returns p's state if it is kept here under epoch e.
func (c *Changelog) kept(p uint32, e connector.Epoch) *clogPart {
	c.mu.Lock()
	defer c.mu.Unlock()
	if part := c.parts[p]; part != nil && part.epoch == e {
		return part
	}
	return nil
}

// LostEpoch is Forget for the epoch e only: p's commits under e fail with
// executor.ErrFenced from now on and it is forgotten; if p is kept under another
// epoch (a newer grant restored meanwhile), nothing changes.
func (c *Changelog) LostEpoch(p uint32, e connector.Epoch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if part := c.parts[p]; part != nil && part.epoch == e {
		if !part.lost {
			part.lost = true
			close(part.lostC)
		}
		delete(c.parts, p)
	}
}

// ServeEpoch is Serve for p kept under epoch e; a executor.FencedError if p is
// not (any more).
func (c *Changelog) ServeEpoch(ctx context.Context, p uint32, e connector.Epoch) error {
	if c.kept(p, e) == nil {
		return executor.Fenced("serve", p, e)
	}
	return c.Serve(ctx, p)
}

// FlushEpoch is Flush for p kept under epoch e; a executor.FencedError if p is not.
func (c *Changelog) FlushEpoch(ctx context.Context, p uint32, e connector.Epoch) error {
	part := c.kept(p, e)
	if part == nil {
		return executor.Fenced("flush", p, e)
	}
	c.mu.Lock()
	target := part.next - 1
	c.mu.Unlock()
	if err := c.waitVerified(ctx, part, target); err != nil {
		if err == executor.ErrFenced {
			return executor.Fenced("flush", p, e)
		}
		return err
	}
	return nil
}
