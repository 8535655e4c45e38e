package iggy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
	"github.com/zeebo/xxh3"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// PublisherOption configures a Publisher or a Sink.
type PublisherOption interface {
	apply(*pubConfig) error
}

// publisherOptionFunc adapts a function to PublisherOption.
type publisherOptionFunc func(*pubConfig) error

func (f publisherOptionFunc) apply(c *pubConfig) error { return f(c) }

type pubConfig struct {
	batchMessages   int
	batchBytes      int
	linger          time.Duration
	bufferBytes     int64
	connections     int
	ids             func(stream.Envelope) [16]byte
	deliveryTimeout time.Duration
	resendWindow    int
	sessionLog      string // WithSessionLog (sessionlog.go)
}

func defaultPubConfig() pubConfig {
	return pubConfig{
		batchMessages: 1000,
		batchBytes:    1 << 20,
		bufferBytes:   64 << 20,
		connections:   1,
		resendWindow:  1000,
	}
}

// WithBatchSize caps one SendMessages request at n messages (default 1000).
func WithBatchSize(n int) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if n <= 0 {
			return fmt.Errorf("strand: iggy.WithBatchSize: %v, want at least 1", n)
		}
		c.batchMessages = n
		return nil
	})
}

// WithBatchBytes caps one SendMessages request at about n bytes of messages
// (default 1 MiB); a single larger message is still sent, alone.
func WithBatchBytes(n int) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if n <= 0 {
			return fmt.Errorf("strand: iggy.WithBatchBytes: %v, want at least 1", n)
		}
		c.batchBytes = n
		return nil
	})
}

// WithLinger makes a partition's batch wait up to d for more events before
// it is sent, unless it fills first (default 0: a batch is sent as soon as
// the connection is free, and events that arrive meanwhile form the next
// one, so batching adapts to the load without adding latency when idle).
func WithLinger(d time.Duration) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if d < 0 {
			return fmt.Errorf("strand: iggy.WithLinger: %v, want 0 or more", d)
		}
		c.linger = d
		return nil
	})
}

// WithBufferBytes bounds the bytes of events queued and not yet accepted by
// the broker (default 64 MiB). A publish that would exceed it waits for room
// (or for its context).
func WithBufferBytes(n int64) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if n <= 0 {
			return fmt.Errorf("strand: iggy.WithBufferBytes: %v, want at least 1", n)
		}
		c.bufferBytes = n
		return nil
	})
}

// WithConnections sets how many connections (SDK clients) send in parallel
// (default 1). Partition p is always sent by connection p % n, so each
// partition has one batch in flight at a time and its batches arrive in
// order.
func WithConnections(n int) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if n <= 0 {
			return fmt.Errorf("strand: iggy.WithConnections: %v, want at least 1", n)
		}
		c.connections = n
		return nil
	})
}

// WithMessageIDs sets the Iggy message id of each published envelope to
// fn(envelope), so that a re-send of the same event (by a restarted
// producer) carries the same id and readers can tell it is a repeat. A zero
// id means "generate one". Without this option every event gets a fresh
// unique id. KeySeqID is a ready-made fn for events with sequence numbers.
func WithMessageIDs(fn func(stream.Envelope) [16]byte) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if fn == nil {
			return errors.New("strand: iggy.WithMessageIDs: nil function")
		}
		c.ids = fn
		return nil
	})
}

// WithDeliveryTimeout makes the publisher give up on a batch that transient
// failures (lost connection, timeouts) kept from being accepted for d, and
// fail its events with the last error (default 0: retry until the publisher
// is closed or the caller's context ends).
func WithDeliveryTimeout(d time.Duration) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if d < 0 {
			return fmt.Errorf("strand: iggy.WithDeliveryTimeout: %v, want 0 or more", d)
		}
		c.deliveryTimeout = d
		return nil
	})
}

// WithResendCheckWindow sets how many messages at the end of a partition
// the publisher searches for a batch whose send had an unknown outcome
// (default 1000 plus the batch). See Publisher.
func WithResendCheckWindow(n int) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if n < 0 {
			return fmt.Errorf("strand: iggy.WithResendCheckWindow: %v, want 0 or more", n)
		}
		c.resendWindow = n
		return nil
	})
}

// KeySeqID derives a message id from an envelope's key and sequence number,
// for WithMessageIDs: the same event published twice gets the same id. It
// returns zero (generate an id) for an envelope without a sequence number.
func KeySeqID(e stream.Envelope) [16]byte {
	if !e.Headers.HasSeq {
		return [16]byte{}
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], e.Headers.Seq)
	return MessageID(e.Headers.Key, b[:])
}

// MessageID derives a non-zero 16-byte message id from parts (XXH3-128 of
// their length-prefixed concatenation). The same parts give the same id.
func MessageID(parts ...[]byte) [16]byte {
	n := 0
	for _, p := range parts {
		n += 4 + len(p)
	}
	buf := make([]byte, 0, n)
	for _, p := range parts {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(p)))
		buf = append(buf, p...)
	}
	id := xxh3.Hash128(buf).Bytes()
	if id == ([16]byte{}) {
		id[0] = 1 // zero asks the server for a random id
	}
	return id
}

// Publisher writes events to one Iggy topic, each with the strand headers
// of docs/design.md §5, into partition XXH32(key) % partitions: the partition
// Iggy's messages-key partitioning would pick for the key bytes. It computes
// the partition itself and sends with explicit partition ids, so events of
// many keys share one request per partition.
//
// Events are queued per partition and sent in batches (WithBatchSize,
// WithBatchBytes, WithLinger), one SendMessages per partition batch. A
// partition has at most one batch in flight and its batches are sent
// strictly in order, so the events of a key reach the log in the order they
// were published (by one goroutine; concurrent publishers of one key order
// their events between themselves).
//
// Failures: a batch that fails for a transient reason (lost connection,
// timeout) is retried on a fresh connection after a backoff, ahead of
// everything queued behind it. If its outcome is unknown (the request was
// written but no reply came): with Iggy 0.10 the publisher sends it again
// under the request number of its first attempt, from the same client id,
// and the server appends it at most once (an empty reply says it had
// appended it already). With Iggy 0.8 the publisher first waits until the server no
// longer lists the session that carried it (GetClients; the server finishes
// a request before it notices a closed connection), then searches the end
// of the partition for the batch's ids, in order, and sends the batch again
// only if it is not there. A batch is appended atomically, so this delivers
// it exactly once. A repeat remains possible only when that wait cannot
// work: the user may not list clients, a proxy hides the client address, or
// the server still holds the session after max(4 × call timeout, 30s).
// Every message carries a unique id (or the WithMessageIDs one), so a
// repeat is recognisable. A batch that fails for good (the topic was
// deleted, the server refuses a message) fails its events with the error,
// and so do the events of that partition queued behind it. Nothing is
// dropped silently: every event either is accepted by the broker or its
// publisher gets an error.
//
// Publish, PublishBatch and Send return when their events are accepted by
// the broker (durably, as far as the server's fsync settings go) or failed;
// Enqueue returns at once and reports the outcome to a callback. The payload
// and key bytes of a queued event must not be modified until it is resolved.
//
// A Publisher is safe for concurrent use. It owns WithConnections
// connections and as many goroutines; Close releases them.
type Publisher struct {
	cl    *Client
	t     topicRef
	parts uint32
	cfg   pubConfig
	slog  *sessionLog // WithSessionLog, or nil
	log   *slog.Logger

	senders []*sender
	budget  budget
	head    sendHead // the topic's part of every SendMessages request

	idPrefix uint64
	idSeq    atomic.Uint64

	closing   chan struct{} // closed when Close starts: no new events
	stop      chan struct{} // closed when Close gives up: fail what is left
	closeOnce sync.Once
	stopOnce  sync.Once
	wg        sync.WaitGroup
}

// NewPublisher returns a publisher for stream/topic, which must exist (see
// Client.EnsureTopic); it reads the topic's partition count once, so the
// count must not change while the publisher lives. The publisher opens its
// own connections from c, lazily.
func NewPublisher(ctx context.Context, c *Client, stream, topic string, opts ...PublisherOption) (*Publisher, error) {
	t, err := newTopicRef(stream, topic)
	if err != nil {
		return nil, err
	}
	cfg := defaultPubConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	d, err := topicDetails(ctx, c.admin, t)
	if err != nil {
		return nil, strerr.Errorf("strand: iggy: new publisher: %w", err)
	}
	if d.PartitionsCount == 0 {
		return nil, fmt.Errorf("strand: iggy: new publisher: topic %s has no partitions", t)
	}
	head, err := newSendHead(t)
	if err != nil {
		return nil, strerr.Errorf("strand: iggy: new publisher: %w", err)
	}
	p := &Publisher{
		head:     head,
		cl:       c,
		t:        t,
		parts:    d.PartitionsCount,
		cfg:      cfg,
		log:      c.cfg.log.With("stream", t.stream, "topic", t.topic),
		budget:   budget{max: cfg.bufferBytes, freed: make(chan struct{})},
		idPrefix: rand.Uint64(),
		closing:  make(chan struct{}),
		stop:     make(chan struct{}),
	}
	if cfg.sessionLog != "" {
		if p.slog, err = openSessionLog(cfg.sessionLog); err != nil {
			return nil, err
		}
	}
	n := min(cfg.connections, int(p.parts))
	for i := range n {
		k, err := c.openConn(fmt.Sprintf("publisher %s connection %d", t, i))
		if err != nil {
			for _, s := range p.senders {
				c.closeConn(s.k)
			}
			if p.slog != nil {
				p.slog.close()
			}
			return nil, strerr.Errorf("strand: iggy: new publisher for %s: %w", t, err)
		}
		s := &sender{p: p, k: k, wake: make(chan struct{}, 1), progress: make(chan struct{})}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		for part := uint32(i); part < p.parts; part += uint32(n) {
			s.queues = append(s.queues, &pqueue{part: part})
		}
		p.senders = append(p.senders, s)
	}
	for _, s := range p.senders {
		p.wg.Add(1)
		go s.run()
	}
	return p, nil
}

// Name returns "stream/topic".
func (p *Publisher) Name() string { return p.t.String() }

// Partitions returns the topic's partition count, read when the publisher
// was made.
func (p *Publisher) Partitions() uint32 { return p.parts }

// PartitionOf returns the partition an event with this key goes to:
// XXH32(key, 0) % Partitions(), as Iggy's messages-key partitioning.
func (p *Publisher) PartitionOf(key []byte) uint32 { return xxh32.Partition(key, p.parts) }

// Publish encodes e with enc and publishes it, returning when the broker
// accepted it or it failed. Methods cannot have type parameters, hence a
// function. Throughput comes from many goroutines publishing at once (their
// events share batches) or from PublishBatch.
func Publish[E any](ctx context.Context, p *Publisher, enc stream.Encoder[E], e E) error {
	env, err := enc.Envelope(e)
	if err != nil {
		return strerr.Errorf("strand: iggy: publish to %s: encode %T: %w", p.t, e, err)
	}
	return p.Send(ctx, env)
}

// PublishBatch encodes and publishes events in order, returning when all
// were accepted or resolved with an error (see Send). If one cannot be
// encoded, none is published.
func PublishBatch[E any](ctx context.Context, p *Publisher, enc stream.Encoder[E], events []E) error {
	envs := make([]stream.Envelope, len(events))
	for i, e := range events {
		env, err := enc.Envelope(e)
		if err != nil {
			return strerr.Errorf("strand: iggy: publish to %s: encode event %d (%T): %w", p.t, i, e, err)
		}
		envs[i] = env
	}
	return p.Send(ctx, envs...)
}

// Send publishes envelopes in order and returns when every one was accepted
// by the broker or failed. If any cannot be written (bad headers, empty
// payload) none is sent. On error, the others may have been delivered: per
// partition, a prefix of them. If ctx ends first, Send withdraws the
// envelopes not yet sent and returns an error wrapping ctx.Err(); envelopes
// already in flight may still be delivered. When ctx carries a valid span
// context (OpenTelemetry), every message gets a traceparent header naming
// it (docs/design.md §5), so that consumers link their processing to it;
// Enqueue does the same.
func (p *Publisher) Send(ctx context.Context, envs ...stream.Envelope) error {
	if len(envs) == 0 {
		return nil
	}
	items, err := p.buildEnvelopes(envs, traceParent(ctx))
	if err != nil {
		return err
	}
	return p.sendItems(ctx, items)
}

// Enqueue queues env for publishing and returns once it is queued (it waits
// only for buffer room, see WithBufferBytes). done is called exactly once,
// from a publisher goroutine, with nil when the broker accepted the event or
// with the reason it could not be delivered; it must not block. An error
// from Enqueue itself means the event was not queued and done will not be
// called.
func (p *Publisher) Enqueue(ctx context.Context, env stream.Envelope, done func(error)) error {
	items, err := p.buildEnvelopes([]stream.Envelope{env}, traceParent(ctx))
	if err != nil {
		return err
	}
	it := &items[0]
	it.slot.fn = done
	if done == nil {
		it.slot.fn = func(error) {}
	}
	return p.enqueue(ctx, it)
}

// item is one message ready to queue.
type item struct {
	part uint32
	msg  iggcon.IggyMessage
	slot slot
}

// buildEnvelopes validates envs and turns them into messages. All user
// headers share one allocation. A non-nil tp is written as every message's
// traceparent header.
func (p *Publisher) buildEnvelopes(envs []stream.Envelope, tp []byte) ([]item, error) {
	hsize := 0
	for i := range envs {
		hsize += strandHeadersSize(&envs[i].Headers)
		if tp != nil {
			hsize += tlvSize(connector.HeaderTraceParent, tp)
		}
	}
	arena := make([]byte, 0, hsize)
	items := make([]item, len(envs))
	now := uint64(time.Now().UnixMicro())
	for i := range envs {
		e := &envs[i]
		if err := checkPayload(e.Payload); err != nil {
			return nil, strerr.Errorf("strand: iggy: publish to %s: event %d (type tag %d, key %q): %w", p.t, i, e.Headers.Tag, e.Headers.Key, err)
		}
		start := len(arena)
		var err error
		if arena, err = appendStrandHeaders(arena, &e.Headers); err != nil {
			return nil, strerr.Errorf("strand: iggy: publish to %s: event %d: %w", p.t, i, err)
		}
		if tp != nil {
			arena = appendTLV(arena, connector.HeaderTraceParent, tp)
		}
		h := arena[start:len(arena):len(arena)]
		var id [16]byte
		if p.cfg.ids != nil {
			id = p.cfg.ids(*e)
		}
		items[i] = p.newItem(xxh32.Partition(e.Headers.Key, p.parts), id, now, e.Payload, h)
	}
	return items, nil
}

func (p *Publisher) newItem(part uint32, id [16]byte, now uint64, payload, headers []byte) item {
	if id == ([16]byte{}) {
		binary.LittleEndian.PutUint64(id[:8], p.idPrefix)
		binary.LittleEndian.PutUint64(id[8:], p.idSeq.Add(1))
	}
	return item{
		part: part,
		msg: iggcon.IggyMessage{
			Header: iggcon.MessageHeader{
				Id:               id,
				OriginTimestamp:  now,
				UserHeaderLength: uint32(len(headers)),
				PayloadLength:    uint32(len(payload)),
			},
			Payload:     payload,
			UserHeaders: headers,
		},
		slot: slot{size: int32(iggcon.MessageHeaderSize + len(payload) + len(headers))},
	}
}

func checkPayload(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: payload is empty, Iggy needs 1..%d bytes", ErrInvalidMessage, iggcon.MaxPayloadSize)
	}
	if len(b) > iggcon.MaxPayloadSize {
		return fmt.Errorf("%w: payload is %d bytes, Iggy allows at most %d", ErrInvalidMessage, len(b), iggcon.MaxPayloadSize)
	}
	return nil
}

// sendItems queues items under one waiter and waits for all of them.
func (p *Publisher) sendItems(ctx context.Context, items []item) error {
	w := &waiter{done: make(chan struct{})}
	if until, ok := connector.SendDeadline(ctx); ok {
		w.until = until // sendlease.go
	}
	w.remaining.Store(int64(len(items)))
	for i := range items {
		items[i].slot.w = w
	}
	if n, err := p.enqueueAll(ctx, items); err != nil {
		w.cancelled.Store(true)
		for range items[n:] {
			w.resolve(err)
		}
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		w.cancelled.Store(true)
		select {
		case <-w.done: // resolved meanwhile
		default:
			return strerr.Errorf("strand: iggy: publish to %s: %w; events not yet sent were withdrawn, events in flight may still be delivered", p.t, ctx.Err())
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.nerr == 0:
		return nil
	case len(items) == 1:
		return w.err
	}
	return fmt.Errorf("%d of %d events failed; the first: %w", w.nerr, len(items), w.err)
}

// enqueue appends it to its partition's queue.
func (p *Publisher) enqueue(ctx context.Context, it *item) error {
	size := int64(it.slot.size)
	if err := p.budget.acquire(ctx, size, p.closing); err != nil {
		if errors.Is(err, ErrClosed) {
			return strerr.Errorf("strand: iggy: publish to %s: %w", p.t, ErrClosed)
		}
		return strerr.Errorf("strand: iggy: publish to %s: waiting for buffer room: %w", p.t, err)
	}
	n := uint32(len(p.senders))
	s := p.senders[it.part%n]
	q := s.queues[it.part/n]
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		p.budget.release(size)
		return strerr.Errorf("strand: iggy: publish to %s: %w", p.t, ErrClosed)
	}
	q.push(it.msg, it.slot)
	if len(q.msgs)-q.head == 1 {
		q.oldest = time.Now()
	}
	notify := p.cfg.linger == 0 || len(q.msgs)-q.head == 1 || q.full(&p.cfg)
	s.mu.Unlock()
	if notify {
		s.poke()
	}
	return nil
}

// enqueueAll appends items to their partitions' queues, in order, taking
// buffer room and each sender's lock once per run of items that fits the
// buffer (once per call unless the call holds more than WithBufferBytes),
// instead of once per item. On error it returns how many items were queued:
// items[n:] were not, and their slots are the caller's to resolve.
func (p *Publisher) enqueueAll(ctx context.Context, items []item) (int, error) {
	done := 0
	for done < len(items) {
		// The longest run that fits the buffer, at least one item.
		end, size := done, int64(0)
		for end < len(items) && (end == done || size+int64(items[end].slot.size) <= p.budget.max) {
			size += int64(items[end].slot.size)
			end++
		}
		if err := p.budget.acquire(ctx, size, p.closing); err != nil {
			if errors.Is(err, ErrClosed) {
				return done, strerr.Errorf("strand: iggy: publish to %s: %w", p.t, ErrClosed)
			}
			return done, strerr.Errorf("strand: iggy: publish to %s: waiting for buffer room: %w", p.t, err)
		}
		run := items[done:end]
		n := uint32(len(p.senders))
		if n == 1 || len(run) == 1 {
			// No grouping needed.
			if err := p.pushRun(run, 0, n, size); err != nil {
				return done, err
			}
		} else {
			for si := range n {
				var sz int64
				for i := range run {
					if run[i].part%n == si {
						sz += int64(run[i].slot.size)
					}
				}
				if sz == 0 {
					continue
				}
				if err := p.pushRun(run, si, n, sz); err != nil {
					var rest int64 // budget of the later senders' items
					for i := range run {
						if run[i].part%n > si {
							rest += int64(run[i].slot.size)
						}
					}
					p.budget.release(rest)
					return p.failRunAfter(run, done, si, n, err)
				}
			}
		}
		done = end
	}
	return len(items), nil
}

// pushRun queues the items of run that sender si of n sends (all of them
// when n is 1 or run has one item), under one lock, and wakes the sender.
// size is their bytes, already taken from the budget; on error (the
// sender is closing) it is released and nothing is queued.
func (p *Publisher) pushRun(run []item, si, n uint32, size int64) error {
	s := p.senders[si]
	if len(run) == 1 {
		s = p.senders[run[0].part%n]
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		p.budget.release(size)
		return strerr.Errorf("strand: iggy: publish to %s: %w", p.t, ErrClosed)
	}
	notify := p.cfg.linger == 0
	for i := range run {
		it := &run[i]
		if len(run) > 1 && it.part%n != si {
			continue
		}
		q := s.queues[it.part/n]
		q.push(it.msg, it.slot)
		if len(q.msgs)-q.head == 1 {
			q.oldest = time.Now()
			notify = true
		}
		notify = notify || q.full(&p.cfg)
	}
	s.mu.Unlock()
	if notify {
		s.poke()
	}
	return nil
}

// failRunAfter handles a sender found closing while a run was being queued
// sender by sender: the items of the senders before si are queued (they
// resolve from their queues), those of si and later ones are not, and it
// resolves them with err. It returns the number of items of the whole call
// (of which run starts at done) that the caller need not resolve: all up to
// the run's end.
func (p *Publisher) failRunAfter(run []item, done int, si, n uint32, err error) (int, error) {
	for i := range run {
		if run[i].part%n >= si {
			run[i].slot.resolve(err)
		}
	}
	return done + len(run), err
}

// Flush sends every queued event now (ignoring the linger time) and waits
// until each event queued before the call is accepted or failed, or ctx
// ends. Events that failed report to their publishers; Flush returns only
// ctx's error or ErrClosed.
func (p *Publisher) Flush(ctx context.Context) error {
	wants := make([][]uint64, len(p.senders))
	for i, s := range p.senders {
		s.mu.Lock()
		s.flushing++
		wants[i] = make([]uint64, len(s.queues))
		for j, q := range s.queues {
			wants[i][j] = q.enq
		}
		s.mu.Unlock()
		s.poke()
	}
	defer func() {
		for _, s := range p.senders {
			s.mu.Lock()
			s.flushing--
			s.mu.Unlock()
		}
	}()
	for i, s := range p.senders {
		for {
			s.mu.Lock()
			done := true
			for j, q := range s.queues {
				if q.resolved < wants[i][j] {
					done = false
					break
				}
			}
			ch := s.progress
			s.mu.Unlock()
			if done {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return strerr.Errorf("strand: iggy: flush %s: %w", p.t, ctx.Err())
			}
		}
	}
	return nil
}

// Close stops accepting events, delivers what is queued (as Flush) until ctx
// ends, then fails whatever is left with ErrClosed, aborts a send in flight,
// and releases the publisher's connections and goroutines. It returns ctx's
// error if it had to give up. Close is idempotent.
func (p *Publisher) Close(ctx context.Context) error {
	first := false
	p.closeOnce.Do(func() {
		first = true
		close(p.closing)
		for _, s := range p.senders {
			s.mu.Lock()
			s.closing = true
			s.mu.Unlock()
			s.poke()
		}
	})
	if !first {
		p.wg.Wait()
		return nil
	}
	err := p.Flush(ctx)
	p.halt()
	p.wg.Wait()
	for _, s := range p.senders {
		p.cl.closeConn(s.k)
	}
	if p.slog != nil {
		p.slog.close()
	}
	if err != nil {
		return strerr.Errorf("strand: iggy: close publisher %s: %w", p.t, err)
	}
	return nil
}

// halt makes the senders fail what is left and exit.
func (p *Publisher) halt() {
	p.stopOnce.Do(func() {
		close(p.stop)
		for _, s := range p.senders {
			s.cancel()
		}
	})
}

// slot is the bookkeeping of one queued message: who to tell, and its size.
type slot struct {
	w    *waiter
	fn   func(error)
	size int32
}

func (s slot) resolve(err error) {
	if s.fn != nil {
		s.fn(err)
	} else {
		s.w.resolve(err)
	}
}

// withdrawn reports whether the slot's caller gave up before it was sent.
func (s slot) withdrawn() bool { return s.w != nil && s.w.cancelled.Load() }

// waiter collects the outcome of the messages of one Send.
type waiter struct {
	remaining atomic.Int64
	cancelled atomic.Bool
	done      chan struct{}
	// until: the Send's deadline (connector.WithSendDeadline; zero:
	// none): its messages not written by then fail (sendlease.go).
	until time.Time

	mu   sync.Mutex
	err  error
	nerr int
	// failed lists the partitions where a message of this Send failed:
	// its later messages for them are not sent (failedBefore), so that per
	// partition what a failed Send delivered is a prefix of its messages.
	failed map[uint32]bool
}

// failPart notes that a message of the Send for partition part failed.
func (w *waiter) failPart(part uint32) {
	w.mu.Lock()
	if w.failed == nil {
		w.failed = map[uint32]bool{}
	}
	w.failed[part] = true
	w.mu.Unlock()
}

// failedBefore reports whether an earlier message of the Send for part
// failed.
func (w *waiter) failedBefore(part uint32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed[part]
}

func (w *waiter) resolve(err error) {
	if err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.nerr++
		w.mu.Unlock()
	}
	if w.remaining.Add(-1) == 0 {
		close(w.done)
	}
}

// budget bounds the bytes queued and in flight.
type budget struct {
	mu    sync.Mutex
	used  int64
	max   int64
	freed chan struct{} // closed and replaced whenever bytes are released
}

func (b *budget) acquire(ctx context.Context, n int64, closing <-chan struct{}) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		ch := b.freed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-closing:
			return ErrClosed
		}
	}
}

func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// pqueue is the queue of one partition. Guarded by its sender's mu.
type pqueue struct {
	part     uint32
	msgs     []iggcon.IggyMessage
	slots    []slot
	head     int // msgs[head:] are queued
	bytes    int
	oldest   time.Time
	enq      uint64 // messages ever queued
	resolved uint64 // messages ever resolved; resolution is FIFO
}

func (q *pqueue) push(m iggcon.IggyMessage, s slot) {
	if q.head > 0 && q.head >= len(q.msgs)/2 {
		n := copy(q.msgs, q.msgs[q.head:])
		copy(q.slots, q.slots[q.head:])
		clear(q.msgs[n:])
		clear(q.slots[n:])
		q.msgs, q.slots, q.head = q.msgs[:n], q.slots[:n], 0
	}
	q.msgs = append(q.msgs, m)
	q.slots = append(q.slots, s)
	q.bytes += int(s.size)
	q.enq++
}

func (q *pqueue) full(c *pubConfig) bool {
	return len(q.msgs)-q.head >= c.batchMessages || q.bytes >= c.batchBytes
}

// sender owns a connection and the queues of the partitions it sends.
type sender struct {
	p      *Publisher
	k      *conn
	ctx    context.Context // cancelled by Publisher.halt
	cancel context.CancelFunc

	wake chan struct{} // cap 1

	mu       sync.Mutex
	queues   []*pqueue
	progress chan struct{} // closed and replaced when messages resolve
	flushing int
	closing  bool
	rr       int

	// The batch being sent and its request body; reused.
	bmsgs  []iggcon.IggyMessage
	bslots []slot
	frame  []byte
}

// sendOnce makes one attempt to send msgs to q's partition on c. In binary
// protocol 0.12.0 the attempt carries request number *req, fixed at the
// first attempt and reused by the next ones: the server recognises a
// retry of a batch it had appended (across reconnects, as the connection
// keeps its client id) and answers it without appending it again, so no
// tail scan is needed.
func (s *sender) sendOnce(c *session, q *pqueue, msgs []iggcon.IggyMessage, req *uint64) error {
	s.frame = encodeSend(s.frame, c.proto, s.p.head, q.part, msgs)
	if c.proto == wire.V012 {
		if *req == 0 {
			c.id.request++
			*req = c.id.request
		}
		c.pin = *req
		defer func() { c.pin = 0 }()
	}
	dup, err := c.send(s.p.t, q.part, s.frame)
	if err == nil && dup {
		s.p.log.Info("iggy: the broker had appended a batch whose send had no reply; not appended again",
			"partition", q.part, "messages", len(msgs))
	}
	return err
}

func (s *sender) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) run() {
	defer s.p.wg.Done()
	for {
		q := s.next()
		if q == nil {
			s.failAll()
			return
		}
		s.deliver(q)
		clear(s.bmsgs)
		clear(s.bslots)
		if cap(s.frame) > 4*s.p.cfg.batchBytes {
			s.frame = nil // a batch of one huge message: do not keep its buffer
		}
	}
}

// next waits for a partition whose batch is due and moves the batch into
// s.bmsgs / s.bslots. It returns nil when the publisher halts.
func (s *sender) next() *pqueue {
	cfg := &s.p.cfg
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-s.p.stop:
			return nil
		default:
		}
		s.mu.Lock()
		var now time.Time
		if cfg.linger > 0 {
			now = time.Now()
		}
		wait := time.Duration(-1)
		n := len(s.queues)
		for i := range n {
			q := s.queues[(s.rr+i)%n]
			if len(q.msgs) == q.head {
				continue
			}
			if cfg.linger == 0 || s.flushing > 0 || s.closing || q.full(cfg) || now.Sub(q.oldest) >= cfg.linger {
				s.rr = (s.rr + i + 1) % n
				s.take(q)
				if len(s.bmsgs) == 0 {
					continue // all withdrawn
				}
				s.mu.Unlock()
				return q
			}
			if w := cfg.linger - now.Sub(q.oldest); wait < 0 || w < wait {
				wait = w
			}
		}
		s.mu.Unlock()
		var tc <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-s.wake:
		case <-tc:
		case <-s.p.stop:
			return nil
		}
	}
}

// take moves the head batch of q into s.bmsgs / s.bslots, resolving
// withdrawn messages on the way. It must hold mu.
func (s *sender) take(q *pqueue) {
	cfg := &s.p.cfg
	s.bmsgs, s.bslots = s.bmsgs[:0], s.bslots[:0]
	bytes, skipped, freed := 0, 0, int64(0)
	i := q.head
	now := time.Now()
	for ; i < len(q.msgs) && len(s.bmsgs) < cfg.batchMessages; i++ {
		sl := q.slots[i]
		if sl.withdrawn() || sl.expired(now) || sl.w != nil && sl.w.failedBefore(q.part) {
			switch {
			case sl.withdrawn():
				sl.resolve(errWithdrawn)
			case sl.expired(now):
				sl.resolve(errPastSendDeadline)
			default:
				sl.resolve(errEarlierFailed)
			}
			skipped++
			freed += int64(sl.size)
			q.bytes -= int(sl.size)
			continue
		}
		if len(s.bmsgs) > 0 && bytes+int(sl.size) > cfg.batchBytes {
			break
		}
		s.bmsgs = append(s.bmsgs, q.msgs[i])
		s.bslots = append(s.bslots, sl)
		bytes += int(sl.size)
		q.bytes -= int(sl.size)
	}
	clear(q.msgs[q.head:i])
	clear(q.slots[q.head:i])
	q.head = i
	if q.head == len(q.msgs) {
		q.msgs, q.slots, q.head = q.msgs[:0], q.slots[:0], 0
	} else {
		q.oldest = time.Now() // the rest waits a fresh linger at most
	}
	if skipped > 0 {
		q.resolved += uint64(skipped)
		s.p.budget.release(freed)
		s.broadcast()
	}
}

var errWithdrawn = errors.New("strand: iggy: withdrawn by its publisher before it was sent")

// errEarlierFailed resolves a message of a Send (Sink.Send, Publisher.Send)
// not sent because an earlier message of the same call to the same
// partition failed.
var errEarlierFailed = errors.New("strand: iggy: not sent: an earlier message of the same send to this partition failed")

// broadcast wakes Flush waiters. It must hold mu.
func (s *sender) broadcast() {
	close(s.progress)
	s.progress = make(chan struct{})
}

// deliver sends the batch in s.bmsgs to q's partition until it is accepted,
// fails for good, or the publisher halts.
func (s *sender) deliver(q *pqueue) {
	p := s.p
	msgs := s.bmsgs
	start := time.Now()
	var req uint64 // 0.10 request number of this batch, fixed at its first attempt
	uncertain := false
	var sentFrom string // local address of the socket of an unanswered send
	for attempt := 0; ; attempt++ {
		var err error
		landed := false
		if uncertain && req == 0 {
			landed, err = s.landed(q, msgs, sentFrom)
		}
		if err == nil && !landed {
			var local string
			err = s.k.callOnce(s.ctx, func(c *session) error {
				local = c.nc.LocalAddr().String()
				if p.slog != nil { // sessionlog.go: on disk before anything is sent on it
					if err := p.slog.record(local); err != nil {
						return err
					}
				}
				if err := s.beforeWrite(c); err != nil {
					return err
				}
				return s.sendOnce(c, q, msgs, &req)
			})
			var le *sessionLogError
			if errors.As(err, &le) {
				s.fail(q, strerr.Errorf("strand: iggy: send %d messages to %s partition %d: %w", len(msgs), p.t, q.part, err))
				return
			}
			if err != nil && !notSent(err) {
				uncertain, sentFrom = true, local
			}
		}
		if err == nil {
			s.finish(q, nil)
			return
		}
		where := fmt.Sprintf("iggy: send %d messages to %s partition %d", len(msgs), p.t, q.part)
		if s.ctx.Err() != nil || errors.Is(err, ErrClosed) {
			if uncertain {
				s.finish(q, fmt.Errorf("%s: %w before the broker confirmed them; they may have been delivered", where, ErrClosed))
			} else {
				s.finish(q, fmt.Errorf("%s: %w before they were sent", where, ErrClosed))
			}
			return
		}
		if !transient(err) {
			s.fail(q, fmt.Errorf("%s: %w", where, err))
			return
		}
		if s.pastDeadline(time.Now()) {
			// Nothing of the batch may be written any more (sendlease.go),
			// so a retry cannot succeed: resolve it, once it is known not
			// to have landed, instead of retrying for good (the batch kept
			// its partition's dead letters from ever leaving).
			if uncertain {
				if ok, lerr := s.landed(q, msgs, sentFrom); lerr == nil && ok {
					s.finish(q, nil)
					return
				}
			}
			s.finish(q, fmt.Errorf("%s: %w", where, errPastSendDeadline))
			return
		}
		if d := p.cfg.deliveryTimeout; d > 0 && time.Since(start) >= d {
			if uncertain {
				// Giving up must not leave a request that may still land
				// (Sink.Sent trusts a failed batch to be absent): wait
				// for its session to be gone and look once more.
				if ok, lerr := s.landed(q, msgs, sentFrom); lerr == nil && ok {
					s.finish(q, nil)
					return
				}
			}
			s.fail(q, fmt.Errorf("%s: gave up after %v of retries: %w", where, d, err))
			return
		}
		lvl := "iggy: send failed; retrying"
		if attempt == 0 {
			p.log.Warn(lvl, "partition", q.part, "messages", len(msgs), "err", err)
		} else {
			p.log.Debug(lvl, "partition", q.part, "attempt", attempt+1, "err", err)
		}
		sleep(s.ctx, p.cl.cfg.backoff.delay(attempt), nil)
	}
}

// landed reports whether the batch msgs, whose send had an unknown outcome,
// is in q's partition: it looks for the batch's last message id among the
// partition's last messages. The batch was appended atomically or not at all.
//
// The server may still be working on the unanswered request: it handles a
// connection's requests one by one and notices the closed socket only
// afterwards. So first wait until the server no longer lists the session
// that sent it (from is its local address); then the request has been
// applied or dropped for good.
func (s *sender) landed(q *pqueue, msgs []iggcon.IggyMessage, from string) (bool, error) {
	if err := s.k.awaitSessionGone(s.ctx, from); err != nil {
		return false, err
	}
	tail, err := tailMessages(s.ctx, s.k, s.p.t, q.part, len(msgs)+s.p.cfg.resendWindow)
	if err != nil {
		return false, err
	}
	if at := findRun(tail, msgs); at >= 0 {
		s.p.log.Info("iggy: a batch whose send had no reply was found in the log; not sending it again",
			"partition", q.part, "offset", tail[at].Header.Offset, "messages", len(msgs))
		return true, nil
	}
	return false, nil
}

// findRun returns the index in log of the last occurrence of msgs as a
// contiguous run with the same ids in the same order, or -1. Matching the
// whole run, not one id, keeps a repeated deterministic id (an event a
// previous run published) from passing for a batch that is not there.
func findRun(log, msgs []iggcon.IggyMessage) int {
	n := len(msgs)
outer:
	for i := len(log) - n; i >= 0; i-- {
		for j := range n {
			if log[i+j].Header.Id != msgs[j].Header.Id {
				continue outer
			}
		}
		return i
	}
	return -1
}

// finish resolves the batch in flight (s.bslots) with err.
func (s *sender) finish(q *pqueue, err error) { s.resolveAll(q, s.bslots, err) }

// fail fails the batch in flight for good, and with it every event queued
// behind it when the failure happened (not those published after its
// publisher learned of it), so that no later event of a key lands after a
// lost one without its publisher being told.
func (s *sender) fail(q *pqueue, err error) {
	rest := s.detach(q)
	s.finish(q, err)
	s.resolveAll(q, rest, fmt.Errorf("%w (an earlier batch of this partition failed)", err))
}

// failQueue fails everything queued for q with err.
func (s *sender) failQueue(q *pqueue, err error) {
	s.resolveAll(q, s.detach(q), err)
}

// detach empties q and returns what it held.
func (s *sender) detach(q *pqueue) []slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	slots := append([]slot(nil), q.slots[q.head:]...)
	clear(q.msgs)
	clear(q.slots)
	q.msgs, q.slots, q.head, q.bytes = q.msgs[:0], q.slots[:0], 0, 0
	return slots
}

// resolveAll resolves slots of q (detached, or the batch in flight) with
// err, frees their budget and wakes whoever waits for q.
func (s *sender) resolveAll(q *pqueue, slots []slot, err error) {
	var freed int64
	for _, sl := range slots {
		if err != nil && sl.w != nil {
			sl.w.failPart(q.part)
		}
		sl.resolve(err)
		freed += int64(sl.size)
	}
	s.p.budget.release(freed)
	s.mu.Lock()
	q.resolved += uint64(len(slots))
	s.broadcast()
	s.mu.Unlock()
}

// failAll fails every queued message with ErrClosed, when the publisher
// halts.
func (s *sender) failAll() {
	s.mu.Lock()
	s.closing = true
	queues := append([]*pqueue(nil), s.queues...)
	s.mu.Unlock()
	for _, q := range queues {
		s.failQueue(q, strerr.Errorf("strand: iggy: publish to %s partition %d: %w before it was sent", s.p.t, q.part, ErrClosed))
	}
}
