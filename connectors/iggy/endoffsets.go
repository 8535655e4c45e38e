package iggy

import (
	"context"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

var _ connector.EndOffsetter = (*Source)(nil)

// EndOffsets returns, for every partition of the source's topic, the
// offset the next message appended to it will get (0 for an empty
// partition), in one round trip on the client's admin connection. It makes
// Source a connector.EndOffsetter: processors use it to measure their lag.
func (s *Source) EndOffsets(ctx context.Context) ([]uint64, error) {
	return endOffsets(ctx, s.cl, s.t)
}

// EndOffsets returns, for every partition of stream/topic, the offset the
// next message appended to it will get (0 for an empty partition), in one
// round trip.
func (c *Client) EndOffsets(ctx context.Context, stream, topic string) ([]uint64, error) {
	t, err := newTopicRef(stream, topic)
	if err != nil {
		return nil, err
	}
	return endOffsets(ctx, c, t)
}

func endOffsets(ctx context.Context, c *Client, t topicRef) ([]uint64, error) {
	d, err := topicDetails(ctx, c.admin, t)
	if err != nil {
		return nil, strerr.Errorf("strand: iggy: end offsets of %s: %w", t, err)
	}
	out := make([]uint64, d.PartitionsCount)
	for _, p := range d.Partitions {
		if p.Id >= d.PartitionsCount || p.MessagesCount == 0 {
			continue
		}
		out[p.Id] = p.CurrentOffset + 1
	}
	return out, nil
}
