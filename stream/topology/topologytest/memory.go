package topologytest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/state"
)

// memConnector is an in-memory broker: partitioned logs that the driver
// appends to and grants to readers batch by batch, and sinks that keep
// what was published.
type memConnector struct {
	mu      sync.Mutex
	parts   uint32
	sources map[string]*memSource
	sinks   map[string]*memSink
}

func newMemConnector(parts uint32, names []string) *memConnector {
	c := &memConnector{parts: parts, sources: map[string]*memSource{}, sinks: map[string]*memSink{}}
	for i, n := range names {
		// Topics of one connector are never created again, so their
		// identity is fixed: the name and its place in the connector.
		s := &memSource{name: n, identity: fmt.Sprintf("topologytest topic %q #%d", n, i)}
		for range parts {
			s.logs = append(s.logs, newMemLog())
		}
		c.sources[n] = s
	}
	return c
}

func (c *memConnector) OpenSource(_ context.Context, topic string) (connector.Source, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sources[topic]
	if !ok {
		return nil, fmt.Errorf("topologytest: no source topic %q", topic)
	}
	return s, nil
}

func (c *memConnector) OpenSink(_ context.Context, topic string, _ uint32) (connector.Sink, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sinks[topic]
	if !ok {
		s = &memSink{name: topic, ids: map[[16]byte]bool{}, src: c.sources[topic]}
		c.sinks[topic] = s
	}
	return s, nil
}

// memSource is one topic of the in-memory broker.
type memSource struct {
	name     string
	identity string
	logs     []*memLog
}

var _ connector.Identifier = (*memSource)(nil)

// Identity tells the topic from another of the same name: see
// connector.Identifier.
func (s *memSource) Identity(context.Context) (string, error) { return s.identity, nil }

func (s *memSource) Name() string                               { return s.name }
func (s *memSource) Partitions(context.Context) (uint32, error) { return uint32(len(s.logs)), nil }
func (s *memSource) Open(_ context.Context, p uint32, from uint64) (connector.PartitionReader, error) {
	if int(p) >= len(s.logs) {
		return nil, fmt.Errorf("topologytest: source %q has no partition %d", s.name, p)
	}
	return &memReader{log: s.logs[p], pos: from}, nil
}

// memLog is one partition: every record appended, and how many of them
// readers may see (the driver grants them batch by batch).
type memLog struct {
	mu      sync.Mutex
	recs    []connector.Record
	granted int
	floor   uint64        // the least end reported: the checkpoint of a store resumed (resume)
	wake    chan struct{} // closed and replaced when granted grows
}

func newMemLog() *memLog { return &memLog{wake: make(chan struct{})} }

func (l *memLog) append(r connector.Record) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Offset = uint64(len(l.recs))
	l.recs = append(l.recs, r)
	return r.Offset
}

// grant lets readers see up to n more records; it returns how many.
func (l *memLog) grant(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := min(n, len(l.recs)-l.granted)
	if k > 0 {
		l.granted += k
		close(l.wake)
		l.wake = make(chan struct{})
	}
	return k
}

func (l *memLog) state() (end, granted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs), l.granted
}

// reportedEnd is the end the App is told: what the driver handed out, or
// the resumed store's checkpoint while the test has not piped that far.
func (l *memLog) reportedEnd() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(uint64(l.granted), l.floor)
}

// resume makes the topics stand for the log a store in dir was built from
// (see Dir): each partition reports at least the store's checkpoint as its
// end. A directory without a store changes nothing.
func (c *memConnector) resume(dir string) {
	st, err := state.Open(context.Background(), dir)
	if err != nil {
		return // no store yet: the App creates it
	}
	defer st.Close()
	sources, err := st.Sources(context.Background())
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, src := range sources {
		s, ok := c.sources[src.Name]
		if !ok {
			continue
		}
		for p, next := range src.Checkpoints {
			if int(p) < len(s.logs) {
				s.logs[p].floor = next
			}
		}
	}
}

type memReader struct {
	log *memLog
	pos uint64
}

func (r *memReader) Poll(ctx context.Context, max int) ([]connector.Record, error) {
	for {
		l := r.log
		l.mu.Lock()
		if int(r.pos) < l.granted {
			end := min(l.granted, int(r.pos)+max)
			out := make([]connector.Record, 0, end-int(r.pos))
			for _, rec := range l.recs[r.pos:end] {
				rec.Headers.Key = slices.Clone(rec.Headers.Key)
				rec.Payload = slices.Clone(rec.Payload)
				out = append(out, rec)
			}
			r.pos = uint64(end)
			l.mu.Unlock()
			return out, nil
		}
		wake := l.wake
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wake:
		}
	}
}

func (r *memReader) Advise(context.Context, uint64) error { return nil }
func (r *memReader) Close() error                         { return nil }

// memSink keeps what was published, in order, and knows message IDs (so the
// runtime's exactly-once publication works as on Iggy). A sink of a topic
// that is also a source of the topology (a KeyBy's repartition topic, a
// To into a topic the topology reads) appends what it is sent to the
// source's partition of each message's key, as a broker would; the driver
// hands the records out on the next Step.
type memSink struct {
	name string
	src  *memSource // nil: the topic is not read by the topology
	mu   sync.Mutex
	msgs []connector.Message
	ids  map[[16]byte]bool
}

func (s *memSink) Send(_ context.Context, msgs []connector.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		m.Key, m.Payload = slices.Clone(m.Key), slices.Clone(m.Payload)
		m.Headers = slices.Clone(m.Headers)
		for i := range m.Headers {
			m.Headers[i].Value = slices.Clone(m.Headers[i].Value)
		}
		s.msgs = append(s.msgs, m)
		s.ids[m.ID] = true
		if s.src != nil {
			r := recordOf(m)
			r.Partition = xxh32.Partition(m.Key, uint32(len(s.src.logs)))
			s.src.logs[r.Partition].append(r)
		}
	}
	return nil
}

// recordOf is the record a source delivers for m: its strand headers
// parsed from m's header fields (HeaderErr when they are missing or bad).
func recordOf(m connector.Message) connector.Record {
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

func (s *memSink) Sent(_ context.Context, msgs []connector.Message) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(msgs))
	for i, m := range msgs {
		out[i] = s.ids[m.ID]
	}
	return out, nil
}

func (s *memSink) messages() []connector.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

var _ connector.EndOffsetter = (*memSource)(nil)

// EndOffsets reports, per partition, the offset after the last record the
// driver handed out: what a broker's end offset is to the App (records
// piped but not yet handed out by Step are still in the producer's hands),
// and at least a resumed store's checkpoint (see Dir).
func (s *memSource) EndOffsets(context.Context) ([]uint64, error) {
	out := make([]uint64, len(s.logs))
	for p, l := range s.logs {
		out[p] = l.reportedEnd()
	}
	return out, nil
}
