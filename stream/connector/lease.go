package connector

import (
	"context"
	"time"
)

// LeaseHolder is a Membership that can say until when its claim on a
// partition holds (docs/design.md §12, "Leases"). A publisher of a
// partition's outputs bounds its sends by that instant
// (WithSendDeadline), so that an owner paused after its last check does
// not publish when it resumes, after another member took the partition
// over.
type LeaseHolder interface {
	// OwnsUntil is Owns, with the instant at which this member stops
	// claiming p unless its lease is renewed meanwhile.
	OwnsUntil(p uint32) (Epoch, time.Time, bool)
}

type sendDeadlineKey struct{}

// WithSendDeadline returns a context for Sink.Send that carries a send
// deadline: no message of that Send may reach the broker after t. A sink
// that honours it (the Iggy sink does) fails the messages it has not
// written by t instead of writing them later, however long it retries or
// however long the process was paused. Unlike a context deadline, it
// does not cancel the call: the Send still waits for the messages
// written before t to be confirmed.
func WithSendDeadline(ctx context.Context, t time.Time) context.Context {
	if cur, ok := SendDeadline(ctx); ok && cur.Before(t) {
		return ctx
	}
	return context.WithValue(ctx, sendDeadlineKey{}, t)
}

// SendDeadline returns the send deadline ctx carries (WithSendDeadline),
// if any.
func SendDeadline(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(sendDeadlineKey{}).(time.Time)
	return t, ok
}
