package iggy

import (
	"context"

	"github.com/strand-io/strand/connectors/iggy/internal/wire"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

var _ connector.StartOffsetter = (*Source)(nil)

// StartOffsets returns, for every partition of the source's topic, the
// offset of its oldest message the server still holds (0 unless the
// topic's retention, message expiry or maximum size, deleted segments),
// or, for a partition holding none, the offset its next message will
// get. It makes Source a connector.StartOffsetter: an App checks, before
// it builds a table from the log, that the log still holds what the build
// needs. It costs a topic lookup and a one-message poll (strategy First,
// no offset stored) per partition on the client's admin connection, in
// both protocols.
func (s *Source) StartOffsets(ctx context.Context) ([]uint64, error) {
	return startOffsets(ctx, s.cl, s.t)
}

// StartOffsets returns, for every partition of stream/topic, the offset
// of its oldest retained message, or the offset its next message will get
// when it holds none: see Source.StartOffsets.
func (c *Client) StartOffsets(ctx context.Context, stream, topic string) ([]uint64, error) {
	t, err := newTopicRef(stream, topic)
	if err != nil {
		return nil, err
	}
	return startOffsets(ctx, c, t)
}

func startOffsets(ctx context.Context, c *Client, t topicRef) ([]uint64, error) {
	d, err := topicDetails(ctx, c.admin, t)
	if err != nil {
		return nil, strerr.Errorf("strand: iggy: start offsets of %s: %w", t, err)
	}
	out := make([]uint64, d.PartitionsCount)
	for _, p := range d.Partitions {
		if p.Id >= d.PartitionsCount {
			continue
		}
		// Polling First returns the oldest retained message; none when
		// the partition holds none, whose start is then its end (the
		// current offset, the last message's, is 0 both for a partition
		// never written and one whose only message at offset 0 is gone).
		var first *uint64
		var current uint64
		err := c.admin.call(ctx, func(s *session) error {
			polled, err := s.pollWith(t, p.Id, wire.PollFirst, 0, 1)
			if err != nil {
				return err
			}
			current = polled.CurrentOffset
			if len(polled.Messages) > 0 {
				off := polled.Messages[0].Header.Offset
				first = &off
			}
			return nil
		})
		if err != nil {
			return nil, strerr.Errorf("strand: iggy: start offset of %s partition %d: %w", t, p.Id, err)
		}
		switch {
		case first != nil:
			out[p.Id] = *first
		case current > 0 || p.MessagesCount > 0:
			out[p.Id] = max(current, p.CurrentOffset) + 1
		}
	}
	return out, nil
}
