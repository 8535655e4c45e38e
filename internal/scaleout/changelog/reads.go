package changelog

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/internal/executor"
)

// ConfirmRead returns once every commit of partition p stamped so far is
// confirmed in the changelog: a read that took its view before the call
// holds only commits the valid history has, which every later owner
// restores, so what it answers is never taken back by a failover; and
// the membership must still grant p with its epoch (the lease), so that
// a deposed owner does not answer rows older than its successor's. It
// returns an error wrapping executor.ErrFenced when p is lost or released before
// its commits were confirmed, and for as long as p's rows here may hold
// such commits (until p is restored here again); nil at once when p is not
// kept here and its rows were all confirmed (or never this instance's).
func (c *Changelog) ConfirmRead(ctx context.Context, p uint32) error {
	c.mu.Lock()
	part := c.parts[p]
	if part == nil {
		left := c.unconfirmed[p]
		c.mu.Unlock()
		if left {
			return fmt.Errorf("partition %d left this instance with commits not confirmed: %w", p, executor.ErrFenced)
		}
		return nil
	}
	target := part.next - 1
	c.mu.Unlock()
	for {
		c.mu.Lock()
		if part.verified >= min(target, part.next-1) {
			epoch := part.epoch
			c.mu.Unlock()
			// The lease, as an outbox checks it before a send: a deposed
			// owner that has not noticed yet (paused, cut off) would
			// answer rows older than the new owner's.
			if e, ok := c.m.Owns(p); !ok || e != epoch {
				return fmt.Errorf("partition %d is no longer this instance's (epoch %d): %w", p, epoch, executor.ErrFenced)
			}
			return nil
		}
		if part.lost {
			c.mu.Unlock()
			return fmt.Errorf("partition %d left this instance before its commits were confirmed: %w", p, executor.ErrFenced)
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

// noteUnconfirmed records, as p is forgotten, whether commits of p are
// not confirmed: its rows here may then hold commits the valid history
// lacks. Called with c.mu held.
func (c *Changelog) noteUnconfirmed(p uint32) {
	part := c.parts[p]
	if part == nil || part.verified >= part.next-1 {
		return
	}
	if c.unconfirmed == nil {
		c.unconfirmed = map[uint32]bool{}
	}
	c.unconfirmed[p] = true
}

// Confirmed reports, without waiting, whether every commit of partition p
// up to the one whose head row is head (nil: none) is confirmed in the
// changelog, and checks as ConfirmRead does that p may be answered here:
// it returns an error wrapping executor.ErrFenced when p left this
// instance with commits not confirmed, is lost, or its lease does not
// hold. A partition not kept here whose rows were all confirmed (or never
// this instance's) is confirmed. It implements state.ConfirmedCheck.
func (c *Changelog) Confirmed(p uint32, head []byte) (bool, error) {
	var seq uint64
	if head != nil {
		m, err := parseHead(head)
		if err != nil {
			return false, fmt.Errorf("partition %d: %w", p, err)
		}
		seq = m.Seq
	}
	c.mu.Lock()
	part := c.parts[p]
	if part == nil {
		left := c.unconfirmed[p]
		c.mu.Unlock()
		if left {
			return false, fmt.Errorf("partition %d left this instance with commits not confirmed: %w", p, executor.ErrFenced)
		}
		return true, nil
	}
	lost, epoch := part.lost, part.epoch
	ok := head == nil || seq <= part.verified
	c.mu.Unlock()
	if lost {
		return false, fmt.Errorf("partition %d left this instance: %w", p, executor.ErrFenced)
	}
	if e, owned := c.m.Owns(p); !owned || e != epoch {
		return false, fmt.Errorf("partition %d is no longer this instance's (epoch %d): %w", p, epoch, executor.ErrFenced)
	}
	return ok, nil
}
