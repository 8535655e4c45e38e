package changelog

import (
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream/connector"
)

// SendDeadline returns until when rows of p may reach an output topic:
// the end of this member's lease on p, if the membership tells it
// (connector.LeaseHolder), and false when it does not. An outbox bounds
// its send by it (connector.WithSendDeadline) after Check passed, so that
// an owner paused between the check and the broker (its messages queued
// in the sink, or a send being retried) does not publish when it resumes
// after its successor took p over (docs/design.md §15).
func (c *Changelog) SendDeadline(p uint32) (time.Time, bool, error) {
	epoch, kept := c.EpochOf(p)
	if !kept {
		return time.Time{}, false, executor.Fenced("publish rows", p, epoch)
	}
	lh, ok := c.m.(connector.LeaseHolder)
	if !ok {
		return time.Time{}, false, nil
	}
	e, until, owned := lh.OwnsUntil(p)
	if !owned || e != epoch {
		return time.Time{}, false, executor.Fenced("publish rows", p, epoch)
	}
	return until, true, nil
}
