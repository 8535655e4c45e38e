package iggy

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/connector"
)

func TestSinkSendsAndTailFindsWhatWasPublished(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 2)
	ctx := ctxT(t, 10*time.Second)
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	var msgs []connector.Message
	for i := range 30 {
		key := []byte(keyName(i % 3))
		msgs = append(msgs, connector.Message{
			Key:     key,
			ID:      MessageID([]byte("outbox"), key, []byte{byte(i)}),
			Headers: []connector.Field{{Name: "strand-reason", Value: []byte("handler failed")}, {Name: "strand-origin", Value: []byte{byte(i)}}},
			Payload: []byte{'{', byte('a' + i%26), '}'},
		})
	}
	if err := sink.Send(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	// The last 5 of each partition, in offset order, carry the ids, headers
	// and payloads sent, in the order sent.
	for part := range sink.Partitions() {
		var want []connector.Message
		for _, m := range msgs {
			if sink.PartitionOf(m.Key) == part {
				want = append(want, m)
			}
		}
		got, err := sink.Tail(ctx, part, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) > 5 {
			want = want[len(want)-5:]
		}
		if len(got) != len(want) {
			t.Fatalf("partition %d: tail has %d, want %d", part, len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.ID != w.ID || !bytes.Equal(g.Payload, w.Payload) || g.HeaderErr != nil || len(g.Headers) != 2 ||
				g.Headers[0].Name != "strand-reason" || !bytes.Equal(g.Headers[1].Value, w.Headers[1].Value) || g.Partition != part {
				t.Fatalf("partition %d tail %d: got %+v, want %+v", part, i, g, w)
			}
			if i > 0 && g.Offset != got[i-1].Offset+1 {
				t.Fatalf("tail offsets not contiguous")
			}
		}
	}
	if got, err := sink.Tail(ctx, 0, 0); err != nil || got != nil {
		t.Fatalf("Tail(n=0) = %v, %v", got, err)
	}
	if _, err := sink.Tail(ctx, 9, 1); err == nil {
		t.Fatal("Tail of a missing partition succeeded")
	}
}

func TestSinkTailOfAnEmptyPartition(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	got, err := c.Tail(ctxT(t, 5*time.Second), s, topic, 0, 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("got %d, %v", len(got), err)
	}
}

func TestSinkRefusesMessagesIggyCannotCarry(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	ctx := ctxT(t, 10*time.Second)
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	good := connector.Message{Key: []byte("k"), Payload: []byte("x")}
	for _, bad := range []connector.Message{
		{Payload: []byte("x")},
		{Key: make([]byte, 256), Payload: []byte("x")},
		{Key: []byte("k")},
		{Key: []byte("k"), Payload: []byte("x"), Headers: []connector.Field{{Name: "error", Value: make([]byte, 300)}}},
	} {
		if err := sink.Send(ctx, []connector.Message{good, bad}); !errors.Is(err, ErrInvalidMessage) {
			t.Fatalf("got %v, want ErrInvalidMessage", err)
		}
	}
	if n := count(t, c, s, topic, 0); n != 0 {
		t.Fatalf("%d messages were sent", n)
	}
}

// A Send whose batch for a partition fails sends none of its later
// messages to that partition: what reached a partition is a prefix of the
// call's messages for it, whatever batches the call was cut into (the
// runtime's outbox relies on it to keep each origin's messages in order).
func TestSinkFailedSendDeliversAPrefixPerPartition(t *testing.T) {
	tg := newTarget(t)
	if tg.srv == nil {
		t.Skip("needs the embedded broker's fault injection")
	}
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	ctx := ctxT(t, 10*time.Second)
	sink, err := NewSink(ctx, c, s, topic, WithBatchSize(3))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	for round := range 6 {
		var msgs []connector.Message
		for i := range 3000 {
			msgs = append(msgs, connector.Message{Key: []byte("k"), ID: MessageID([]byte{byte(round)}, []byte{byte(i), byte(i >> 8)}), Payload: []byte{byte(i)}})
		}
		before, err := sink.Tail(ctx, 0, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		// Fail the (round+1)th request of the send: an inner batch.
		tg.srv.Control(failNth(round + 1))
		err = sink.Send(ctx, msgs)
		after, terr := sink.Tail(ctx, 0, 100_000)
		if terr != nil {
			t.Fatal(terr)
		}
		got := after[len(before):]
		for i := range got {
			if got[i].ID != msgs[i].ID {
				t.Fatalf("round %d: message %d in the partition is %x, want %x (a prefix of the send); send error %v", round, i, got[i].ID, msgs[i].ID, err)
			}
		}
		if err == nil || len(got) == len(msgs) {
			t.Fatalf("round %d: send = %v with %d of %d delivered, want an error and a prefix", round, err, len(got), len(msgs))
		}
	}
}

// failNth fails the nth SendMessages request it sees (1-based), once.
func failNth(n int) iggytest.ControlFunc {
	var seen atomic.Int64
	return func(req *iggytest.Request) iggytest.Reply {
		if req.Command == iggytest.CmdSendMessages && seen.Add(1) == int64(n) {
			return iggytest.Reply{Action: iggytest.Fail, Status: iggytest.StatusError}
		}
		return iggytest.Reply{}
	}
}

// A Send whose messages go to several senders, one of which is closing,
// fails with ErrClosed without hanging, queues nothing for the closing
// sender, and leaves no buffer room taken once its messages are resolved.
func TestSinkSendToAClosingSenderFailsCleanly(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 4)
	ctx := ctxT(t, 10*time.Second)
	sink, err := NewSink(ctx, c, s, topic, WithConnections(4))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	p := sink.p
	closing := p.senders[2]
	closing.mu.Lock()
	closing.closing = true
	closing.mu.Unlock()
	var msgs []connector.Message
	for i := range 40 {
		msgs = append(msgs, connector.Message{Key: []byte(keyName(i)), Payload: []byte("x"), Partition: uint32(i % 4), HasPartition: true})
	}
	err = sink.Send(ctx, msgs)
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Send: %v, want ErrClosed", err)
	}
	closing.mu.Lock()
	queued := len(closing.queues[0].msgs) - closing.queues[0].head
	closing.mu.Unlock()
	if queued != 0 {
		t.Fatalf("%d messages queued for the closing sender", queued)
	}
	// The other senders' messages were queued before the failure: sent,
	// or withdrawn when their sender took them; all are resolved now, and
	// their senders release the buffer room right after resolving them.
	testrun.WaitFor(t, 2*time.Second, func() error {
		p.budget.mu.Lock()
		used := p.budget.used
		p.budget.mu.Unlock()
		if used != 0 {
			return fmt.Errorf("%d bytes of buffer still taken", used)
		}
		return nil
	})
}
