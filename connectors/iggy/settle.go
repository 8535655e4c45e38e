package iggy

import (
	"context"

	"github.com/strand-io/strand/internal/strerr"
)

// settle waits until every message queued to the given partitions before
// the call is resolved: accepted by the broker, failed for good, or
// withdrawn before it was sent (a Send whose context ended). A batch whose
// request got no answer is resolved only once its sender knows whether it
// landed: it waits for the broker to drop the session that carried the
// request (sender.landed) before it looks. So after settle, a message of
// this publisher that is not in its partition is not on its way there
// either, and asking whether it was sent (Sink.Sent) gets an answer that
// stays true. It returns ctx's error if ctx ends first.
func (p *Publisher) settle(ctx context.Context, parts []uint32) error {
	n := uint32(len(p.senders))
	type want struct {
		s   *sender
		q   *pqueue
		enq uint64
	}
	wants := make([]want, 0, len(parts))
	for _, pt := range parts {
		if pt >= p.parts {
			continue // Send refuses it: nothing in flight
		}
		s := p.senders[pt%n]
		q := s.queues[pt/n]
		s.mu.Lock()
		s.flushing++ // send now what lingers, resolve what was withdrawn
		wants = append(wants, want{s, q, q.enq})
		s.mu.Unlock()
		s.poke()
	}
	defer func() {
		for _, w := range wants {
			w.s.mu.Lock()
			w.s.flushing--
			w.s.mu.Unlock()
		}
	}()
	for _, w := range wants {
		for {
			w.s.mu.Lock()
			done, ch := w.q.resolved >= w.enq, w.s.progress
			w.s.mu.Unlock()
			if done {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return strerr.Errorf("strand: iggy: %s partition %d: wait for the sends in flight to be answered: %w", p.t, w.q.part, ctx.Err())
			case <-p.stop:
				return strerr.Errorf("strand: iggy: %s partition %d: wait for the sends in flight to be answered: %w", p.t, w.q.part, ErrClosed)
			}
		}
	}
	return nil
}
