package iggy

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/state"
)

func TestSinkSentFindsPublishedIDs(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 3)
	ctx := ctxT(t, 10*time.Second)
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	msg := func(i int) stream.Message {
		key := []byte(keyName(i % 5))
		return stream.Message{Key: key, ID: MessageID([]byte("dlq"), []byte{byte(i)}), Payload: []byte{'x'}}
	}
	var sent, all []stream.Message
	for i := range 20 {
		if i%2 == 0 {
			sent = append(sent, msg(i))
		}
		all = append(all, msg(i))
	}
	if err := sink.Send(ctx, sent); err != nil {
		t.Fatal(err)
	}
	all = append(all, stream.Message{Key: []byte("k"), Payload: []byte{'x'}}) // no id
	got, err := sink.Sent(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	for i := range all {
		if want := i < 20 && i%2 == 0; got[i] != want {
			t.Errorf("Sent[%d] = %v, want %v", i, got[i], want)
		}
	}
}

// poisonEncoder writes events under a type tag the topology has no handler
// for: the processor dead-letters them.
type poisonEncoder struct{}

func (poisonEncoder) Envelope(e event) (stream.Envelope, error) {
	b, err := json.Marshal(e)
	return stream.Envelope{
		Headers: stream.Headers{Key: []byte(e.Key), Tag: 99, Ordering: planner.Relaxed, Algebra: algebra.NonAssociative},
		Payload: b,
	}, err
}

// TestProcessorDeadLettersThroughIggyExactlyOnce runs a stream.Processor on
// an Iggy topic with poison events, "crashes" it right after a dead-letter
// publication and before the rows' deletion, restarts it on the same store,
// and finds every dead letter exactly once in the dead-letter topic: Sink
// implements stream.SentChecker.
func TestProcessorDeadLettersThroughIggyExactlyOnce(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 4)
	ctx := ctxT(t, 60*time.Second)
	dlqTopic := topic + ".dlq"
	if err := c.EnsureTopic(ctx, s, dlqTopic, 2); err != nil {
		t.Fatal(err)
	}

	pub, err := NewPublisher(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	poison := 0
	for i := range 600 {
		e := event{Key: keyName(i % 30), Seq: uint64(i)}
		if i%17 == 0 {
			err = Publish(ctx, pub, poisonEncoder{}, e)
			poison++
		} else {
			err = Publish(ctx, pub, eventEncoder{}, e)
			want[e.Key]++
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}

	events := stream.DeclareFunc[string, event](7, func(e event) string { return e.Key })
	counts := state.NewTable[string, int64]("counts", stream.StringKey[string](), state.JSON[int64]())
	prog, err := stream.NewProgram(stream.Spec{Name: "dlq-test", Sources: []stream.SourceSpec{{
		Name:     s + "/" + topic,
		Handlers: []stream.Handler{stream.Project(events, counts, func(v *int64, _ event) error { *v++; return nil })},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(c, s, topic, WithIdleBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewSink(ctx, c, s, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	dir := t.TempDir()
	open := func() *state.DB {
		db, err := state.Open(dir, state.WithDurability(state.NoSync),
			state.WithLocator(func(key []byte) uint32 { return xxh32.Partition(key, 4) }))
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	run := func(db *state.DB, hooks stream.Hooks, until func(*stream.Processor) bool) error {
		p, err := stream.NewProcessor(prog, db, src, stream.WithDeadLetterSink(sink), stream.WithHooks(hooks),
			stream.WithPollSize(50), stream.WithProcessorLogger(testLogger()))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- p.Run(rctx) }()
		for {
			select {
			case err := <-done:
				return err
			case <-time.After(5 * time.Millisecond):
			}
			if until != nil && until(p) {
				cancel()
				return <-done
			}
		}
	}

	// First life: crash right after the first dead letters were published.
	errCrash := errors.New("simulated crash")
	var crashed atomic.Bool
	db := open()
	err = run(db, stream.Hooks{AfterDeadLetterSend: func(uint32, []stream.DeadLetter) error {
		if crashed.CompareAndSwap(false, true) {
			return errCrash
		}
		return nil
	}}, nil)
	if !errors.Is(err, errCrash) {
		t.Fatalf("first run = %v, want the simulated crash", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Second life: finish everything.
	db = open()
	defer db.Close()
	done := func(p *stream.Processor) bool {
		pending, err := p.PendingDeadLetters(ctx)
		if err != nil || len(pending) > 0 {
			return false
		}
		n := 0
		_ = counts.Scan(ctx, func(_ string, v int64) bool { n += int(v); return true })
		return n == 600-poison
	}
	if err := run(db, stream.Hooks{}, done); err != nil {
		t.Fatalf("second run: %v", err)
	}
	for k, w := range want {
		if g, _, err := counts.Get(ctx, k); err != nil || g != w {
			t.Errorf("key %s: count %d (%v), want %d", k, g, err, w)
		}
	}

	seen := map[[16]byte]int{}
	total := 0
	for part := range sink.Partitions() {
		msgs, err := sink.Tail(ctx, part, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			seen[m.ID]++
			total++
			if m.HeaderErr != nil {
				t.Errorf("dead letter at DLQ offset %d: %v", m.Offset, m.HeaderErr)
			}
		}
	}
	if total != poison || len(seen) != poison {
		t.Errorf("DLQ holds %d messages with %d distinct ids, want %d poison events exactly once", total, len(seen), poison)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("dead letter %x published %d times", id, n)
		}
	}
}
