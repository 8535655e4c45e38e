package iggy

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

func TestConnectToUnreachableServerFailsFastAndClearly(t *testing.T) {
	// A port nothing listens on: listen, note the address, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	start := time.Now()
	_, err = Connect(context.Background(), addr, WithDialTimeout(time.Second), WithLogger(testLogger()))
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Connect to %s: got %v, want an error wrapping ErrUnreachable", addr, err)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name the address %s", err, addr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Connect took %v to fail, want about the dial timeout", d)
	}
}

func TestConnectWhereNothingAnswersHonoursTheDialTimeout(t *testing.T) {
	// 192.0.2.0/24 is TEST-NET-1: packets go nowhere, so the dial hangs
	// until the timeout (or fails at once with no route; both are fine).
	start := time.Now()
	_, err := Connect(context.Background(), "192.0.2.1:8090", WithDialTimeout(300*time.Millisecond), WithLogger(testLogger()))
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("got %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Connect took %v, want about 300ms", d)
	}
}

func TestConnectWithWrongPasswordIsRefusedClearly(t *testing.T) {
	tg := newTarget(t)
	_, err := Connect(context.Background(), tg.addr, WithCredentials(tg.user, "definitely-not-the-password"), WithLogger(testLogger()))
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("got %v, want an error wrapping ErrAuth", err)
	}
	if !errors.Is(err, ierror.ErrInvalidCredentials) {
		t.Errorf("error %v does not wrap the SDK's ErrInvalidCredentials", err)
	}
	if !strings.Contains(err.Error(), tg.user) {
		t.Errorf("error %q does not name the user", err)
	}
}

func TestConnectWithPersonalAccessToken(t *testing.T) {
	tg := newTarget(t, iggytest.WithPersonalAccessToken("strand-token"))
	tg.faults(t) // the token exists only on the embedded broker
	c, err := Connect(context.Background(), tg.addr, WithPersonalAccessToken("strand-token"), WithLogger(testLogger()))
	if err != nil {
		t.Fatalf("Connect with token: %v", err)
	}
	c.Close()
	_, err = Connect(context.Background(), tg.addr, WithPersonalAccessToken("wrong-token"), WithLogger(testLogger()))
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong token: got %v, want ErrAuth", err)
	}
}

func TestEnsureTopicCreatesAndAcceptsTheSameCount(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 4) // creates
	ctx := ctxT(t, 10*time.Second)
	if err := c.EnsureTopic(ctx, s, topic, 4); err != nil {
		t.Fatalf("EnsureTopic on the existing topic: %v", err)
	}
	if n, err := c.Partitions(ctx, s, topic); err != nil || n != 4 {
		t.Fatalf("Partitions = %d, %v; want 4", n, err)
	}
	// A second topic in the same (existing) stream.
	if err := c.EnsureTopic(ctx, s, "other", 2); err != nil {
		t.Fatalf("EnsureTopic of a second topic: %v", err)
	}
}

func TestEnsureTopicRefusesAnotherPartitionCount(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 4)
	err := c.EnsureTopic(ctxT(t, 10*time.Second), s, topic, 8)
	if !errors.Is(err, ErrPartitionCountMismatch) {
		t.Fatalf("got %v, want ErrPartitionCountMismatch", err)
	}
	for _, want := range []string{"4 partitions", "8", s + "/" + topic} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestMissingTopicWrapsTheSDKSentinel(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, _ := tg.topic(t, c, 1)
	ctx := ctxT(t, 10*time.Second)
	_, err := c.Partitions(ctx, s, "no-such-topic")
	if !errors.Is(err, ierror.ErrTopicIdNotFound) || !strings.Contains(err.Error(), "no-such-topic") {
		t.Fatalf("missing topic: got %v, want ierror.ErrTopicIdNotFound naming the topic", err)
	}
	_, err = c.Partitions(ctx, "no-such-stream-strand", "t")
	if !errors.Is(err, ierror.ErrStreamIdNotFound) || !strings.Contains(err.Error(), "no-such-stream-strand") {
		t.Fatalf("missing stream: got %v, want ierror.ErrStreamIdNotFound naming the stream", err)
	}
	if _, err := NewPublisher(ctx, c, s, "no-such-topic"); !errors.Is(err, ierror.ErrTopicIdNotFound) {
		t.Fatalf("NewPublisher on a missing topic: got %v", err)
	}
}

func TestCallTimeoutFailsClearlyAndTheNextCallRecovers(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t, WithCallTimeout(300*time.Millisecond))
	s, topic := tg.topic(t, c, 2)
	ctx := ctxT(t, 10*time.Second)

	srv.DelayNext(iggytest.CmdGetTopic, 1, 2*time.Second)
	start := time.Now()
	_, err := c.Partitions(ctx, s, topic)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("delayed call: got %v, want ErrTimeout", err)
	}
	if !strings.Contains(err.Error(), "300ms") || !strings.Contains(err.Error(), s) {
		t.Errorf("error %q should give the timeout and the topic", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("timed-out call took %v, want about 300ms", d)
	}
	if n, err := c.Partitions(ctx, s, topic); err != nil || n != 2 {
		t.Fatalf("call after the timeout: %d, %v; want it to reconnect and succeed", n, err)
	}
}

func TestContextCancelAbortsACallInFlight(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	srv.DelayNext(iggytest.CmdGetTopic, 1, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Partitions(ctx, s, topic)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("cancelled call took %v", d)
	}
	if _, err := c.Partitions(ctxT(t, 5*time.Second), s, topic); err != nil {
		t.Fatalf("call after the cancel: %v", err)
	}
}

func TestClientReconnectsAfterDroppedConnections(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 3)
	srv.DropConnections()
	ctx := ctxT(t, 10*time.Second)
	// The first call after the drop finds a dead socket, reconnects and
	// repeats itself.
	if n, err := c.Partitions(ctx, s, topic); err != nil || n != 3 {
		t.Fatalf("call after drop: %d, %v", n, err)
	}
}

func TestConnectWhileTheServerRefusesConnections(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	srv.RefuseConnections(500 * time.Millisecond)
	_, err := Connect(ctxT(t, 5*time.Second), tg.addr, tg.options()...)
	if err == nil || !(errors.Is(err, ErrDisconnected) || errors.Is(err, ErrUnreachable)) {
		t.Fatalf("got %v, want a connection error", err)
	}
	// Once the refusal ends, a Connect succeeds: each attempt takes its
	// own backoff, so this waits on the server, not on a guessed time.
	var c *Client
	for deadline := time.Now().Add(10 * time.Second); c == nil; {
		if c, err = Connect(ctxT(t, 5*time.Second), tg.addr, tg.options()...); err != nil && time.Now().After(deadline) {
			t.Fatalf("after the refusal ended: %v", err)
		}
	}
	c.Close()
}

func TestClosedClientFailsWithErrClosed(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	c.Close()
	if _, err := c.Partitions(context.Background(), "s", "t"); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	b := backoff{min: 10 * time.Millisecond, max: 200 * time.Millisecond}
	for attempt := range 100 {
		d := b.delay(attempt)
		want := min(b.min<<min(attempt, 20), b.max)
		if d < want/2 || d > want {
			t.Fatalf("delay(%d) = %v, want in [%v, %v]", attempt, d, want/2, want)
		}
	}
}
