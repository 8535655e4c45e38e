package iggy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

// SourceOption configures a Source.
type SourceOption interface {
	apply(*srcConfig) error
}

// sourceOptionFunc adapts a function to SourceOption.
type sourceOptionFunc func(*srcConfig) error

func (f sourceOptionFunc) apply(c *srcConfig) error { return f(c) }

type srcConfig struct {
	pollBatch        int
	idleMin, idleMax time.Duration
	linger           time.Duration
	consumer         string
	foreign          bool // WithForeign (foreign.go)
}

func defaultSrcConfig() srcConfig {
	return srcConfig{pollBatch: 4096, idleMin: time.Millisecond, idleMax: 50 * time.Millisecond, consumer: "strand"}
}

// WithPollBatch caps the messages one poll request asks for (default 4096);
// Poll's max argument caps it further.
func WithPollBatch(n int) SourceOption {
	return sourceOptionFunc(func(c *srcConfig) error {
		if n <= 0 {
			return fmt.Errorf("strand: iggy.WithPollBatch: %d, want at least 1", n)
		}
		c.pollBatch = n
		return nil
	})
}

// maxPollLinger bounds WithPollLinger.
const maxPollLinger = time.Second

// pollLingerStep is how long a lingering reader waits between the polls of
// one batch (at most the linger).
const pollLingerStep = time.Millisecond

// WithPollLinger makes a reader whose poll returned records but fewer than
// it asked for (it reached the end of the partition) wait for the partition
// to grow and poll again for the rest, every millisecond for up to d in
// all, as long as each poll adds records (default 0: deliver what the first
// poll returned). A consumer that reads right behind a busy producer (a
// second stage reading its first stage's output) then gets batches as large
// as one that reads a backlog, and commits as rarely, for at most d of
// latency per batch; under light load a batch waits one millisecond more
// (the poll that finds nothing new). d must be 0..1s.
func WithPollLinger(d time.Duration) SourceOption {
	return sourceOptionFunc(func(c *srcConfig) error {
		if d < 0 || d > maxPollLinger {
			return fmt.Errorf("strand: iggy.WithPollLinger: %v, want 0..%v", d, maxPollLinger)
		}
		c.linger = d
		return nil
	})
}

// WithIdleBackoff sets how long a reader waits before polling again after
// an empty poll: min after the first, doubling up to max while the
// partition stays empty (default 1ms to 50ms). The server has no long poll,
// so this trades the latency of a new event against idle requests.
func WithIdleBackoff(minWait, maxWait time.Duration) SourceOption {
	return sourceOptionFunc(func(c *srcConfig) error {
		if minWait <= 0 || maxWait < minWait {
			return fmt.Errorf("strand: iggy.WithIdleBackoff: %v..%v, want 0 < min <= max", minWait, maxWait)
		}
		c.idleMin, c.idleMax = minWait, maxWait
		return nil
	})
}

// WithConsumer names the Iggy consumer under which Advise stores offsets
// (default "strand"), so that monitoring tools show the processor's
// progress under that name. Give each processor its own. Names that start
// with "strand-bookmark:" are refused: they hold bookmarks
// (Client.SetBookmark).
func WithConsumer(name string) SourceOption {
	return sourceOptionFunc(func(c *srcConfig) error {
		if name == "" || len(name) > 255 {
			return fmt.Errorf("strand: iggy.WithConsumer: name of %d bytes, want 1..255", len(name))
		}
		if reservedConsumer(name) {
			return fmt.Errorf("strand: iggy.WithConsumer: name %q: the prefix %q is reserved for bookmarks", name, bookmarkPrefix)
		}
		c.consumer = name
		return nil
	})
}

// Source is one Iggy topic read as a connector.Source: each partition is read
// by its own Reader on its own connection, from an offset the caller owns
// (the processor's checkpoint). It polls with the Offset strategy and
// auto-commit off; Iggy's stored consumer offsets are only written by
// Reader.Advise, for monitoring.
//
// A Source holds no connection of its own and is safe for concurrent use.
type Source struct {
	cl       *Client
	t        topicRef
	cfg      srcConfig
	consumer iggcon.Consumer
	log      *slog.Logger
}

var (
	_ connector.Source          = (*Source)(nil)
	_ connector.PartitionReader = (*Reader)(nil)
)

// NewSource returns a Source for stream/topic. It does no I/O: a missing
// topic shows at Partitions or Open.
func NewSource(c *Client, stream, topic string, opts ...SourceOption) (*Source, error) {
	t, err := newTopicRef(stream, topic)
	if err != nil {
		return nil, err
	}
	cfg := defaultSrcConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	cid, err := iggcon.NewIdentifier(cfg.consumer)
	if err != nil {
		return nil, strerr.Errorf("strand: iggy: consumer name %q: must be 1..255 bytes: %w", cfg.consumer, err)
	}
	return &Source{
		cl:       c,
		t:        t,
		cfg:      cfg,
		consumer: iggcon.NewSingleConsumer(cid),
		log:      c.cfg.log.With("stream", t.stream, "topic", t.topic),
	}, nil
}

// Name returns "stream/topic", stable across restarts as checkpoint keys
// need.
func (s *Source) Name() string { return s.t.String() }

// Partitions returns the topic's partition count (one round trip).
func (s *Source) Partitions(ctx context.Context) (uint32, error) {
	d, err := topicDetails(ctx, s.cl.admin, s.t)
	if err != nil {
		return 0, err
	}
	return d.PartitionsCount, nil
}

// Open returns a Reader of one partition whose first record has offset from.
// It checks that the partition exists (one round trip on the client's
// connection), so a missing topic or partition fails here; the reader's own
// connection is made by its first Poll, which retries until it succeeds.
func (s *Source) Open(ctx context.Context, partition uint32, from uint64) (connector.PartitionReader, error) {
	d, err := topicDetails(ctx, s.cl.admin, s.t)
	if err != nil {
		return nil, strerr.Errorf("strand: iggy: open %s partition %d: %w", s.t, partition, err)
	}
	if partition >= d.PartitionsCount {
		return nil, strerr.Errorf("strand: iggy: open %s partition %d: the topic has partitions 0..%d: %w",
			s.t, partition, int64(d.PartitionsCount)-1, ierror.ErrPartitionNotFound)
	}
	k, err := s.cl.openConn(fmt.Sprintf("reader %s partition %d", s.t, partition))
	if err != nil {
		return nil, strerr.Errorf("strand: iggy: open %s partition %d: %w", s.t, partition, err)
	}
	req, err := newPollRequest(s.consumer, s.t, partition)
	if err != nil {
		s.cl.closeConn(k)
		return nil, strerr.Errorf("strand: iggy: open %s partition %d: %w", s.t, partition, err)
	}
	r := &Reader{
		src:       s,
		k:         k,
		req:       req,
		dec:       fetchDecoder{t: s.t, partition: partition, foreign: s.cfg.foreign},
		partition: partition,
		next:      from,
		idle:      s.cfg.idleMin,
		log:       s.log.With("partition", partition),
	}
	return r, nil
}

// Reader reads one partition of a Source in offset order. Poll must be
// called from one goroutine at a time; Advise and Close may be called from
// any goroutine (Advise waits for a poll in flight, as they share the
// reader's connection).
type Reader struct {
	src       *Source
	k         *conn
	req       *pollRequest // reused: the request never leaves the reader
	dec       fetchDecoder
	partition uint32
	next      uint64 // offset of the next record to deliver; owned by Poll
	idle      time.Duration
	closed    atomic.Bool
	log       *slog.Logger
}

// Next returns the offset of the next record Poll will deliver. Like Poll,
// it belongs to the goroutine that polls.
func (r *Reader) Next() uint64 { return r.next }

// Poll returns the next records of the partition, at most max (at most the
// WithPollBatch size; max <= 0 means that size), waiting while the partition
// has nothing new. It retries lost connections and timeouts itself, with
// backoff, and resumes at the right offset. It returns an error only when
// ctx ends, the reader is closed (ErrClosed), or the failure is permanent:
// the topic or partition is gone (the SDK's sentinels), login is refused
// (ErrAuth), a reply is malformed (ErrProtocol), or the log no longer holds
// the next offset (ErrOffsetGap).
//
// Each record's strand headers are parsed; a record whose headers are
// missing or malformed is delivered with HeaderErr set. The records and
// their bytes belong to the caller: the payload and key alias one buffer per
// poll request that the reader never reuses. With WithPollLinger, one Poll
// may make several requests to fill its batch.
//
// The poll request is encoded and its reply decoded here (fetchdecode.go),
// on the SDK's connection, rather than by the SDK: one allocation for the
// reply and one for the records, instead of a message struct, a header
// struct and slice growth per message.
func (r *Reader) Poll(ctx context.Context, max int) ([]connector.Record, error) {
	s := r.src
	count := s.cfg.pollBatch
	if max > 0 && max < count {
		count = max
	}
	for attempt := 0; ; {
		if r.closed.Load() || r.k.closed.Load() {
			return nil, r.errf("%w", ErrClosed)
		}
		offset := r.next
		reply, err := r.poll(ctx, offset, count)
		if err != nil {
			switch {
			case r.closed.Load() || r.k.closed.Load() || errors.Is(err, ErrClosed):
				return nil, r.errf("%w", ErrClosed)
			case ctx.Err() != nil:
				return nil, r.errf("offset %d: %w", offset, ctx.Err())
			case !transient(err):
				return nil, r.errf("offset %d: %w", offset, err)
			}
			if attempt == 0 {
				r.log.Warn("iggy: poll failed; retrying", "offset", offset, "err", err)
			} else {
				r.log.Debug("iggy: poll failed; retrying", "offset", offset, "attempt", attempt+1, "err", err)
			}
			if !sleep(ctx, s.cl.cfg.backoff.delay(attempt), r.k.life.Done()) {
				continue // the checks above report why
			}
			attempt++
			continue
		}
		attempt = 0
		recs, _, err := r.dec.decode(reply, offset)
		if err != nil {
			return nil, r.errf("offset %d: %w", offset, err)
		}
		if len(recs) == 0 {
			if !sleep(ctx, r.idle, r.k.life.Done()) {
				continue
			}
			r.idle = min(r.idle*2, s.cfg.idleMax)
			continue
		}
		r.idle = s.cfg.idleMin
		r.next = offset + uint64(len(recs))
		if s.cfg.linger > 0 && len(recs) < count {
			recs = r.linger(ctx, recs, count)
		}
		return recs, nil
	}
}

// linger polls for more records after a poll that reached the end of the
// partition, while each poll adds some, until the batch holds count records
// or the linger time is up (WithPollLinger). It returns recs with what it
// got appended; any failure just ends the batch (the next Poll meets it
// again and handles it).
func (r *Reader) linger(ctx context.Context, recs []connector.Record, count int) []connector.Record {
	s := r.src
	deadline := time.Now().Add(s.cfg.linger)
	grown := false
	for len(recs) < count {
		wait := min(pollLingerStep, time.Until(deadline))
		if wait <= 0 || !sleep(ctx, wait, r.k.life.Done()) || r.closed.Load() {
			break
		}
		offset := r.next
		reply, err := r.poll(ctx, offset, count-len(recs))
		if err != nil {
			break
		}
		if !grown && len(reply) > fetchPrefixSize {
			// Room for the whole batch, once: the replies to come are
			// decoded straight into it.
			recs, grown = slices.Grow(recs, count-len(recs)), true
		}
		before := len(recs)
		recs, _, err = r.dec.decodeAppend(recs, reply, offset)
		if err != nil || len(recs) == before {
			break // the partition stopped growing, or the next Poll reports why
		}
		r.next = offset + uint64(len(recs)-before)
	}
	return recs
}

// poll sends one poll for count records from offset and readies the
// decoder for the protocol the reply is in.
func (r *Reader) poll(ctx context.Context, offset uint64, count int) ([]byte, error) {
	var reply []byte
	err := r.k.call(ctx, func(s *session) error {
		var err error
		reply, err = s.do(wire.CodePollMessages, r.req.at(offset, uint32(count)), nil)
		r.dec.proto = s.proto
		return err
	})
	return reply, err
}

func (r *Reader) errf(format string, args ...any) error {
	return strerr.Errorf("strand: iggy: poll %s partition %d: "+format, append([]any{r.src.t, r.partition}, args...)...)
}

// Advise stores next-1 as the Iggy consumer offset of this partition for the
// consumer named by WithConsumer (Iggy's stored offset means "last
// consumed"): every record before next has been processed and committed by
// strand. It is for monitoring tools only; strand resumes from its own
// checkpoint. next == 0 stores nothing. It makes one attempt; a failure is
// returned and harmless to ignore.
func (r *Reader) Advise(ctx context.Context, next uint64) error {
	if next == 0 {
		return nil
	}
	s := r.src
	wc, err := wireConsumer(s.consumer)
	if err != nil {
		return strerr.Errorf("strand: iggy: advise %s consumer %q: %w", s.t, s.cfg.consumer, err)
	}
	err = r.k.call(ctx, func(c *session) error {
		return c.storeConsumerOffset(wc, s.t, r.partition, next-1)
	})
	if err != nil {
		return strerr.Errorf("strand: iggy: advise %s partition %d consumer %q offset %d: %w", s.t, r.partition, s.cfg.consumer, next-1, err)
	}
	return nil
}

// Close releases the reader's connection; a Poll in progress returns
// ErrClosed. Close is idempotent.
func (r *Reader) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.src.cl.closeConn(r.k)
	return nil
}
