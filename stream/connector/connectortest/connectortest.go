// Package connectortest is the conformance suite of package connector:
// the tests every connector.Connector must pass, so that strand's runtime
// behaves the same over any of them (in the way of Watermill's pubsub
// tests). A connector's own tests call Run with a Harness that connects
// to a broker:
//
//	func TestConformance(t *testing.T) {
//		connectortest.Run(t, connectortest.Harness{
//			Connect: func(t *testing.T) connector.Connector { ... },
//		})
//	}
//
// Run checks what the documentation of package connector promises:
// records are delivered from the offset a reader is opened at, in offset
// order, contiguous, at most max per poll and never reused; messages land
// in the partition of their key (connector.PartitionOf) or the one they
// name; strand headers, trace context and origin round-trip, and a message
// without valid strand headers is delivered with HeaderErr instead of
// dropped; a poll waits for records and returns when its context ends;
// Send may be called concurrently and keeps each caller's order; a sink
// that is a connector.SentChecker reports exactly what was sent; a source
// that is a connector.EndOffsetter reports each partition's end, and one
// that is a connector.Identifier tells a topic created again from the one
// before; a connector.ForeignConnector delivers raw messages; Advise is
// accepted and changes nothing a reader is opened at. Optional
// interfaces a connector does not implement are skipped, with the reason
// logged.
//
// A sink with a Close(context.Context) error method is closed at the end
// of each test, as the runtime closes its sinks.
//
// Every test makes its own topics (through OpenSink, which creates them)
// and takes a few hundred milliseconds at most on an embedded broker.
package connectortest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// Harness is what a connector under test gives the suite.
type Harness struct {
	// Connect returns a connector to a broker; it is called once per test
	// and should release what it opened with t.Cleanup. Required.
	Connect func(t *testing.T) connector.Connector
	// Topic returns a fresh name for a topic the test calls name, one no
	// other test uses: for Iggy a "stream/topic" whose stream is deleted at
	// cleanup. Nil: "connectortest-<n>/<name>".
	Topic func(t *testing.T, name string) string
	// Delete deletes topic, so that the suite can create it again and
	// check that the source's identity changed (connector.Identifier).
	// Nil skips that check.
	Delete func(ctx context.Context, c connector.Connector, topic string) error
	// Timeout bounds every wait of the suite for something a broker must
	// do (default 10 s); a slow machine never fails a test that is
	// correct, as long as the broker answers within it.
	Timeout time.Duration
}

var topicSeq atomic.Uint64

// Run runs the conformance suite against h, each check as a subtest.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Connect == nil {
		t.Fatal("connectortest.Run: Harness.Connect is nil; give a function that connects to the broker")
	}
	if h.Topic == nil {
		h.Topic = func(_ *testing.T, name string) string {
			return fmt.Sprintf("connectortest-%d/%s", topicSeq.Add(1), name)
		}
	}
	if h.Timeout <= 0 {
		h.Timeout = 10 * time.Second
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &suite{t: t, h: h}
			s.conn = h.Connect(t)
			if s.conn == nil {
				t.Fatal("connectortest: Harness.Connect returned nil")
			}
			c.run(s)
		})
	}
}

type testCase struct {
	name string
	run  func(s *suite)
}

// cases are the checks, in the order they run.
var cases = []testCase{
	{"MissingSourceIsAnError", testMissingSource},
	{"SinkCreatesTopicWithPartitions", testPartitions},
	{"MessagesLandInTheirKeysPartition", testKeyPartitioning},
	{"MessageNamesItsPartition", testExplicitPartition},
	{"HeadersRoundTrip", testHeadersRoundTrip},
	{"BadHeadersAreDeliveredNotDropped", testBadHeaders},
	{"ReaderStartsAtItsOffset", testOpenFrom},
	{"PollReturnsAtMostMaxInOrder", testPollMax},
	{"PollWaitsForRecords", testPollWaits},
	{"PollReturnsWhenContextEnds", testPollCancel},
	{"RecordsBelongToTheCaller", testRecordsOwned},
	{"ConcurrentSendsKeepEachCallersOrder", testConcurrentSends},
	{"SentReportsExactlyWhatWasSent", testSent},
	{"EndOffsets", testEndOffsets},
	{"Identity", testIdentity},
	{"ForeignSourceDeliversRawMessages", testForeign},
	{"InvalidKeyIsRefused", testInvalidKey},
	{"AdviseIsAccepted", testAdvise},
}

type suite struct {
	t    *testing.T
	h    Harness
	conn connector.Connector
}

func (s *suite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	s.t.Cleanup(cancel)
	return ctx
}

// topic makes a topic of n partitions and returns its name and sink.
func (s *suite) topic(name string, n uint32) (string, connector.Sink) {
	s.t.Helper()
	topic := s.h.Topic(s.t, name)
	return topic, s.sink(topic, n)
}

// sink opens topic as a sink. A sink with a Close(context.Context) error
// method is closed at the end of the test, as the runtime closes its
// sinks when an App closes.
func (s *suite) sink(topic string, n uint32) connector.Sink {
	s.t.Helper()
	sink, err := s.conn.OpenSink(s.ctx(), topic, n)
	if err != nil {
		s.t.Fatalf("OpenSink(%q, %d): %v", topic, n, err)
	}
	if c, ok := sink.(interface{ Close(context.Context) error }); ok {
		s.t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
			defer cancel()
			if err := c.Close(ctx); err != nil {
				s.t.Errorf("closing the sink of %q: %v", topic, err)
			}
		})
	}
	return sink
}

func (s *suite) source(topic string) connector.Source {
	s.t.Helper()
	src, err := s.conn.OpenSource(s.ctx(), topic)
	if err != nil {
		s.t.Fatalf("OpenSource(%q): %v", topic, err)
	}
	return src
}

func (s *suite) send(sink connector.Sink, msgs ...connector.Message) {
	s.t.Helper()
	if err := sink.Send(s.ctx(), msgs); err != nil {
		s.t.Fatalf("Send of %d messages: %v", len(msgs), err)
	}
}

func (s *suite) open(src connector.Source, p uint32, from uint64) connector.PartitionReader {
	s.t.Helper()
	r, err := src.Open(s.ctx(), p, from)
	if err != nil {
		s.t.Fatalf("Open(partition %d, from %d): %v", p, from, err)
	}
	s.t.Cleanup(func() { _ = r.Close() })
	return r
}

// read polls r until it has n records (failing the test if it gets more,
// or if they do not come within the harness's timeout) and checks that
// their offsets run contiguously from the first.
func (s *suite) read(r connector.PartitionReader, n, max int) []connector.Record {
	s.t.Helper()
	ctx := s.ctx()
	var out []connector.Record
	for len(out) < n {
		got, err := r.Poll(ctx, max)
		if err != nil {
			s.t.Fatalf("Poll after %d of %d records: %v", len(out), n, err)
		}
		if len(got) == 0 || len(got) > max {
			s.t.Fatalf("Poll(max %d) returned %d records; want 1..%d", max, len(got), max)
		}
		out = append(out, got...)
	}
	if len(out) > n {
		s.t.Fatalf("read %d records; want %d", len(out), n)
	}
	for i := 1; i < len(out); i++ {
		if out[i].Offset != out[i-1].Offset+1 {
			s.t.Fatalf("record %d has offset %d after %d: offsets must be contiguous", i, out[i].Offset, out[i-1].Offset)
		}
	}
	return out
}

// msg is a strand message with key key, tag 1 and the given payload.
func msg(key, payload string, id byte) connector.Message {
	h := connector.Headers{Key: []byte(key), Tag: 1, Ordering: planner.Relaxed, Algebra: algebra.NonAssociative}
	fs, err := h.AppendFields(nil)
	if err != nil {
		panic(err) // the suite's own headers are valid
	}
	m := connector.Message{Key: []byte(key), Headers: fs, Payload: []byte(payload)}
	if id != 0 {
		m.ID[0], m.ID[15] = id, 0xa5
	}
	return m
}

func testMissingSource(s *suite) {
	topic := s.h.Topic(s.t, "missing")
	if src, err := s.conn.OpenSource(s.ctx(), topic); err == nil {
		s.t.Fatalf("OpenSource(%q) of a topic never created = %v, nil; want an error", topic, src.Name())
	}
}

func testPartitions(s *suite) {
	topic, _ := s.topic("parts", 3)
	src := s.source(topic)
	if src.Name() != topic {
		s.t.Errorf("Name() = %q; want %q", src.Name(), topic)
	}
	n, err := src.Partitions(s.ctx())
	if err != nil || n != 3 {
		s.t.Fatalf("Partitions() = %d, %v; want 3", n, err)
	}
	// Opening an existing topic as a sink again keeps its partitions.
	s.sink(topic, 5)
	if n, err := s.source(topic).Partitions(s.ctx()); err != nil || n != 3 {
		s.t.Errorf("after OpenSink with 5 partitions, Partitions() = %d, %v; want the topic's 3", n, err)
	}
	if r, err := src.Open(s.ctx(), 3, 0); err == nil {
		_ = r.Close()
		s.t.Errorf("Open(partition 3) of a 3-partition topic succeeded; want an error")
	}
}

func testKeyPartitioning(s *suite) {
	const parts = 4
	topic, sink := s.topic("keys", parts)
	var msgs []connector.Message
	want := map[uint32][]string{}
	for i := range 40 {
		key := fmt.Sprintf("key-%d", i%13)
		m := msg(key, fmt.Sprintf("payload %d", i), 0)
		msgs = append(msgs, m)
		p := connector.PartitionOf(m.Key, parts)
		want[p] = append(want[p], string(m.Payload))
	}
	s.send(sink, msgs...)
	src := s.source(topic)
	for p := range uint32(parts) {
		recs := s.read(s.open(src, p, 0), len(want[p]), 100)
		var got []string
		for i, r := range recs {
			if r.Partition != p {
				s.t.Errorf("partition %d record %d says partition %d", p, i, r.Partition)
			}
			if i == 0 && r.Offset != 0 {
				s.t.Errorf("partition %d starts at offset %d; want 0", p, r.Offset)
			}
			if r.HeaderErr != nil {
				s.t.Errorf("partition %d record %d: HeaderErr %v", p, i, r.HeaderErr)
			}
			if got, want := connector.PartitionOf(r.Headers.Key, parts), p; got != want {
				s.t.Errorf("record of key %q in partition %d; its key's partition is %d", r.Headers.Key, want, got)
			}
			got = append(got, string(r.Payload))
		}
		if !slices.Equal(got, want[p]) {
			s.t.Errorf("partition %d holds %q; want %q (in send order)", p, got, want[p])
		}
	}
}

func testExplicitPartition(s *suite) {
	topic, sink := s.topic("explicit", 3)
	m := msg("k", "to partition 2", 0)
	m.Partition, m.HasPartition = 2, true
	if connector.PartitionOf(m.Key, 3) == 2 {
		s.t.Fatal("the suite's key must not hash to partition 2")
	}
	s.send(sink, m)
	recs := s.read(s.open(s.source(topic), 2, 0), 1, 10)
	if string(recs[0].Payload) != "to partition 2" || recs[0].Partition != 2 {
		s.t.Errorf("partition 2 holds %q (partition %d); want the message that named it", recs[0].Payload, recs[0].Partition)
	}
	bad := msg("k", "to partition 3", 0)
	bad.Partition, bad.HasPartition = 3, true
	if err := sink.Send(s.ctx(), []connector.Message{bad}); err == nil {
		s.t.Errorf("Send to partition 3 of a 3-partition topic succeeded; want an error")
	}
}

func testHeadersRoundTrip(s *suite) {
	topic, sink := s.topic("headers", 1)
	h := connector.Headers{Key: []byte("account-7"), Tag: 42, Ordering: planner.Acquire, Algebra: algebra.NonAssociative, Seq: 1 << 40, HasSeq: true}
	fs, err := h.AppendFields(nil)
	if err != nil {
		s.t.Fatal(err)
	}
	tp := []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	origin := []byte("origin-bytes")
	fs = append(fs, connector.Field{Name: connector.HeaderTraceParent, Value: tp}, connector.Field{Name: connector.HeaderOrigin, Value: origin})
	payload := bytes.Repeat([]byte{0, 1, 2, 0xff}, 300)
	s.send(sink, connector.Message{Key: h.Key, Headers: fs, Payload: payload})
	r := s.read(s.open(s.source(topic), 0, 0), 1, 10)[0]
	if r.HeaderErr != nil {
		s.t.Fatalf("HeaderErr: %v", r.HeaderErr)
	}
	g := r.Headers
	if !bytes.Equal(g.Key, h.Key) || g.Tag != h.Tag || g.Ordering != h.Ordering || g.Algebra != h.Algebra || g.Seq != h.Seq || !g.HasSeq {
		s.t.Errorf("headers %+v; want %+v", g, h)
	}
	if !bytes.Equal(g.TraceParent, tp) || !bytes.Equal(g.Origin, origin) {
		s.t.Errorf("traceparent %q, origin %q; want %q, %q", g.TraceParent, g.Origin, tp, origin)
	}
	if !bytes.Equal(r.Payload, payload) {
		s.t.Errorf("payload of %d bytes differs from the %d sent", len(r.Payload), len(payload))
	}
	if r.Raw != nil {
		s.t.Errorf("a strand source's record has Raw %+v; want nil", r.Raw)
	}
}

func testBadHeaders(s *suite) {
	topic, sink := s.topic("bad-headers", 1)
	good := msg("k", "good", 0)
	none := connector.Message{Key: []byte("k"), Payload: []byte("no strand headers")}
	broken := connector.Message{Key: []byte("k"), Payload: []byte("bad props"),
		Headers: []connector.Field{{Name: connector.HeaderKey, Value: []byte("k")}, {Name: connector.HeaderType, Value: []byte{1, 0, 0, 0}}, {Name: connector.HeaderProps, Value: []byte{99, 0, 0}}}}
	s.send(sink, none, broken, good)
	recs := s.read(s.open(s.source(topic), 0, 0), 3, 10)
	for i, name := range []string{"a message without strand headers", "a message with bad props"} {
		if recs[i].HeaderErr == nil {
			s.t.Errorf("%s: HeaderErr nil; want an error", name)
		} else if !errors.Is(recs[i].HeaderErr, connector.ErrBadHeaders) {
			s.t.Errorf("%s: HeaderErr %v does not wrap connector.ErrBadHeaders", name, recs[i].HeaderErr)
		}
		if string(recs[i].Payload) != string([]connector.Message{none, broken}[i].Payload) {
			s.t.Errorf("%s: payload %q", name, recs[i].Payload)
		}
	}
	if recs[2].HeaderErr != nil || string(recs[2].Payload) != "good" {
		s.t.Errorf("the good message after them: %q, HeaderErr %v", recs[2].Payload, recs[2].HeaderErr)
	}
}

func testOpenFrom(s *suite) {
	topic, sink := s.topic("from", 1)
	var msgs []connector.Message
	for i := range 10 {
		msgs = append(msgs, msg("k", fmt.Sprint(i), 0))
	}
	s.send(sink, msgs...)
	src := s.source(topic)
	recs := s.read(s.open(src, 0, 6), 4, 10)
	for i, r := range recs {
		if r.Offset != uint64(6+i) || string(r.Payload) != fmt.Sprint(6+i) {
			s.t.Errorf("record %d: offset %d payload %q; want %d, %q", i, r.Offset, r.Payload, 6+i, fmt.Sprint(6+i))
		}
	}
	// A reader at the end sees what is sent after it was opened.
	r := s.open(src, 0, 10)
	s.send(sink, msg("k", "10", 0))
	if got := s.read(r, 1, 10)[0]; got.Offset != 10 || string(got.Payload) != "10" {
		s.t.Errorf("reader opened at the end: offset %d payload %q; want 10, \"10\"", got.Offset, got.Payload)
	}
}

func testPollMax(s *suite) {
	topic, sink := s.topic("max", 1)
	var msgs []connector.Message
	for i := range 25 {
		msgs = append(msgs, msg("k", fmt.Sprint(i), 0))
	}
	s.send(sink, msgs...)
	recs := s.read(s.open(s.source(topic), 0, 0), 25, 4)
	for i, r := range recs {
		if r.Offset != uint64(i) || string(r.Payload) != fmt.Sprint(i) {
			s.t.Fatalf("record %d: offset %d payload %q", i, r.Offset, r.Payload)
		}
	}
}

func testPollWaits(s *suite) {
	topic, sink := s.topic("waits", 1)
	r := s.open(s.source(topic), 0, 0)
	got := make(chan []connector.Record, 1)
	errc := make(chan error, 1)
	ctx := s.ctx()
	go func() {
		recs, err := r.Poll(ctx, 10)
		if err != nil {
			errc <- err
			return
		}
		got <- recs
	}()
	s.send(sink, msg("k", "late", 0))
	select {
	case recs := <-got:
		if len(recs) != 1 || string(recs[0].Payload) != "late" {
			s.t.Errorf("a waiting poll returned %d records; want the one sent while it waited", len(recs))
		}
	case err := <-errc:
		s.t.Fatalf("a waiting poll failed: %v", err)
	}
}

func testPollCancel(s *suite) {
	topic, _ := s.topic("cancel", 1)
	r := s.open(s.source(topic), 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Poll(ctx, 10)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			s.t.Errorf("a poll of an empty partition whose context ended returned no error")
		}
	case <-time.After(s.h.Timeout):
		s.t.Fatalf("a poll did not return within %v of its context's end", s.h.Timeout)
	}
}

func testRecordsOwned(s *suite) {
	topic, sink := s.topic("owned", 1)
	s.send(sink, msg("key", "payload-1", 0), msg("key", "payload-2", 0))
	src := s.source(topic)
	r := s.open(src, 0, 0)
	first := s.read(r, 1, 1)[0]
	copy(first.Payload, "XXXXXXX")
	copy(first.Headers.Key, "XXX")
	second := s.read(r, 1, 1)[0]
	if string(second.Payload) != "payload-2" || string(second.Headers.Key) != "key" {
		s.t.Errorf("after the caller changed a record, the next is %q key %q", second.Payload, second.Headers.Key)
	}
	again := s.read(s.open(src, 0, 0), 2, 10)
	if string(again[0].Payload) != "payload-1" || string(again[0].Headers.Key) != "key" {
		s.t.Errorf("the record read again is %q key %q after the caller changed its copy", again[0].Payload, again[0].Headers.Key)
	}
}

func testConcurrentSends(s *suite) {
	const senders, each = 4, 25
	topic, sink := s.topic("concurrent", 2)
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	ctx := s.ctx()
	for g := range senders {
		wg.Go(func() {
			key := fmt.Sprintf("sender-%d", g)
			for i := range each {
				if err := sink.Send(ctx, []connector.Message{msg(key, fmt.Sprintf("%d", i), 0)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatalf("a concurrent Send: %v", err)
	}
	per := map[uint32]int{}
	for g := range senders {
		per[connector.PartitionOf(fmt.Appendf(nil, "sender-%d", g), 2)] += each
	}
	src := s.source(topic)
	next := map[string]int{}
	for p := range uint32(2) {
		for _, r := range s.read(s.open(src, p, 0), per[p], 100) {
			k := string(r.Headers.Key)
			if string(r.Payload) != fmt.Sprint(next[k]) {
				s.t.Fatalf("%s: message %q after %d: a caller's order was not kept", k, r.Payload, next[k])
			}
			next[k]++
		}
	}
}

func testSent(s *suite) {
	_, sink := s.topic("sent", 2)
	sc, ok := sink.(connector.SentChecker)
	if !ok {
		s.t.Skipf("the sink (%T) is not a connector.SentChecker: a crash may publish a dead letter twice", sink)
	}
	a, b, c := msg("a", "1", 1), msg("b", "2", 2), msg("c", "3", 3)
	got, err := sc.Sent(s.ctx(), []connector.Message{a, b, c})
	if err != nil || !slices.Equal(got, []bool{false, false, false}) {
		s.t.Fatalf("Sent before anything was sent = %v, %v; want all false", got, err)
	}
	s.send(sink, a, c)
	got, err = sc.Sent(s.ctx(), []connector.Message{a, b, c})
	if err != nil || !slices.Equal(got, []bool{true, false, true}) {
		s.t.Errorf("Sent after sending a and c = %v, %v; want [true false true]", got, err)
	}
}

func testEndOffsets(s *suite) {
	topic, sink := s.topic("ends", 3)
	src := s.source(topic)
	eo, ok := src.(connector.EndOffsetter)
	if !ok {
		s.t.Skipf("the source (%T) is not a connector.EndOffsetter: no lag, no caught-up", src)
	}
	ends, err := eo.EndOffsets(s.ctx())
	if err != nil || !slices.Equal(ends, []uint64{0, 0, 0}) {
		s.t.Fatalf("EndOffsets of an empty topic = %v, %v; want [0 0 0]", ends, err)
	}
	want := make([]uint64, 3)
	var msgs []connector.Message
	for i := range 17 {
		m := msg(fmt.Sprintf("key-%d", i%5), "x", 0)
		want[connector.PartitionOf(m.Key, 3)]++
		msgs = append(msgs, m)
	}
	s.send(sink, msgs...)
	// The broker accepted every message; its end offsets count them all.
	ends, err = eo.EndOffsets(s.ctx())
	if err != nil || !slices.Equal(ends, want) {
		s.t.Errorf("EndOffsets after Send = %v, %v; want %v", ends, err, want)
	}
}

func testIdentity(s *suite) {
	topic, _ := s.topic("identity", 1)
	src := s.source(topic)
	id, ok := src.(connector.Identifier)
	if !ok {
		s.t.Skipf("the source (%T) is not a connector.Identifier: a topic created again is not noticed", src)
	}
	first, err := id.Identity(s.ctx())
	if err != nil || len(first) == 0 || len(first) > 255 {
		s.t.Fatalf("Identity() = %q, %v; want 1..255 bytes", first, err)
	}
	if again, err := id.Identity(s.ctx()); err != nil || again != first {
		s.t.Errorf("Identity() again = %q, %v; want %q", again, err, first)
	}
	other, _ := s.topic("identity-other", 1)
	if o, err := s.source(other).(connector.Identifier).Identity(s.ctx()); err != nil || o == first {
		s.t.Errorf("another topic's identity = %q, %v; want one different from %q", o, err, first)
	}
	if s.h.Delete == nil {
		s.t.Log("Harness.Delete is nil: a topic created again is not checked")
		return
	}
	if err := s.h.Delete(s.ctx(), s.conn, topic); err != nil {
		s.t.Fatalf("Delete(%q): %v", topic, err)
	}
	if _, err := id.Identity(s.ctx()); err == nil {
		s.t.Errorf("Identity() of a deleted topic succeeded; want an error")
	}
	s.sink(topic, 1)
	re, err := s.source(topic).(connector.Identifier).Identity(s.ctx())
	if err != nil || re == first {
		s.t.Errorf("the identity of %q created again = %q, %v; want one different from %q", topic, re, err, first)
	}
}

func testForeign(s *suite) {
	fc, ok := s.conn.(connector.ForeignConnector)
	if !ok {
		s.t.Skipf("the connector (%T) is not a connector.ForeignConnector: it reads no foreign topics", s.conn)
	}
	topic, sink := s.topic("foreign", 1)
	plain := connector.Message{Key: []byte("k"), Payload: []byte("plain"), ID: [16]byte{7, 15: 1},
		Headers: []connector.Field{{Name: "content-type", Value: []byte("text/plain")}, {Name: "n", Value: []byte{1, 2}}}}
	strandMsg := msg("k", "strand", 9)
	s.send(sink, plain, strandMsg)
	src, err := fc.OpenForeignSource(s.ctx(), topic)
	if err != nil {
		s.t.Fatalf("OpenForeignSource: %v", err)
	}
	recs := s.read(s.open(src, 0, 0), 2, 10)
	for i, want := range []connector.Message{plain, strandMsg} {
		r := recs[i]
		if r.Raw == nil {
			s.t.Fatalf("record %d of a foreign source has no Raw", i)
		}
		if r.HeaderErr != nil {
			s.t.Errorf("record %d: HeaderErr %v; a foreign source parses no strand headers", i, r.HeaderErr)
		}
		if r.Raw.ID != want.ID {
			s.t.Errorf("record %d: Raw.ID %x; want %x", i, r.Raw.ID, want.ID)
		}
		if len(r.Raw.Headers) != len(want.Headers) {
			s.t.Fatalf("record %d: %d raw headers; want every one of the %d sent", i, len(r.Raw.Headers), len(want.Headers))
		}
		for j, f := range want.Headers {
			if g := r.Raw.Headers[j]; g.Name != f.Name || !bytes.Equal(g.Value, f.Value) {
				s.t.Errorf("record %d header %d: %q=%x; want %q=%x", i, j, g.Name, g.Value, f.Name, f.Value)
			}
		}
		if string(r.Payload) != string(want.Payload) {
			s.t.Errorf("record %d: payload %q; want %q", i, r.Payload, want.Payload)
		}
	}
}

func testInvalidKey(s *suite) {
	topic, sink := s.topic("invalid-key", 1)
	for _, key := range [][]byte{nil, bytes.Repeat([]byte("k"), connector.MaxKeyLen+1)} {
		m := msg("k", "x", 0)
		m.Key = key
		if err := sink.Send(s.ctx(), []connector.Message{msg("k", "before", 0), m}); err == nil {
			s.t.Errorf("Send of a message with a %d-byte key succeeded; want an error", len(key))
		}
	}
	// What follows a refused call is delivered as usual.
	s.send(sink, msg("k", "after", 0))
	if eo, ok := s.source(topic).(connector.EndOffsetter); ok {
		ends, err := eo.EndOffsets(s.ctx())
		if err != nil {
			s.t.Fatal(err)
		}
		recs := s.read(s.open(s.source(topic), 0, 0), int(ends[0]), 10)
		if last := recs[len(recs)-1]; string(last.Payload) != "after" {
			s.t.Errorf("the last record is %q; want the message sent after the refused ones", last.Payload)
		}
	}
}

func testAdvise(s *suite) {
	topic, sink := s.topic("advise", 1)
	s.send(sink, msg("k", "1", 0), msg("k", "2", 0))
	r := s.open(s.source(topic), 0, 0)
	recs := s.read(r, 2, 10)
	if err := r.Advise(s.ctx(), recs[1].Offset+1); err != nil {
		s.t.Errorf("Advise(%d) after reading every record: %v", recs[1].Offset+1, err)
	}
	// Advising is for monitoring only: a reader opened anew still starts
	// where it is told.
	if again := s.read(s.open(s.source(topic), 0, 0), 2, 10); string(again[0].Payload) != "1" {
		s.t.Errorf("a reader opened at 0 after an Advise starts with %q", again[0].Payload)
	}
}
