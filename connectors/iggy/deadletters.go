package iggy

import (
	"context"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

// SentCheckWindow is how many messages beyond the ones asked about Sink.Sent
// searches at the end of each partition: the room for messages that other
// writers appended to the topic after the checked ones were published and
// before the check.
const SentCheckWindow = 10_000

var _ connector.SentChecker = (*Sink)(nil)

// Sent reports, for each message, whether a message with its ID is among the
// last messages of the partition it goes to (its key's, or its Partition) (the number of messages
// asked about in that partition plus SentCheckWindow). It makes the Sink a
// connector.SentChecker, so that a stream.Processor publishing dead letters to
// it never duplicates one after a crash: dead letters carry IDs derived from
// their origin, and a restarted processor sends only those Sent does not
// find.
//
// The answer is exact as long as fewer than SentCheckWindow messages were
// appended to the partition by others between the original publication and
// the check; past that a message is reported as not sent and would be sent
// again (never lost). It costs one topic lookup and one poll per 10,000
// messages searched, per partition involved. A message with a zero ID is
// reported as not sent.
//
// Sent first waits for this Sink's sends to the partitions involved that
// are still in flight (a Send whose context ended returns before the
// broker answered): until each is answered, or its connection is gone from
// the broker's sessions (then it was applied or dropped for good). So a
// false is never followed by the message landing from a request this Sink
// made. Requests of an earlier process cannot be waited for this way: see
// docs/design.md §2 (the outbox grace).
func (s *Sink) Sent(ctx context.Context, msgs []connector.Message) ([]bool, error) {
	out := make([]bool, len(msgs))
	byPart := map[uint32][]int{}
	var order []uint32
	for i := range msgs {
		if msgs[i].ID == ([16]byte{}) {
			continue
		}
		pt, err := s.partitionOf(&msgs[i])
		if err != nil {
			continue // Send refuses it: not sent
		}
		if _, ok := byPart[pt]; !ok {
			order = append(order, pt)
		}
		byPart[pt] = append(byPart[pt], i)
	}
	// Requests of an earlier process (WithSessionLog) first.
	if err := s.p.settleEarlierSessions(ctx); err != nil {
		return nil, strerr.Errorf("strand: iggy: check sent messages in %s: %w", s.Name(), err)
	}
	// A Send that returned early (its context ended) may have left a
	// request in flight that lands after the look below: wait for every
	// request to these partitions to be answered, or known lost, first.
	if err := s.p.settle(ctx, order); err != nil {
		return nil, strerr.Errorf("strand: iggy: check sent messages in %s: %w", s.Name(), err)
	}
	for _, pt := range order {
		idx := byPart[pt]
		tail, err := s.Tail(ctx, pt, len(idx)+SentCheckWindow)
		if err != nil {
			return nil, strerr.Errorf("strand: iggy: check sent messages in %s partition %d: %w", s.Name(), pt, err)
		}
		ids := make(map[[16]byte]bool, len(tail))
		for i := range tail {
			ids[tail[i].ID] = true
		}
		for _, i := range idx {
			out[i] = ids[msgs[i].ID]
		}
	}
	return out, nil
}
