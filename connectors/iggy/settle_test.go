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
			held := make(chan struct{})
			var once sync.Once
			remove := srv.Control(func(r *iggytest.Request) iggytest.Reply {
				if r.Command != iggytest.CmdSendMessages {
					return iggytest.Reply{}
				}
				first := false
				once.Do(func() { first = true; close(held) })
				if first {
					return iggytest.Reply{Delay: 700 * time.Millisecond, Action: tc.action}
				}
				return iggytest.Reply{}
			})
			defer remove()
			msg := []connector.Message{{Key: []byte("k"), ID: MessageID([]byte("dlq"), []byte("1")), Payload: []byte("letter")}}
			ctx, cancel := context.WithCancel(context.Background())
			sent := make(chan error, 1)
			go func() { sent <- sink.Send(ctx, msg) }()
			<-held // the request is at the broker, unanswered
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
	held := make(chan struct{})
	var once sync.Once
	remove := srv.Control(func(req *iggytest.Request) iggytest.Reply {
		if req.Command != iggytest.CmdSendMessages {
			return iggytest.Reply{}
		}
		first := false
		once.Do(func() { first = true; close(held) })
		if first {
			return iggytest.Reply{Delay: 1500 * time.Millisecond}
		}
		return iggytest.Reply{}
	})
	defer remove()
	db := r.open()
	defer db.Close()
	err := r.run(db, pipeline.Hooks{}, func(*pipeline.Processor) bool {
		select {
		case <-held: // a dead letter's send is at the broker, unanswered: stop
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
