package iggy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/stream/connector"
)

// heldSend is the broker holding the first message send of a test
// (holdFirstSend): a request that is at the broker and not answered yet.
type heldSend struct {
	reached  chan struct{} // closed when the held request is at the broker
	released chan struct{} // closed when its hold ends
	once     sync.Once
	mu       sync.Mutex
	at       time.Time // when the hold ended
}

// release ends the hold (the broker then handles the request); only for
// a hold without a duration. Safe to call more than once, also from a
// control function.
func (h *heldSend) release() {
	h.once.Do(func() {
		h.mu.Lock()
		h.at = time.Now()
		h.mu.Unlock()
		close(h.released)
	})
}

// releasedAt is when the hold ended; zero while it lasts.
func (h *heldSend) releasedAt() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at
}

// holdFirstSend makes the broker hold the first SendMessages request it
// gets, then handle it as action says (Pass: applied and answered late;
// Drop: its connection dropped); every other request goes through at once.
// The hold lasts d, or with d == 0 until release is called (at the latest
// when the test ends).
func holdFirstSend(t *testing.T, srv *iggytest.Server, d time.Duration, action iggytest.Action) *heldSend {
	t.Helper()
	h := &heldSend{reached: make(chan struct{}), released: make(chan struct{})}
	var first sync.Once
	remove := srv.Control(func(r *iggytest.Request) iggytest.Reply {
		if r.Command != iggytest.CmdSendMessages {
			return iggytest.Reply{}
		}
		held := false
		first.Do(func() { held = true; close(h.reached) })
		switch {
		case !held:
			return iggytest.Reply{}
		case d > 0:
			time.AfterFunc(d, h.release) // the broker applies it as the delay ends
			return iggytest.Reply{Delay: d, Action: action}
		default:
			<-h.released
			return iggytest.Reply{Action: action}
		}
	})
	t.Cleanup(func() { h.release(); remove() })
	return h
}

// letter is the message the settle tests send: a dead letter with an id.
func letter() []connector.Message {
	return []connector.Message{{Key: []byte("k"), ID: MessageID([]byte("dlq"), []byte("1")), Payload: []byte("letter")}}
}

// TestSentWaitsForTheSendInFlight is the graceful stop of issue 24: a
// dead letter's Send gets no reply in time (the broker holds the request),
// the caller's context ends, and the caller asks Sent before sending the
// letter again. Sent must wait for the request still in flight — answered
// late, or its connection dropped — and never say "not sent" for a message
// that then lands: that would publish it twice.
func TestSentWaitsForTheSendInFlight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action iggytest.Action
	}{
		{"answered late", iggytest.Pass},
		{"connection dropped", iggytest.Drop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t)
			srv := tg.faults(t)
			c := tg.connect(t)
			s, topic := tg.topic(t, c, 1)
			sink, err := NewSink(ctxT(t, 10*time.Second), c, s, topic)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close(ctxT(t, 10*time.Second))
			// A hold of a fixed length: Sent must not end it, and a Sent that
			// did not wait would answer within it.
			held := holdFirstSend(t, srv, 700*time.Millisecond, tc.action)
			msg := letter()
			ctx, cancel := context.WithCancel(context.Background())
			sent := make(chan error, 1)
			go func() { sent <- sink.Send(ctx, msg) }()
			<-held.reached // the request is at the broker, unanswered
			cancel()
			if err := <-sent; err == nil {
				t.Fatal("Send returned nil although the broker had not answered")
			}
			start := time.Now()
			got, err := sink.Sent(ctxT(t, 30*time.Second), msg)
			if err != nil {
				t.Fatal(err)
			}
			if !got[0] {
				t.Fatalf("Sent says the message is not sent (after %v) while its request was in flight", time.Since(start))
			}
			if n := count(t, c, s, topic, 0); n != 1 {
				t.Fatalf("partition holds %d messages, want 1", n)
			}
		})
	}
}

// TestGracefulStopDoesNotResendAHeldDeadLetter is issue 24's graceful
// stop: the broker holds a dead letter's send, the processor is stopped
// meanwhile (its Send returns the context's error), and its last pass asks
// the sink whether the letter was sent. The sink waits for the held request
// first, so the letter is in the dead-letter topic once, after this run and
// the next.
func TestGracefulStopDoesNotResendAHeldDeadLetter(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	r := newDLQRig(t, tg, tg.connect(t))
	r.publish(40) // 3 poison events
	held := holdFirstSend(t, srv, 1500*time.Millisecond, iggytest.Pass)
	db := r.open()
	defer db.Close()
	err := r.run(db, pipeline.Hooks{}, func(*pipeline.Processor) bool {
		select {
		case <-held.reached: // a dead letter's send is at the broker, unanswered: stop
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	if err := r.run(db, pipeline.Hooks{}, r.finished); err != nil {
		t.Fatalf("second run: %v", err)
	}
	r.check()
}
