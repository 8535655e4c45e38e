package iggy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/connector"
)

// A deposed owner resumed after a pause (SIGSTOP) with dead letters on
// their way through the sink must not publish them: its successor has
// published the same rows (stress run of issue 34, TestScaleOutZombie:
// two dead letters in the topic twice). The outbox sends under a send
// deadline, the end of the owner's lease (connector.WithSendDeadline); a
// message not written by then is failed, never written later.
func TestSinkWritesNothingPastTheSendDeadline(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	ctx := ctxT(t, 20*time.Second)
	// The messages wait in the sink's queue for 300ms (linger): longer
	// than the deadline of the second Send below.
	sink, err := NewSink(ctx, c, s, topic, WithLinger(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	msg := deadlineMsg

	// The lease ended during the pause, before the send: nothing is written.
	past := connector.WithSendDeadline(ctx, time.Now().Add(-time.Millisecond))
	if err := sink.Send(past, msg(1)); !errors.Is(err, errPastSendDeadline) {
		t.Fatalf("Send past its deadline = %v, want errPastSendDeadline", err)
	}
	// The lease ends while the messages wait in the sink.
	soon := connector.WithSendDeadline(ctx, time.Now().Add(20*time.Millisecond))
	if err := sink.Send(soon, msg(2)); !errors.Is(err, errPastSendDeadline) {
		t.Fatalf("Send whose deadline passed in the queue = %v, want errPastSendDeadline", err)
	}
	// A Send within its deadline, and one without, are written.
	later := connector.WithSendDeadline(ctx, time.Now().Add(time.Minute))
	if err := sink.Send(later, msg(3)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Send(ctx, msg(4)); err != nil {
		t.Fatal(err)
	}
	onlyIDs(t, ctx, sink, 3, 4) // the two sent within their deadline
}

// deadlineMsg is the one message of Send i in the deadline tests.
func deadlineMsg(i int) []connector.Message {
	key := []byte(keyName(i))
	return []connector.Message{{Key: key, ID: MessageID([]byte("dlq"), key, []byte{byte(i)}), Payload: []byte{'{', '}'}}}
}

// onlyIDs fails unless the sink's partition holds exactly the messages of
// the Sends want, in that order.
func onlyIDs(t *testing.T, ctx context.Context, sink *Sink, want ...int) {
	t.Helper()
	got, err := sink.Tail(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = got[i].ID == deadlineMsg(want[i])[0].ID
	}
	if !ok {
		t.Fatalf("the partition holds %d messages (%v), want those of Sends %v only", len(got), got, want)
	}
}

func TestWithSendDeadlineKeepsTheEarlier(t *testing.T) {
	ctx := ctxT(t, time.Second)
	a := time.Now().Add(time.Second)
	ctx = connector.WithSendDeadline(ctx, a)
	if got, _ := connector.SendDeadline(connector.WithSendDeadline(ctx, a.Add(time.Hour))); !got.Equal(a) {
		t.Errorf("a later deadline replaced the earlier: %v", got)
	}
	if got, _ := connector.SendDeadline(connector.WithSendDeadline(ctx, a.Add(-time.Millisecond))); !got.Equal(a.Add(-time.Millisecond)) {
		t.Errorf("an earlier deadline was not kept: %v", got)
	}
}

// A batch whose send deadline passes while it is being retried (the broker
// refuses connections, a write times out) is failed, not retried for good:
// nothing of it may be written any more, and a batch retried for ever kept
// its partition's dead letters from leaving (stress runs of accounts'
// TestInstances and TestScaleOut under load: "partition N has K messages
// to publish" until the test gave up).
func TestSinkFailsABatchWhoseDeadlinePassesWhileRetried(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	ctx := ctxT(t, 30*time.Second)
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	msg := deadlineMsg
	if err := sink.Send(ctx, msg(1)); err != nil { // the sink's connection is up
		t.Fatal(err)
	}
	// The broker goes away for longer than the lease has left: every
	// attempt fails until the deadline has passed.
	srv.RefuseConnections(3 * time.Second)
	srv.DropConnections()
	soon := connector.WithSendDeadline(ctx, time.Now().Add(300*time.Millisecond))
	if err := sink.Send(soon, msg(2)); !errors.Is(err, errPastSendDeadline) {
		t.Fatalf("Send whose deadline passed while it was retried = %v, want errPastSendDeadline", err)
	}
	// The sink goes on: a later Send is written once the broker is back.
	if err := sink.Send(ctx, msg(3)); err != nil {
		t.Fatal(err)
	}
	onlyIDs(t, ctx, sink, 1, 3)
}
