package iggy

import (
	"errors"
	"time"
)

// A Send's deadline (connector.WithSendDeadline): in a group, the end of
// the owner's lease on the partition whose rows it publishes. The sink is
// asynchronous: a Send's messages wait in a queue for their sender, and a
// batch that failed is sent again until it is accepted. An owner paused
// (SIGSTOP, a frozen host) with messages queued or a batch being retried
// would otherwise write them when it resumes, after the new owner
// published the same rows: the check an outbox makes before Send does
// not cover the time the messages spend in the sink. So no message of
// such a Send is written after its deadline: take drops the ones queued
// past it, and beforeWrite refuses a batch holding one and bounds the
// socket write by the earliest deadline of the batch (the runtime checks
// a write deadline before it writes, so a process paused between the
// check and the write does not write when it resumes).

// errPastSendDeadline fails a message not written before its Send's
// deadline.
var errPastSendDeadline = errors.New("strand: iggy: not sent: its send deadline (the publisher's lease) passed first")

// expired reports whether the slot's Send has a deadline that passed.
func (s slot) expired(now time.Time) bool {
	return s.w != nil && !s.w.until.IsZero() && !now.Before(s.w.until)
}

// pastDeadline reports whether a deadline of a message of the batch in
// s.bslots passed: the batch can no longer be written, and a failed attempt
// is not retried.
func (s *sender) pastDeadline(now time.Time) bool {
	for _, sl := range s.bslots {
		if sl.expired(now) {
			return true
		}
	}
	return false
}

// beforeWrite is called right before the batch in s.bslots is written on
// c: it refuses the batch if a deadline of its messages passed, and else
// makes the write fail once the earliest one passes.
func (s *sender) beforeWrite(c *session) error {
	var until time.Time
	for _, sl := range s.bslots {
		if sl.w != nil && !sl.w.until.IsZero() && (until.IsZero() || sl.w.until.Before(until)) {
			until = sl.w.until
		}
	}
	if until.IsZero() {
		return nil
	}
	now := time.Now()
	if !now.Before(until) {
		return errPastSendDeadline
	}
	if call := now.Add(s.k.cl.cfg.callTimeout); call.Before(until) {
		until = call
	}
	_ = c.nc.SetWriteDeadline(until) // invoke sets the next call's deadline afresh
	return nil
}
