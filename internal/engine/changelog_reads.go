package engine

import (
	"context"
	"fmt"
)

// ConfirmRead returns once every commit of partition p stamped so far is
// confirmed in the changelog: a read that took its view before the call
// holds only commits the valid history has, which every later owner
// restores, so what it answers is never taken back by a failover. It
// returns nil at once when p is not kept here (its rows are as this
// instance last had them), and an error wrapping ErrFenced when p is lost
// or released before its commits were confirmed.
func (c *Changelog) ConfirmRead(ctx context.Context, p uint32) error {
	c.mu.Lock()
	part := c.parts[p]
	if part == nil {
		c.mu.Unlock()
		return nil
	}
	target := part.next - 1
	c.mu.Unlock()
	for {
		c.mu.Lock()
		if part.verified >= min(target, part.next-1) {
			c.mu.Unlock()
			return nil
		}
		if part.lost {
			c.mu.Unlock()
			return fmt.Errorf("partition %d left this instance before its commits were confirmed: %w", p, ErrFenced)
		}
		ch, lost := part.progress, part.lostC
		c.mu.Unlock()
		select {
		case <-ch:
		case <-lost:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
