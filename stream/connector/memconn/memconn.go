// Package memconn is an in-memory connector.Connector for tests: a broker
// of partitioned, append-only topics held in memory, whose sources, sinks
// and foreign sources behave as connectors/iggy's do on a broker (the
// connector conformance suite, package connectortest, checks that they do).
//
// A Broker holds topics by name. A test appends records to a topic's
// partitions directly (Topic.Append) or publishes messages to it through a
// sink (Topic.Send, the Broker's OpenSink), and reads back what was
// published (Topic.Messages). A Broker made WithManualDelivery keeps what is
// appended out of the readers' sight until the test releases it
// (Topic.Deliver), so that a test driver hands records out batch by batch
// (package topologytest does).
//
// For tests of failure handling a Topic fails polls (FailPolls) or sends
// (FailSends) on demand, hides one record from its readers (Hide), calls a
// function before every poll (OnPoll), and counts what its users did
// (Advised, Readers, Sends, SentChecks).
//
// Everything is safe for concurrent use. Records and messages handed out
// are copies: a caller may keep and change them.
//
// Option is an opaque interface made only by this package's With…
// functions (WithClock, WithManualDelivery); New refuses a bad value with
// an error naming the option.
package memconn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

// Broker is an in-memory broker of topics. It implements
// connector.Connector and connector.ForeignConnector.
type Broker struct {
	now    func() time.Time
	manual bool

	mu      sync.Mutex
	topics  map[string]*Topic
	created int // topics created so far: part of each topic's identity
}

var (
	_ connector.Connector        = (*Broker)(nil)
	_ connector.ForeignConnector = (*Broker)(nil)
	_ connector.Source           = (*Topic)(nil)
	_ connector.Sink             = (*Topic)(nil)
	_ connector.SentChecker      = (*Topic)(nil)
	_ connector.EndOffsetter     = (*Topic)(nil)
	_ connector.Identifier       = (*Topic)(nil)
)

// Option configures a Broker.
type Option interface {
	apply(*Broker) error
}

// optionFunc adapts a function to Option.
type optionFunc func(*Broker) error

func (f optionFunc) apply(c *Broker) error { return f(c) }

// WithClock sets the clock that stamps appended records (Record.Timestamp)
// that carry no timestamp of their own; the default is time.Now. A nil
// clock is refused.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(b *Broker) error {
		if now == nil {
			return errors.New("strand: memconn.WithClock: nil clock; pass a function returning the time")
		}
		b.now = now
		return nil
	})
}

// WithManualDelivery keeps records appended to the broker's topics (by
// Append or by a sink) out of their readers' sight until Topic.Deliver
// lets them through; end offsets (Topic.EndOffsets) count released
// records only, as a broker counts what its producers have published. The
// default releases every record when it is appended.
func WithManualDelivery() Option {
	return optionFunc(func(b *Broker) error {
		b.manual = true
		return nil
	})
}

// New returns an empty broker, or an error naming an option that refused
// its value.
func New(opts ...Option) (*Broker, error) {
	b := &Broker{now: time.Now, topics: map[string]*Topic{}}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// NewTopic returns a topic of partitions partitions (at least 1) on a
// broker of its own with default options: a source and a sink in one value
// for tests that need no more. It panics on 0 partitions, a programming
// error of the test.
func NewTopic(name string, partitions uint32) *Topic {
	b, _ := New()
	t, err := b.CreateTopic(name, partitions)
	if err != nil {
		panic(err)
	}
	return t
}

// CreateTopic creates topic name with partitions partitions, numbered
// 0..partitions-1. A topic created again after DeleteTopic is another log:
// its identity (Topic.Identity) differs. An existing topic, an empty name
// or no partitions is an error.
func (b *Broker) CreateTopic(name string, partitions uint32) (*Topic, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.createLocked(name, partitions)
}

func (b *Broker) createLocked(name string, partitions uint32) (*Topic, error) {
	switch {
	case name == "":
		return nil, errors.New("strand: memconn: a topic needs a name")
	case partitions == 0:
		return nil, fmt.Errorf("strand: memconn: topic %q: a topic needs at least one partition", name)
	case b.topics[name] != nil:
		return nil, fmt.Errorf("strand: memconn: topic %q exists already", name)
	}
	b.created++
	t := &Topic{b: b, name: name, identity: fmt.Sprintf("memconn topic %q #%d", name, b.created), ids: map[[16]byte]bool{}}
	for range partitions {
		t.parts = append(t.parts, &partition{wake: make(chan struct{})})
	}
	b.topics[name] = t
	return t, nil
}

// DeleteTopic deletes topic name: readers of it fail their next poll, and
// a topic created later under the name is another log. A missing topic is
// an error.
func (b *Broker) DeleteTopic(name string) error {
	b.mu.Lock()
	t := b.topics[name]
	delete(b.topics, name)
	b.mu.Unlock()
	if t == nil {
		return fmt.Errorf("strand: memconn: no topic %q to delete", name)
	}
	for _, p := range t.parts {
		p.mu.Lock()
		p.deleted = true
		p.wakeLocked()
		p.mu.Unlock()
	}
	return nil
}

// Topic returns topic name, or nil when there is none.
func (b *Broker) Topic(name string) *Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.topics[name]
}

// Topics returns the names of the broker's topics, sorted.
func (b *Broker) Topics() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.topics))
	for n := range b.topics {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// OpenSource returns topic, which must exist: see connector.Connector.
func (b *Broker) OpenSource(_ context.Context, topic string) (connector.Source, error) {
	if t := b.Topic(topic); t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("strand: memconn: no source topic %q", topic)
}

// OpenForeignSource returns topic, which must exist, as a foreign source:
// its readers deliver every record with Raw set and no strand headers
// parsed (see connector.ForeignConnector).
func (b *Broker) OpenForeignSource(_ context.Context, topic string) (connector.Source, error) {
	if t := b.Topic(topic); t != nil {
		return foreignSource{t}, nil
	}
	return nil, fmt.Errorf("strand: memconn: no foreign source topic %q", topic)
}

// OpenSink returns topic as a sink, creating it with partitions partitions
// when it does not exist (see connector.Connector).
func (b *Broker) OpenSink(_ context.Context, topic string, partitions uint32) (connector.Sink, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[topic]; t != nil {
		return t, nil
	}
	return b.createLocked(topic, partitions)
}

// Topic is one topic of a Broker: a connector.Source (with end offsets and
// an identity), and a connector.Sink with connector.SentChecker.
type Topic struct {
	b        *Broker
	name     string
	identity string
	parts    []*partition

	mu         sync.Mutex
	msgs       []connector.Message // sent through the sink, in order
	ids        map[[16]byte]bool
	failSends  int // fail this many more Sends
	failPrefix int // ... after accepting this many of their messages
	sends      int
	checks     int
	opened     int
	closed     int
	pollErr    func(partition uint32, from uint64) error
	onPoll     func(partition uint32, from uint64)
}

// partition is one partition's log.
type partition struct {
	mu       sync.Mutex
	recs     []connector.Record
	raws     []*connector.RawMessage // per record: its message as sent, for foreign readers
	released int
	floor    uint64 // the least end reported (SetEndFloor)
	advised  uint64
	hidden   map[uint64]bool
	start    uint64 // records below were removed by Trim
	deleted  bool
	wake     chan struct{} // closed and replaced when released grows
}

func (p *partition) wakeLocked() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// Name returns the topic's name.
func (t *Topic) Name() string { return t.name }

// Partitions returns the topic's partition count.
func (t *Topic) Partitions(context.Context) (uint32, error) { return uint32(len(t.parts)), nil }

// Identity returns a name made when the topic was created, different for
// every topic the broker creates: see connector.Identifier.
func (t *Topic) Identity(context.Context) (string, error) {
	if t.deleted() {
		return "", fmt.Errorf("strand: memconn: topic %q was deleted", t.name)
	}
	return t.identity, nil
}

func (t *Topic) deleted() bool {
	p := t.parts[0]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deleted
}

func (t *Topic) part(p uint32) (*partition, error) {
	if int(p) >= len(t.parts) {
		return nil, fmt.Errorf("strand: memconn: topic %q has no partition %d (it has %d)", t.name, p, len(t.parts))
	}
	return t.parts[p], nil
}

// Append appends r to partition p and returns its offset. The broker sets
// r.Partition and r.Offset, and r.Timestamp when it is 0 (from the
// broker's clock). The record is copied. A partition the topic does not
// have is an error.
func (t *Topic) Append(p uint32, r connector.Record) (uint64, error) {
	pt, err := t.part(p)
	if err != nil {
		return 0, err
	}
	r = cloneRecord(r)
	r.Partition = p
	if r.Timestamp == 0 {
		r.Timestamp = uint64(t.b.now().UnixMicro())
	}
	return pt.append(r, nil, !t.b.manual), nil
}

func (pt *partition) append(r connector.Record, raw *connector.RawMessage, release bool) uint64 {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	r.Offset = uint64(len(pt.recs))
	pt.recs = append(pt.recs, r)
	pt.raws = append(pt.raws, raw)
	if release {
		pt.released = len(pt.recs)
		pt.wakeLocked()
	}
	return r.Offset
}

// Deliver lets readers see up to n more records of partition p (on a
// broker made WithManualDelivery) and returns how many it let through.
func (t *Topic) Deliver(p uint32, n int) int {
	pt, err := t.part(p)
	if err != nil {
		return 0
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	k := min(n, len(pt.recs)-pt.released)
	if k > 0 {
		pt.released += k
		pt.wakeLocked()
	}
	return k
}

// Len returns how many records partition p holds and how many of them its
// readers may see.
func (t *Topic) Len(p uint32) (appended, released int) {
	pt, err := t.part(p)
	if err != nil {
		return 0, 0
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return len(pt.recs), pt.released
}

// Records returns copies of every record of partition p that Trim did not
// remove, released or not.
func (t *Topic) Records(p uint32) []connector.Record {
	pt, err := t.part(p)
	if err != nil {
		return nil
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	out := make([]connector.Record, 0, uint64(len(pt.recs))-pt.start)
	for _, r := range pt.recs[pt.start:] {
		out = append(out, cloneRecord(r))
	}
	return out
}

// maxOffset is max for offsets (Poll's parameter max shadows the builtin).
func maxOffset(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// SetEndFloor makes EndOffsets report at least next for partition p: a
// test driver that reopens a store over new in-memory topics tells the
// App that the log it resumes reaches at least its checkpoint.
func (t *Topic) SetEndFloor(p uint32, next uint64) {
	if pt, err := t.part(p); err == nil {
		pt.mu.Lock()
		pt.floor = next
		pt.mu.Unlock()
	}
}

// EndOffsets returns, per partition, the offset after the last record its
// readers may see (at least the floor set by SetEndFloor): see
// connector.EndOffsetter. A deleted topic is an error.
func (t *Topic) EndOffsets(context.Context) ([]uint64, error) {
	out := make([]uint64, len(t.parts))
	for i, pt := range t.parts {
		pt.mu.Lock()
		end, del := max(uint64(pt.released), pt.floor), pt.deleted
		out[i] = end
		pt.mu.Unlock()
		if del {
			return nil, fmt.Errorf("strand: memconn: topic %q was deleted", t.name)
		}
	}
	return out, nil
}

// Trim removes the records of partition p below offset before, as a
// broker's retention does: readers skip them (a poll from an older offset
// starts at before, or at the first record released after it), Records
// no longer returns them and StartOffsets reports before (at most the
// partition's end). Trimming less than an earlier Trim does nothing.
func (t *Topic) Trim(p uint32, before uint64) {
	if pt, err := t.part(p); err == nil {
		pt.mu.Lock()
		pt.start = max(pt.start, min(before, uint64(len(pt.recs))))
		pt.mu.Unlock()
	}
}

var _ connector.StartOffsetter = (*Topic)(nil)

// StartOffsets returns, per partition, the offset of its oldest record not
// removed by Trim: see connector.StartOffsetter. A deleted topic is an
// error.
func (t *Topic) StartOffsets(context.Context) ([]uint64, error) {
	out := make([]uint64, len(t.parts))
	for i, pt := range t.parts {
		pt.mu.Lock()
		out[i] = pt.start
		del := pt.deleted
		pt.mu.Unlock()
		if del {
			return nil, fmt.Errorf("strand: memconn: topic %q was deleted", t.name)
		}
	}
	return out, nil
}

// Open returns a reader of partition p whose first record has offset from:
// see connector.Source.
func (t *Topic) Open(_ context.Context, p uint32, from uint64) (connector.PartitionReader, error) {
	return t.open(p, from, false)
}

func (t *Topic) open(p uint32, from uint64, foreign bool) (connector.PartitionReader, error) {
	pt, err := t.part(p)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.opened++
	t.mu.Unlock()
	return &reader{t: t, pt: pt, p: p, next: from, foreign: foreign, closed: make(chan struct{})}, nil
}

// FailPolls makes every poll call f with the partition and the offset the
// poll starts at (under the topic's lock: f must not call the topic) and
// fail with the error f returns, when it is not nil; nil f stops it.
func (t *Topic) FailPolls(f func(partition uint32, from uint64) error) {
	t.mu.Lock()
	t.pollErr = f
	t.mu.Unlock()
}

// OnPoll makes every poll call f first with the partition and the offset
// it starts at; nil f stops it.
func (t *Topic) OnPoll(f func(partition uint32, from uint64)) {
	t.mu.Lock()
	t.onPoll = f
	t.mu.Unlock()
}

// Hide makes readers of partition p skip the record at offset, as if the
// broker had lost it (a gap in the offsets a poll returns).
func (t *Topic) Hide(p uint32, offset uint64) {
	if pt, err := t.part(p); err == nil {
		pt.mu.Lock()
		if pt.hidden == nil {
			pt.hidden = map[uint64]bool{}
		}
		pt.hidden[offset] = true
		pt.mu.Unlock()
	}
}

// Advised returns the offset last advised (PartitionReader.Advise) for
// partition p, 0 when none was.
func (t *Topic) Advised(p uint32) uint64 {
	pt, err := t.part(p)
	if err != nil {
		return 0
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.advised
}

// Readers returns how many readers were opened and how many closed.
func (t *Topic) Readers() (opened, closed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.opened, t.closed
}

type reader struct {
	t       *Topic
	pt      *partition
	p       uint32
	foreign bool

	mu   sync.Mutex // serializes polls
	next uint64

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: a waiting poll returns
}

// Poll waits until a record is released, ctx is done or the reader is
// closed: see connector.PartitionReader.
func (r *reader) Poll(ctx context.Context, max int) ([]connector.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if max <= 0 {
		return nil, fmt.Errorf("strand: memconn: poll of %q partition %d: max %d, want at least 1", r.t.name, r.p, max)
	}
	r.t.mu.Lock()
	onPoll, pollErr := r.t.onPoll, r.t.pollErr
	r.t.mu.Unlock()
	if onPoll != nil {
		onPoll(r.p, r.next)
	}
	for {
		select {
		case <-r.closed:
			return nil, fmt.Errorf("strand: memconn: poll of %q partition %d: reader closed", r.t.name, r.p)
		default:
		}
		if pollErr != nil {
			r.t.mu.Lock()
			err := pollErr(r.p, r.next)
			r.t.mu.Unlock()
			if err != nil {
				return nil, err
			}
		}
		pt := r.pt
		pt.mu.Lock()
		if pt.deleted {
			pt.mu.Unlock()
			return nil, fmt.Errorf("strand: memconn: poll of %q partition %d: the topic was deleted", r.t.name, r.p)
		}
		r.next = maxOffset(r.next, pt.start) // records removed by Trim
		if r.next < uint64(pt.released) {
			end := min(r.next+uint64(max), uint64(pt.released))
			out := make([]connector.Record, 0, end-r.next)
			for i := r.next; i < end; i++ {
				if pt.hidden[i] {
					continue
				}
				rec := cloneRecord(pt.recs[i])
				if r.foreign {
					rec.Headers, rec.HeaderErr = connector.Headers{}, nil
					switch {
					case rec.Raw != nil:
					case pt.raws[i] != nil:
						rec.Raw = pt.raws[i].Clone()
					default:
						rec.Raw = &connector.RawMessage{Headers: []connector.Field{}}
					}
				}
				out = append(out, rec)
			}
			r.next = end
			pt.mu.Unlock()
			if len(out) == 0 {
				continue // every record was hidden
			}
			return out, nil
		}
		wake := pt.wake
		pt.mu.Unlock()
		select {
		case <-wake:
		case <-r.closed:
		case <-ctx.Done():
			return nil, strerr.Errorf("strand: memconn: poll of %q partition %d: %w", r.t.name, r.p, ctx.Err())
		}
	}
}

// Advise records next (Topic.Advised).
func (r *reader) Advise(_ context.Context, next uint64) error {
	r.pt.mu.Lock()
	r.pt.advised = next
	r.pt.mu.Unlock()
	return nil
}

// Close closes the reader, ending a poll that waits; closing it again
// does nothing.
func (r *reader) Close() error {
	r.closeOnce.Do(func() {
		close(r.closed)
		r.t.mu.Lock()
		r.t.closed++
		r.t.mu.Unlock()
	})
	return nil
}

// foreignSource is a Topic read as a foreign source.
type foreignSource struct{ *Topic }

func (f foreignSource) Open(_ context.Context, p uint32, from uint64) (connector.PartitionReader, error) {
	return f.open(p, from, true)
}

// FailSends makes the next n Sends fail after accepting the first prefix
// messages of each (as a broker that went away mid-batch).
func (t *Topic) FailSends(n, prefix int) {
	t.mu.Lock()
	t.failSends, t.failPrefix = n, prefix
	t.mu.Unlock()
}

// Send appends msgs, in order, to the partition of each message's key
// (connector.PartitionOf) or to m.Partition when m.HasPartition: see
// connector.Sink. Each becomes a record whose strand headers are parsed
// from the message's header fields (HeaderErr when they are missing or
// malformed), and Messages returns it as sent. A message with a key of
// other than 1..255 bytes, or for a partition the topic does not have,
// fails the whole call before anything is sent (as connectors/iggy's Sink).
func (t *Topic) Send(ctx context.Context, msgs []connector.Message) error {
	if err := ctx.Err(); err != nil {
		return strerr.Errorf("strand: memconn: send to %q: %w", t.name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sends++
	n := len(msgs)
	var failed error
	if t.failSends > 0 {
		t.failSends--
		n = min(t.failPrefix, len(msgs))
		failed = fmt.Errorf("strand: memconn: send to %q: injected failure after %d of %d messages", t.name, n, len(msgs))
	}
	parts := make([]uint32, len(msgs))
	for i, m := range msgs {
		if len(m.Key) == 0 || len(m.Key) > connector.MaxKeyLen {
			return fmt.Errorf("strand: memconn: send to %q: message %d has a key of %d bytes; want 1..%d", t.name, i, len(m.Key), connector.MaxKeyLen)
		}
		parts[i] = connector.PartitionOf(m.Key, uint32(len(t.parts)))
		if m.HasPartition {
			if int(m.Partition) >= len(t.parts) {
				return fmt.Errorf("strand: memconn: send to %q: message %d is for partition %d; the topic has %d", t.name, i, m.Partition, len(t.parts))
			}
			parts[i] = m.Partition
		}
	}
	for i, m := range msgs[:n] {
		m = cloneMessage(m)
		t.msgs = append(t.msgs, m)
		if m.ID != [16]byte{} {
			t.ids[m.ID] = true
		}
		r := RecordOf(m)
		r.Partition = parts[i]
		r.Timestamp = uint64(t.b.now().UnixMicro())
		t.parts[parts[i]].append(r, &connector.RawMessage{ID: m.ID, Headers: m.Headers}, !t.b.manual)
	}
	return failed
}

// Sent reports which of msgs were sent to the topic, by Message.ID: see
// connector.SentChecker.
func (t *Topic) Sent(ctx context.Context, msgs []connector.Message) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, strerr.Errorf("strand: memconn: sent check of %q: %w", t.name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checks++
	out := make([]bool, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID != [16]byte{} && t.ids[m.ID]
	}
	return out, nil
}

// Messages returns copies of the messages sent to the topic, in the order
// they were accepted.
func (t *Topic) Messages() []connector.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]connector.Message, len(t.msgs))
	for i, m := range t.msgs {
		out[i] = cloneMessage(m)
	}
	return out
}

// Sends returns how many times Send was called, and SentChecks how many
// times Sent was.
func (t *Topic) Sends() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sends
}

// SentChecks returns how many times Sent was called.
func (t *Topic) SentChecks() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checks
}

// RecordOf returns the record a strand source delivers for m, without its
// position: its payload, and its strand headers parsed from m's header
// fields (HeaderErr when they are missing or malformed). It aliases m's
// bytes.
func RecordOf(m connector.Message) connector.Record {
	var key, typ, props, seq, tp, origin []byte
	for _, f := range m.Headers {
		switch f.Name {
		case connector.HeaderKey:
			key = f.Value
		case connector.HeaderType:
			typ = f.Value
		case connector.HeaderProps:
			props = f.Value
		case connector.HeaderSeq:
			seq = f.Value
		case connector.HeaderTraceParent:
			tp = f.Value
		case connector.HeaderOrigin:
			origin = f.Value
		}
	}
	r := connector.Record{Payload: m.Payload}
	h, err := connector.ParseHeaders(key, typ, props, seq)
	if err != nil {
		r.HeaderErr = err
		return r
	}
	h.TraceParent, h.Origin = tp, origin
	r.Headers = h
	return r
}

func cloneRecord(r connector.Record) connector.Record {
	r.Headers.Key = slices.Clone(r.Headers.Key)
	r.Headers.TraceParent = slices.Clone(r.Headers.TraceParent)
	r.Headers.Origin = slices.Clone(r.Headers.Origin)
	r.Payload = slices.Clone(r.Payload)
	r.Raw = r.Raw.Clone()
	return r
}

func cloneMessage(m connector.Message) connector.Message {
	m.Key, m.Payload = slices.Clone(m.Key), slices.Clone(m.Payload)
	m.Headers = slices.Clone(m.Headers)
	for i := range m.Headers {
		m.Headers[i].Value = slices.Clone(m.Headers[i].Value)
	}
	return m
}
