package iggy

import (
	"context"
	"fmt"
	"sync"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream/connector"
)

// Sink publishes strand's own messages (dead letters, outbox entries) to one
// topic as a connector.Sink. It is a Publisher underneath, with the same
// batching, ordering and retry guarantees; each message goes to partition
// XXH32(Key) % partitions and carries its Message.ID (a fresh unique id when
// zero), so that Tail can tell which messages a previous run already
// published (Iggy 0.8 does not deduplicate on the server).
//
// A Sink is safe for concurrent use; Close releases it.
type Sink struct {
	p *Publisher
	// items recycles the []item of Send calls: the queues copy the items,
	// so a call's slice is free once they are queued (outbox rounds are
	// thousands of messages, and a Sink serves many of them).
	items sync.Pool
}

var _ connector.Sink = (*Sink)(nil)

// NewSink returns a sink for stream/topic, which must exist (see
// Client.EnsureTopic). Options are those of a Publisher; WithMessageIDs does
// not apply (messages carry their own ids).
func NewSink(ctx context.Context, c *Client, stream, topic string, opts ...PublisherOption) (*Sink, error) {
	p, err := NewPublisher(ctx, c, stream, topic, opts...)
	if err != nil {
		return nil, err
	}
	return &Sink{p: p}, nil
}

// Name returns "stream/topic".
func (s *Sink) Name() string { return s.p.Name() }

// Partitions returns the topic's partition count.
func (s *Sink) Partitions() uint32 { return s.p.parts }

// PartitionOf returns the partition a message with this key goes to.
func (s *Sink) PartitionOf(key []byte) uint32 { return s.p.PartitionOf(key) }

// Send publishes msgs in order and returns nil only when all were accepted
// by the broker. A message that Iggy cannot carry (a key or header outside
// 1..255 bytes, an empty payload) fails the whole call before anything is
// sent, with an error wrapping ErrInvalidMessage. On any other error, per
// partition a prefix of msgs may have been sent. Message headers become
// Iggy user headers with String keys and Raw values, unless a field gives
// other kinds (connector.Field.NameKind, ValueKind). A message with
// HasPartition goes to that partition (one the topic does not have fails
// the call, ErrInvalidMessage).
func (s *Sink) Send(ctx context.Context, msgs []connector.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	p := s.p
	hsize := 0
	for i := range msgs {
		for _, f := range msgs[i].Headers {
			hsize += tlvSize(f.Name, f.Value)
		}
	}
	arena := make([]byte, 0, hsize)
	items := s.getItems(len(msgs))
	defer s.putItems(items)
	now := uint64(time.Now().UnixMicro())
	for i := range msgs {
		m := &msgs[i]
		if len(m.Key) == 0 || len(m.Key) > connector.MaxKeyLen {
			return strerr.Errorf("strand: iggy: send to %s: message %d: %w: key is %d bytes, want 1..%d", p.t, i, ErrInvalidMessage, len(m.Key), connector.MaxKeyLen)
		}
		if err := checkPayload(m.Payload); err != nil {
			return strerr.Errorf("strand: iggy: send to %s: message %d (key %q): %w", p.t, i, m.Key, err)
		}
		start := len(arena)
		var err error
		if arena, err = appendFields(arena, m.Headers); err != nil {
			return strerr.Errorf("strand: iggy: send to %s: message %d (key %q): %w", p.t, i, m.Key, err)
		}
		if len(arena)-start > maxUserHeaders {
			return strerr.Errorf("strand: iggy: send to %s: message %d (key %q): %w: user headers are %d bytes, Iggy allows %d",
				p.t, i, m.Key, ErrInvalidMessage, len(arena)-start, maxUserHeaders)
		}
		part, err := s.partitionOf(m)
		if err != nil {
			return strerr.Errorf("strand: iggy: send to %s: message %d (key %q): %w", p.t, i, m.Key, err)
		}
		items[i] = p.newItem(part, m.ID, now, m.Payload, arena[start:len(arena):len(arena)])
	}
	return p.sendItems(ctx, items)
}

func (s *Sink) getItems(n int) []item {
	if v, ok := s.items.Get().(*[]item); ok && cap(*v) >= n {
		return (*v)[:n]
	}
	return make([]item, n)
}

// putItems recycles items once nothing refers to them: Send has queued
// them (or given up) and its waiter is resolved.
func (s *Sink) putItems(items []item) {
	if cap(items) > 1<<16 {
		return // an unusually large call: do not keep its slice
	}
	clear(items)
	s.items.Put(&items)
}

// partitionOf returns the partition m goes to: m.Partition with
// HasPartition, else its key's.
func (s *Sink) partitionOf(m *connector.Message) (uint32, error) {
	if !m.HasPartition {
		return xxh32.Partition(m.Key, s.p.parts), nil
	}
	if m.Partition >= s.p.parts {
		return 0, fmt.Errorf("%w: partition %d, the topic has %d", ErrInvalidMessage, m.Partition, s.p.parts)
	}
	return m.Partition, nil
}

// Flush waits until every message sent so far is resolved (see
// Publisher.Flush).
func (s *Sink) Flush(ctx context.Context) error { return s.p.Flush(ctx) }

// Close delivers what is queued until ctx ends and releases the sink (see
// Publisher.Close).
func (s *Sink) Close(ctx context.Context) error { return s.p.Close(ctx) }

// Tail returns the last n messages of a partition of the sink's topic, in
// offset order (fewer if the partition holds fewer). A restarted runtime
// compares their IDs with its pending outbox to skip what a previous run
// already published.
func (s *Sink) Tail(ctx context.Context, partition uint32, n int) ([]StoredMessage, error) {
	return tail(ctx, s.p.cl.admin, s.p.t, partition, n)
}

// StoredMessage is a message as stored in an Iggy partition. Its byte
// slices alias the reply they were read from and belong to the caller.
type StoredMessage struct {
	// Partition and Offset say where the message is.
	Partition uint32
	Offset    uint64
	// ID is the message id (set by the publisher, or random by the server).
	ID [16]byte
	// Timestamp is the server's append time, in microseconds since the Unix
	// epoch.
	Timestamp uint64
	// Headers are the message's user headers, in order; names are the key
	// bytes, kinds other than a String name and a Raw value are kept
	// (connector.Field.NameKind, ValueKind). Nil when HeaderErr is set.
	Headers []connector.Field
	// HeaderErr is set when the user headers are malformed.
	HeaderErr error
	// Payload is the message body.
	Payload []byte
}

// Tail returns the last n messages of partition of stream/topic in offset
// order, fewer if it holds fewer (see Sink.Tail).
func (c *Client) Tail(ctx context.Context, stream, topic string, partition uint32, n int) ([]StoredMessage, error) {
	t, err := newTopicRef(stream, topic)
	if err != nil {
		return nil, err
	}
	return tail(ctx, c.admin, t, partition, n)
}

func tail(ctx context.Context, k *conn, t topicRef, partition uint32, n int) ([]StoredMessage, error) {
	ms, err := tailMessages(ctx, k, t, partition, n)
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	return storedMessages(partition, ms), nil
}

// storedMessages converts polled messages of a partition.
func storedMessages(partition uint32, ms []iggcon.IggyMessage) []StoredMessage {
	out := make([]StoredMessage, len(ms))
	for i := range ms {
		m := &ms[i]
		sm := &out[i]
		sm.Partition, sm.Offset, sm.ID, sm.Timestamp = partition, m.Header.Offset, m.Header.Id, m.Header.Timestamp
		sm.Payload = m.Payload[:len(m.Payload):len(m.Payload)]
		sm.HeaderErr = walkTLV(m.UserHeaders, func(kk byte, key []byte, vk byte, value []byte) error {
			f := connector.Field{Name: string(key), Value: value}
			if kk != kindString {
				f.NameKind = connector.FieldKind(kk)
			}
			if vk != kindRaw {
				f.ValueKind = connector.FieldKind(vk)
			}
			sm.Headers = append(sm.Headers, f)
			return nil
		})
		if sm.HeaderErr != nil {
			sm.Headers = nil
		}
	}
	return out
}

// tailMessages polls the last n messages of a partition.
func tailMessages(ctx context.Context, k *conn, t topicRef, partition uint32, n int) ([]iggcon.IggyMessage, error) {
	if n <= 0 {
		return nil, nil
	}
	d, err := topicDetails(ctx, k, t)
	if err != nil {
		return nil, err
	}
	var info *iggcon.PartitionContract
	for i := range d.Partitions {
		if d.Partitions[i].Id == partition {
			info = &d.Partitions[i]
		}
	}
	if info == nil {
		return nil, strerr.Errorf("strand: iggy: tail %s partition %d: the topic has %d partitions: %w", t, partition, d.PartitionsCount, ierror.ErrPartitionNotFound)
	}
	if info.MessagesCount == 0 {
		return nil, nil
	}
	end := info.CurrentOffset
	start := uint64(0)
	if end+1 > uint64(n) {
		start = end + 1 - uint64(n)
	}
	return pollRange(ctx, k, t, partition, start, end)
}

// pollRange polls the messages of a partition from offset start to end,
// both included.
func pollRange(ctx context.Context, k *conn, t topicRef, partition uint32, start, end uint64) ([]iggcon.IggyMessage, error) {
	var out []iggcon.IggyMessage
	for off := start; off <= end; {
		var polled *iggcon.PolledMessage
		count := uint32(min(end-off+1, 10_000))
		err := k.call(ctx, func(c *session) error {
			var err error
			polled, err = c.poll(t, partition, off, count)
			return err
		})
		if err != nil {
			return nil, strerr.Errorf("strand: iggy: poll %s partition %d at offset %d: %w", t, partition, off, err)
		}
		if len(polled.Messages) == 0 {
			break
		}
		out = append(out, polled.Messages...)
		off = polled.Messages[len(polled.Messages)-1].Header.Offset + 1
	}
	return out, nil
}
