package iggy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
	"github.com/strand-io/strand/internal/strerr"
)

// Client is a connection to one Iggy server: the settings every connection
// it opens shares (credentials, TLS, timeouts, backoff, logger) and one
// connection of its own for administrative calls. Publishers, sinks and
// partition readers made from it open their own connections, because the
// SDK carries one request at a time per connection.
//
// A Client is safe for concurrent use. Administrative calls on it are
// serialized on its one connection.
type Client struct {
	addr  string
	cfg   config
	admin *conn

	// detected is the protocol ProtocolAuto found (a wire.Protocol), 0
	// before the first login.
	detected atomic.Uint32

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
}

// protocol returns the protocol a new connection speaks first.
func (c *Client) protocol() wire.Protocol {
	switch c.cfg.protocol {
	case Protocol08:
		return wire.Legacy
	case Protocol010:
		return wire.V012
	}
	if p := c.detected.Load(); p != 0 {
		return wire.Protocol(p)
	}
	return wire.V012
}

// Protocol returns the protocol the client speaks: the one WithProtocol
// chose, or with ProtocolAuto the one found at Connect.
func (c *Client) Protocol() Protocol {
	if c.protocol() == wire.Legacy {
		return Protocol08
	}
	return Protocol010
}

// Connect connects to the Iggy server at addr ("host:port") and logs in,
// so that an unreachable server or wrong credentials show at once: it fails
// within the dial timeout with an error wrapping ErrUnreachable, or with one
// wrapping ErrAuth and the SDK's sentinel (ierror.ErrInvalidCredentials).
// It makes one attempt; ctx bounds it too.
//
// Later connection failures are repaired on use: each connection reconnects
// and logs in again on its next call.
func Connect(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("%w: empty server address", ErrUnreachable)
	}
	if cfg.tls != nil {
		if _, err := cfg.tls.std(addr); err != nil {
			return nil, strerr.Errorf("strand: iggy: connect to %s: %w", addr, err)
		}
	}
	c := &Client{addr: addr, cfg: cfg, conns: map[*conn]struct{}{}}
	c.admin = newConn(c, "admin")
	c.conns[c.admin] = struct{}{}
	if err := c.admin.call(ctx, func(*session) error { return nil }); err != nil {
		c.admin.close()
		return nil, strerr.Errorf("strand: iggy: connect to %s: %w", addr, err)
	}
	return c, nil
}

// Addr returns the server address the client connects to.
func (c *Client) Addr() string { return c.addr }

// Close closes every connection of the client, including those of the
// publishers, sinks and readers made from it; their calls in flight fail
// with ErrClosed. Close publishers first (Publisher.Close) to deliver what
// they buffer. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conns := make([]*conn, 0, len(c.conns))
	for k := range c.conns {
		conns = append(conns, k)
	}
	c.conns = nil
	c.mu.Unlock()
	for _, k := range conns {
		k.close()
	}
	return nil
}

// openConn registers a new lazily connected connection.
func (c *Client) openConn(role string) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	k := newConn(c, role)
	c.conns[k] = struct{}{}
	return k, nil
}

// closeConn closes k and forgets it.
func (c *Client) closeConn(k *conn) {
	c.mu.Lock()
	if c.conns != nil {
		delete(c.conns, k)
	}
	c.mu.Unlock()
	k.close()
}

// topicRef names a topic and holds its identifiers.
type topicRef struct {
	stream, topic string
	sid, tid      iggcon.Identifier
	ws, wt        wire.Identifier
}

func newTopicRef(stream, topic string) (topicRef, error) {
	sid, err := iggcon.NewIdentifier(stream)
	if err != nil {
		return topicRef{}, strerr.Errorf("strand: iggy: stream name %q: must be 1..255 bytes: %w", stream, err)
	}
	tid, err := iggcon.NewIdentifier(topic)
	if err != nil {
		return topicRef{}, strerr.Errorf("strand: iggy: topic name %q: must be 1..255 bytes: %w", topic, err)
	}
	ws, _ := wire.NamedID(stream) // the SDK checked the lengths
	wt, _ := wire.NamedID(topic)
	return topicRef{stream: stream, topic: topic, sid: sid, tid: tid, ws: ws, wt: wt}, nil
}

func (t topicRef) String() string { return t.stream + "/" + t.topic }

// appendIdentifiers appends the wire encoding of the stream identifier and
// then the topic identifier (the start of every topic command's payload that
// the connector encodes itself) to dst.
func (t topicRef) appendIdentifiers(dst []byte) ([]byte, error) {
	return t.wt.Append(t.ws.Append(dst)), nil
}

// topicDetails reads a topic over k. A missing stream or topic gives an
// error wrapping ierror.ErrStreamIdNotFound or ierror.ErrTopicIdNotFound
// that names it.
func topicDetails(ctx context.Context, k *conn, t topicRef) (*iggcon.TopicDetails, error) {
	var d *iggcon.TopicDetails
	err := k.call(ctx, func(s *session) error {
		var err error
		d, err = s.getTopic(t)
		return err
	})
	if errors.Is(err, ierror.ErrTopicIdNotFound) {
		// The server answers a topic lookup in a missing stream as a missing
		// topic; tell the two apart for the message.
		serr := k.call(ctx, func(s *session) error {
			ok, err := s.streamExists(t)
			if err == nil && !ok {
				err = ierror.ErrStreamIdNotFound
			}
			return err
		})
		if errors.Is(serr, ierror.ErrStreamIdNotFound) {
			err = serr
		}
	}
	switch {
	case errors.Is(err, ierror.ErrStreamIdNotFound):
		return nil, strerr.Errorf("strand: iggy: stream %q does not exist (looking up topic %s): %w", t.stream, t, err)
	case errors.Is(err, ierror.ErrTopicIdNotFound):
		return nil, strerr.Errorf("strand: iggy: topic %s does not exist: %w", t, err)
	case err != nil:
		return nil, strerr.Errorf("strand: iggy: get topic %s: %w", t, err)
	}
	return d, nil
}

// Partitions returns the number of partitions of a topic. A missing stream
// or topic gives an error wrapping ierror.ErrStreamIdNotFound or
// ierror.ErrTopicIdNotFound.
func (c *Client) Partitions(ctx context.Context, stream, topic string) (uint32, error) {
	t, err := newTopicRef(stream, topic)
	if err != nil {
		return 0, err
	}
	d, err := topicDetails(ctx, c.admin, t)
	if err != nil {
		return 0, err
	}
	return d.PartitionsCount, nil
}

// TopicOption configures a topic that EnsureTopic creates.
type TopicOption interface {
	apply(*topicConfig)
}

// topicOptionFunc adapts a function to TopicOption.
type topicOptionFunc func(*topicConfig)

func (f topicOptionFunc) apply(c *topicConfig) { f(c) }

type topicConfig struct {
	expiry  iggcon.Duration
	maxSize uint64
}

// WithMessageExpiry makes the server delete messages older than d (in whole
// microseconds) from a topic EnsureTopic creates. Default: the server's
// setting (no expiry on a default 0.8 server). Readers report the deleted
// range as ErrOffsetGap if they had not read it yet.
func WithMessageExpiry(d iggcon.Duration) TopicOption {
	return topicOptionFunc(func(c *topicConfig) { c.expiry = d })
}

// WithMaxTopicSize caps the size in bytes of a topic EnsureTopic creates
// (0, the default, is the server's setting: unlimited on a default server).
func WithMaxTopicSize(bytes uint64) TopicOption {
	return topicOptionFunc(func(c *topicConfig) { c.maxSize = bytes })
}

// maxPartitions is Iggy's limit on partitions per topic.
const maxPartitions = 1000

// EnsureTopic makes sure stream/topic exists with the given number of
// partitions: it creates the stream and the topic (uncompressed) when they
// are missing, and accepts a topic that has exactly that many partitions.
// A topic with another count is refused with an error wrapping
// ErrPartitionCountMismatch that gives both counts: keys are placed by
// XXH32(key) % partitions, so a different count would send a key's events to
// another partition and break their order. opts apply only to a topic it
// creates. Creating concurrently with another process is safe.
func (c *Client) EnsureTopic(ctx context.Context, stream, topic string, partitions uint32, opts ...TopicOption) error {
	t, err := newTopicRef(stream, topic)
	if err != nil {
		return err
	}
	if partitions == 0 || partitions > maxPartitions {
		return fmt.Errorf("strand: iggy: topic %s: %d partitions asked for, want 1..%d", t, partitions, maxPartitions)
	}
	var tc topicConfig
	for _, o := range opts {
		if o != nil {
			o.apply(&tc)
		}
	}
	if err := c.ensureStream(ctx, t); err != nil {
		return err
	}
	for range 2 {
		d, err := topicDetails(ctx, c.admin, t)
		if err == nil {
			if d.PartitionsCount != partitions {
				return fmt.Errorf("%w: topic %s has %d partitions, but %d were asked for; strand places a key in partition XXH32(key) %% partitions, so another count would move keys between partitions and break their order: use a topic with %d partitions, or recreate this one",
					ErrPartitionCountMismatch, t, d.PartitionsCount, partitions, partitions)
			}
			return nil
		}
		if !errors.Is(err, ierror.ErrTopicIdNotFound) {
			return err
		}
		err = c.admin.call(ctx, func(s *session) error {
			return s.createTopic(t, partitions, uint64(tc.expiry), tc.maxSize)
		})
		if err == nil {
			c.cfg.log.Info("iggy: created topic", "stream", t.stream, "topic", t.topic, "partitions", partitions)
			return nil
		}
		if !errors.Is(err, ierror.ErrTopicNameAlreadyExists) {
			return strerr.Errorf("strand: iggy: create topic %s with %d partitions: %w", t, partitions, err)
		}
		// Created by someone else meanwhile: check its partition count.
	}
	return fmt.Errorf("strand: iggy: topic %s: it exists and vanished again while being ensured", t)
}

func (c *Client) ensureStream(ctx context.Context, t topicRef) error {
	err := c.admin.call(ctx, func(s *session) error {
		ok, err := s.streamExists(t)
		if err == nil && !ok {
			err = ierror.ErrStreamIdNotFound
		}
		return err
	})
	if err == nil {
		return nil
	}
	if !errors.Is(err, ierror.ErrStreamIdNotFound) {
		return strerr.Errorf("strand: iggy: get stream %q: %w", t.stream, err)
	}
	err = c.admin.call(ctx, func(s *session) error { return s.createStream(t.stream) })
	if err != nil && !errors.Is(err, ierror.ErrStreamNameAlreadyExists) {
		return strerr.Errorf("strand: iggy: create stream %q: %w", t.stream, err)
	}
	if err == nil {
		c.cfg.log.Info("iggy: created stream", "stream", t.stream)
	}
	return nil
}

// DeleteStream deletes a stream and everything in it. It is for tests and
// tools; strand never deletes data itself. A missing stream gives an error
// wrapping ierror.ErrStreamIdNotFound.
func (c *Client) DeleteStream(ctx context.Context, stream string) error {
	sid, err := wire.NamedID(stream)
	if err != nil {
		return strerr.Errorf("strand: iggy: stream name %q: %w", stream, err)
	}
	err = c.admin.call(ctx, func(s *session) error { return s.deleteStream(sid) })
	if err != nil {
		return strerr.Errorf("strand: iggy: delete stream %q: %w", stream, err)
	}
	return nil
}
