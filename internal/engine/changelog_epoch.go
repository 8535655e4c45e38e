package engine

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/stream/connector"
)

// FencedError is ErrFenced for one partition, with the epoch the work that
// failed belonged to (0: the partition is kept under no epoch here). The
// scale-out loop compares it with the epoch the partition is held under
// now: an error of an older epoch never ends a newer epoch's work
// (docs/design.md §15, "The rebalancing loop").
type FencedError struct {
	Partition uint32
	Epoch     connector.Epoch
	// What failed: "commit", "publish rows", "serve".
	What string
}

// Error names the partition, the epoch and what failed.
func (e *FencedError) Error() string {
	if e.Epoch == 0 {
		return fmt.Sprintf("%s of partition %d: %v", e.What, e.Partition, ErrFenced)
	}
	return fmt.Sprintf("%s of partition %d with epoch %d: %v", e.What, e.Partition, e.Epoch, ErrFenced)
}

// Unwrap returns ErrFenced.
func (e *FencedError) Unwrap() error { return ErrFenced }

func fenced(what string, p uint32, e connector.Epoch) error {
	return &FencedError{Partition: p, Epoch: e, What: what}
}

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
// ErrFenced from now on and it is forgotten; if p is kept under another
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

// ServeEpoch is Serve for p kept under epoch e; a FencedError if p is
// not (any more).
func (c *Changelog) ServeEpoch(ctx context.Context, p uint32, e connector.Epoch) error {
	if c.kept(p, e) == nil {
		return fenced("serve", p, e)
	}
	return c.Serve(ctx, p)
}

// FlushEpoch is Flush for p kept under epoch e; a FencedError if p is not.
func (c *Changelog) FlushEpoch(ctx context.Context, p uint32, e connector.Epoch) error {
	part := c.kept(p, e)
	if part == nil {
		return fenced("flush", p, e)
	}
	c.mu.Lock()
	target := part.next - 1
	c.mu.Unlock()
	if err := c.waitVerified(ctx, part, target); err != nil {
		if err == ErrFenced {
			return fenced("flush", p, e)
		}
		return err
	}
	return nil
}
