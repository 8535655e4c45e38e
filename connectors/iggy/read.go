package iggy

import (
	"context"

	ierror "github.com/apache/iggy/foreign/go/errors"
	"github.com/strand-io/strand/internal/strerr"
)

// Read returns the messages of partition of stream/topic from offset from
// on, in offset order: at most n of them, fewer when the partition ends
// before (none when from is at or past its end).
func (c *Client) Read(ctx context.Context, stream, topic string, partition uint32, from uint64, n int) ([]StoredMessage, error) {
	t, err := newTopicRef(stream, topic)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	d, err := topicDetails(ctx, c.admin, t)
	if err != nil {
		return nil, err
	}
	for i := range d.Partitions {
		info := &d.Partitions[i]
		if info.Id != partition {
			continue
		}
		if info.MessagesCount == 0 || from > info.CurrentOffset {
			return nil, nil
		}
		end := min(info.CurrentOffset, from+uint64(n)-1)
		ms, err := pollRange(ctx, c.admin, t, partition, from, end)
		if err != nil {
			return nil, err
		}
		return storedMessages(partition, ms), nil
	}
	return nil, strerr.Errorf("strand: iggy: read %s partition %d: the topic has %d partitions: %w", t, partition, d.PartitionsCount, ierror.ErrPartitionNotFound)
}
