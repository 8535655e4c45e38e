package iggy

import (
	"context"
	"fmt"
	"strings"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

var _ connector.Bookmarks = (*Client)(nil)

// bookmarkPrefix starts the name of the Iggy consumer that holds a
// bookmark, so that bookmarks and the consumers of Reader.Advise
// (WithConsumer, which refuses names with this prefix) never share a name.
const bookmarkPrefix = "strand-bookmark:"

// MaxBookmarkName is the longest bookmark name, in bytes: Iggy names a
// consumer with at most 255 bytes, and a bookmark's consumer name is the
// bookmark's name after a prefix of 16 bytes.
const MaxBookmarkName = 255 - len(bookmarkPrefix)

// bookmarkConsumer returns the Iggy consumer that holds bookmark name.
func bookmarkConsumer(name string) (iggcon.Consumer, error) {
	if name == "" || len(name) > MaxBookmarkName {
		return iggcon.Consumer{}, fmt.Errorf("strand: iggy: bookmark name of %d bytes, want 1..%d", len(name), MaxBookmarkName)
	}
	id, err := iggcon.NewIdentifier(bookmarkPrefix + name)
	if err != nil {
		return iggcon.Consumer{}, strerr.Errorf("strand: iggy: bookmark name %q: %w", name, err)
	}
	return iggcon.NewSingleConsumer(id), nil
}

func bookmarkTopic(topic string) (topicRef, error) {
	s, t, err := splitTopic(topic)
	if err != nil {
		return topicRef{}, err
	}
	return newTopicRef(s, t)
}

// Bookmark returns the offset last stored with SetBookmark under name for
// partition of topic ("stream/topic"), and false when none is. A bookmark
// is the stored offset of an Iggy consumer (a single consumer, not a
// group) named after it, on the Client's administrative connection; it
// lives as long as the topic, whatever Client reads it. A missing stream,
// topic or partition gives an error wrapping ierror.ErrStreamIdNotFound,
// ierror.ErrTopicIdNotFound or ierror.ErrPartitionNotFound.
//
// The server keys a consumer's offsets by a 32-bit hash of its name, so
// two names can in principle share a bookmark; keep the names of one
// partition few and distinct.
func (c *Client) Bookmark(ctx context.Context, topic string, partition uint32, name string) (uint64, bool, error) {
	t, err := bookmarkTopic(topic)
	if err != nil {
		return 0, false, err
	}
	cons, err := bookmarkConsumer(name)
	if err != nil {
		return 0, false, err
	}
	var info *iggcon.ConsumerOffsetInfo
	wc, err := wireConsumer(cons)
	if err != nil {
		return 0, false, strerr.Errorf("strand: iggy: bookmark %q: %w", name, err)
	}
	err = c.admin.call(ctx, func(s *session) error {
		var err error
		info, err = s.getConsumerOffset(wc, t, partition)
		return err
	})
	if err != nil {
		return 0, false, strerr.Errorf("strand: iggy: bookmark %q of %s partition %d: %w", name, t, partition, err)
	}
	if info != nil {
		if info.PartitionId != partition {
			return 0, false, fmt.Errorf("%w: bookmark %q of %s partition %d: the reply is for partition %d", ErrProtocol, name, t, partition, info.PartitionId)
		}
		return info.StoredOffset, true, nil
	}
	// The server answers the same for a missing stream, topic or
	// partition as for an offset never stored: tell them apart.
	if err := checkPartition(ctx, c.admin, t, partition); err != nil {
		return 0, false, strerr.Errorf("strand: iggy: bookmark %q: %w", name, err)
	}
	return 0, false, nil
}

// SetBookmark stores offset under name for partition of topic
// ("stream/topic"); Bookmark returns it from then on, until the next
// SetBookmark. Iggy keeps only offsets of messages the partition holds:
// offset must be at most the partition's last offset (an empty partition
// takes no bookmark), or the call fails with an error wrapping
// ierror.ErrInvalidOffset. A missing stream, topic or partition gives an
// error wrapping its SDK sentinel, as for Bookmark. It makes one attempt
// (after reconnecting a connection that was lost while idle).
func (c *Client) SetBookmark(ctx context.Context, topic string, partition uint32, name string, offset uint64) error {
	t, err := bookmarkTopic(topic)
	if err != nil {
		return err
	}
	cons, err := bookmarkConsumer(name)
	if err != nil {
		return err
	}
	wc, err := wireConsumer(cons)
	if err != nil {
		return strerr.Errorf("strand: iggy: set bookmark %q: %w", name, err)
	}
	err = c.admin.call(ctx, func(s *session) error {
		return s.storeConsumerOffset(wc, t, partition, offset)
	})
	if err != nil {
		return strerr.Errorf("strand: iggy: set bookmark %q of %s partition %d to offset %d: %w", name, t, partition, offset, err)
	}
	return nil
}

// checkPartition returns nil when partition of t exists.
func checkPartition(ctx context.Context, k *conn, t topicRef, partition uint32) error {
	d, err := topicDetails(ctx, k, t)
	if err != nil {
		return err
	}
	if partition >= d.PartitionsCount {
		return strerr.Errorf("strand: iggy: %s partition %d: the topic has partitions 0..%d: %w",
			t, partition, int64(d.PartitionsCount)-1, ierror.ErrPartitionNotFound)
	}
	return nil
}

// reservedConsumer reports whether an Advise consumer name would share a
// name with bookmarks.
func reservedConsumer(name string) bool { return strings.HasPrefix(name, bookmarkPrefix) }
