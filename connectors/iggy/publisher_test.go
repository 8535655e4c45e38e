package iggy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

func newPublisher(t testing.TB, c *Client, s, topic string, opts ...PublisherOption) *Publisher {
	t.Helper()
	p, err := NewPublisher(ctxT(t, 10*time.Second), c, s, topic, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

// count returns how many messages partition holds.
func count(t testing.TB, c *Client, s, topic string, partition uint32) int {
	t.Helper()
	tail, err := c.Tail(ctxT(t, 10*time.Second), s, topic, partition, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	return len(tail)
}

func TestInvalidEventsAreRefusedBeforeAnythingIsSent(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	p := newPublisher(t, c, s, topic)
	ctx := ctxT(t, 10*time.Second)
	good := stream.Envelope{Headers: connector.Headers{Key: []byte("k"), Tag: 1, Ordering: planner.Relaxed}, Payload: []byte("{}")}
	tests := []struct {
		name string
		bad  stream.Envelope
		want error
	}{
		{"empty payload", stream.Envelope{Headers: good.Headers}, ErrInvalidMessage},
		{"empty key", stream.Envelope{Headers: connector.Headers{Tag: 1, Ordering: planner.Relaxed}, Payload: []byte("x")}, connector.ErrBadHeaders},
		{"key of 256 bytes", stream.Envelope{Headers: connector.Headers{Key: make([]byte, 256), Tag: 1, Ordering: planner.Relaxed}, Payload: []byte("x")}, connector.ErrBadHeaders},
		{"invalid ordering", stream.Envelope{Headers: connector.Headers{Key: []byte("k"), Tag: 1, Ordering: 3}, Payload: []byte("x")}, connector.ErrBadHeaders},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Send(ctx, good, tc.bad)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "event 1") {
				t.Errorf("error %q does not say which event", err)
			}
			if err := p.Enqueue(ctx, tc.bad, nil); !errors.Is(err, tc.want) {
				t.Fatalf("Enqueue: got %v, want %v", err, tc.want)
			}
		})
	}
	if n := count(t, c, s, topic, 0); n != 0 {
		t.Fatalf("%d messages were sent", n)
	}
}

func TestPermanentSendFailureReachesThePublisherAndLaterEventsGoOn(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	p := newPublisher(t, c, s, topic)
	ctx := ctxT(t, 10*time.Second)
	srv.FailNext(iggytest.CmdSendMessages, 1, 3) // InvalidCommand
	err := Publish(ctx, p, eventEncoder{}, event{Key: "k", Seq: 0})
	if !errors.Is(err, ierror.ErrInvalidCommand) {
		t.Fatalf("got %v, want the SDK's ErrInvalidCommand", err)
	}
	if !strings.Contains(err.Error(), s+"/"+topic+" partition 0") {
		t.Errorf("error %q does not name the topic and partition", err)
	}
	if err := Publish(ctx, p, eventEncoder{}, event{Key: "k", Seq: 1}); err != nil {
		t.Fatalf("next publish: %v", err)
	}
	if n := count(t, c, s, topic, 0); n != 1 {
		t.Fatalf("partition holds %d messages, want 1", n)
	}
}

func TestTooLargeMessageFailsWithTheServersError(t *testing.T) {
	tg := newTarget(t, iggytest.WithMaxMessageSize(100))
	tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	p := newPublisher(t, c, s, topic)
	err := Publish(ctxT(t, 10*time.Second), p, eventEncoder{}, event{Key: "k", Body: strings.Repeat("x", 200)})
	if !errors.Is(err, ierror.ErrTooBigMessagePayload) {
		t.Fatalf("got %v, want ErrTooBigMessagePayload", err)
	}
}

func TestDeliveryTimeoutGivesUp(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	p := newPublisher(t, c, s, topic, WithDeliveryTimeout(300*time.Millisecond))
	remove := srv.Control(func(r *iggytest.Request) iggytest.Reply {
		if r.Command == iggytest.CmdSendMessages {
			return iggytest.Reply{Action: iggytest.Drop}
		}
		return iggytest.Reply{}
	})
	defer remove()
	start := time.Now()
	err := Publish(ctxT(t, 10*time.Second), p, eventEncoder{}, event{Key: "k"})
	if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("got %v, want a give-up wrapping ErrDisconnected", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("gave up after %v", d)
	}
}

func TestCancelledSendIsWithdrawnIfNotYetSent(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	p := newPublisher(t, c, s, topic)
	held := make(chan struct{})
	var once sync.Once
	remove := srv.Control(func(r *iggytest.Request) iggytest.Reply {
		if r.Command != iggytest.CmdSendMessages {
			return iggytest.Reply{}
		}
		first := false
		once.Do(func() { first = true; close(held) })
		if first {
			return iggytest.Reply{Delay: 600 * time.Millisecond}
		}
		return iggytest.Reply{}
	})
	defer remove()
	first := make(chan error, 1)
	go func() { first <- Publish(ctxT(t, 10*time.Second), p, eventEncoder{}, event{Key: "k", Seq: 0}) }()
	<-held // the first is in flight, held by the broker
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := Publish(ctx, p, eventEncoder{}, event{Key: "k", Seq: 1})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "withdrawn") {
		t.Fatalf("got %v, want a withdrawal wrapping context.DeadlineExceeded", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first publish: %v", err)
	}
	if err := p.Flush(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, s, topic, 0); n != 1 {
		t.Fatalf("partition holds %d messages, want only the first", n)
	}
}

func TestCloseFailsWhatCannotBeDelivered(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 2)
	p, err := NewPublisher(ctxT(t, 10*time.Second), c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	remove := srv.Control(func(r *iggytest.Request) iggytest.Reply {
		if r.Command == iggytest.CmdSendMessages {
			return iggytest.Reply{Action: iggytest.Drop}
		}
		return iggytest.Reply{}
	})
	defer remove()
	var mu sync.Mutex
	var errs []error
	for i := range 20 {
		env, _ := eventEncoder{}.Envelope(event{Key: keyName(i)})
		if err := p.Enqueue(context.Background(), env, func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: got %v, want context.DeadlineExceeded", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 20 {
		t.Fatalf("%d of 20 callbacks ran", len(errs))
	}
	for _, err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("callback got %v, want ErrClosed", err)
		}
	}
	if err := p.Enqueue(context.Background(), stream.Envelope{Headers: connector.Headers{Key: []byte("k"), Tag: 1, Ordering: planner.Relaxed}, Payload: []byte("x")}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
}

func TestFlushSendsLingeringEvents(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 4)
	p := newPublisher(t, c, s, topic, WithLinger(time.Hour))
	var done atomic.Int32
	for i := range 100 {
		env, _ := eventEncoder{}.Envelope(event{Key: keyName(i)})
		if err := p.Enqueue(context.Background(), env, func(err error) {
			if err == nil {
				done.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // pacing: a window in which a publisher ignoring the linger would send
	if n := done.Load(); n != 0 {
		t.Fatalf("%d events were sent before the linger time", n)
	}
	if err := p.Flush(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := done.Load(); n != 100 {
		t.Fatalf("after Flush %d of 100 events are delivered", n)
	}
}

func TestBufferLimitMakesPublishersWait(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	p := newPublisher(t, c, s, topic, WithBufferBytes(1000))
	// The broker holds the first send until the second Enqueue gave up, so
	// the buffer is full all along whatever the machine's speed.
	held := holdFirstSend(t, srv, 0, iggytest.Pass)
	env, _ := eventEncoder{}.Envelope(event{Key: "k", Body: strings.Repeat("x", 900)})
	if err := p.Enqueue(context.Background(), env, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.Enqueue(ctx, env, nil); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "buffer") {
		t.Fatalf("got %v, want a wait for buffer room ending in DeadlineExceeded", err)
	}
	held.release()
	if err := p.Enqueue(ctxT(t, 5*time.Second), env, nil); err != nil {
		t.Fatalf("after the first was delivered: %v", err)
	}
}

func TestDeterministicMessageIDs(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	p := newPublisher(t, c, s, topic, WithMessageIDs(KeySeqID))
	ctx := ctxT(t, 10*time.Second)
	evs := []event{{Key: "a", Seq: 1}, {Key: "a", Seq: 2}}
	if err := PublishBatch(ctx, p, eventEncoder{}, evs); err != nil {
		t.Fatal(err)
	}
	tail, err := c.Tail(ctx, s, topic, 0, 10)
	if err != nil || len(tail) != 2 {
		t.Fatalf("tail: %d, %v", len(tail), err)
	}
	for i, e := range evs {
		env, _ := eventEncoder{}.Envelope(e)
		if want := KeySeqID(env); tail[i].ID != want {
			t.Fatalf("message %d id %x, want %x", i, tail[i].ID, want)
		}
	}
	if KeySeqID(stream.Envelope{}) != ([16]byte{}) {
		t.Fatal("KeySeqID without a sequence number must be zero")
	}
	if MessageID([]byte("a"), []byte("bc")) == MessageID([]byte("ab"), []byte("c")) {
		t.Fatal("MessageID must separate its parts")
	}
}

func TestManyGoroutinesPublishingOneKeyEachKeepOrder(t *testing.T) {
	const goroutines, each = 16, 200
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 4)
	p := newPublisher(t, c, s, topic, WithConnections(2))
	ctx := ctxT(t, 60*time.Second)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := Publish(ctx, p, eventEncoder{}, event{Key: keyName(g), Seq: uint64(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	src, _ := NewSource(c, s, topic)
	consumeAll(t, src, 4, goroutines*each).check(t, src, goroutines, goroutines*each)
}

func TestFindRunMatchesWholeBatchesOnly(t *testing.T) {
	msg := func(id byte) iggcon.IggyMessage {
		return iggcon.IggyMessage{Header: iggcon.MessageHeader{Id: iggcon.MessageID{id}}}
	}
	log := []iggcon.IggyMessage{msg(1), msg(2), msg(3), msg(9), msg(4), msg(5)}
	for _, tc := range []struct {
		batch []byte
		want  int
	}{
		{[]byte{4, 5}, 4},
		{[]byte{1, 2, 3}, 0},
		{[]byte{5}, 5},
		{[]byte{8, 5}, -1}, // the last id is there, the batch is not
		{[]byte{3, 4}, -1},
		{[]byte{1, 2, 3, 9, 4, 5, 6}, -1},
	} {
		batch := make([]iggcon.IggyMessage, len(tc.batch))
		for i, id := range tc.batch {
			batch[i] = msg(id)
		}
		if got := findRun(log, batch); got != tc.want {
			t.Errorf("findRun(%v) = %d, want %d", tc.batch, got, tc.want)
		}
	}
}
