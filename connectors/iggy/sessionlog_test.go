package iggy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream/connector"
)

// TestSessionLogClosesTheWindowAcrossAKill is issue 24's window across a
// kill on Iggy 0.8: a process sends a message, the broker holds the
// request, the process dies (its connections close); the next process
// asks its sink whether the message was sent. Without a session log it
// cannot know that a request of its predecessor is still held: it looks
// at once, finds nothing, and strand would send the message again — the
// held request then lands too. With WithSessionLog the new sink waits
// until the server no longer lists the dead process's recorded session,
// so the request has landed (or is dropped for good) before it looks:
// Sent says the message is there. The test logs how long after the kill
// each look happened against when the message landed (the window).
func TestSessionLogClosesTheWindowAcrossAKill(t *testing.T) {
	const hold = 1500 * time.Millisecond
	for _, withLog := range []bool{false, true} {
		name := "without session log"
		if withLog {
			name = "with session log"
		}
		t.Run(name, func(t *testing.T) {
			tg := newTarget(t)
			srv := tg.faults(t)
			setup := tg.connect(t)
			s, topic := tg.topic(t, setup, 1)
			path := filepath.Join(t.TempDir(), "dlq.sessions")
			var opts []PublisherOption
			if withLog {
				opts = append(opts, WithSessionLog(path))
			}
			held := make(chan struct{})
			var once sync.Once
			var landedAt time.Time
			var mu sync.Mutex
			remove := srv.Control(func(r *iggytest.Request) iggytest.Reply {
				if r.Command != iggytest.CmdSendMessages {
					return iggytest.Reply{}
				}
				first := false
				once.Do(func() { first = true; close(held) })
				if first {
					time.AfterFunc(hold, func() { mu.Lock(); landedAt = time.Now(); mu.Unlock() })
					return iggytest.Reply{Delay: hold}
				}
				return iggytest.Reply{}
			})
			defer remove()

			// The first process: sends, and dies while the broker holds it.
			// Protocol 0.8 (the embedded broker speaks both): its window.
			c1, err := Connect(context.Background(), tg.addr, tg.options(WithProtocol(Protocol08))...)
			if err != nil {
				t.Fatal(err)
			}
			sink1, err := NewSink(ctxT(t, 10*time.Second), c1, s, topic, opts...)
			if err != nil {
				t.Fatal(err)
			}
			msg := []connector.Message{{Key: []byte("k"), ID: MessageID([]byte("dlq"), []byte("1")), Payload: []byte("letter")}}
			sent := make(chan error, 1)
			go func() { sent <- sink1.Send(context.Background(), msg) }()
			<-held
			if withLog {
				b, err := os.ReadFile(path)
				if err != nil || strings.TrimSpace(string(b)) == "" {
					t.Fatalf("the session log holds %q (%v) while a send is at the broker", b, err)
				}
			}
			killed := time.Now()
			c1.Close() // its sockets close, as a kill's would
			<-sent
			closeCtx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = sink1.Close(closeCtx)

			// The next process asks whether the message was sent.
			c2 := tg.connect(t, WithProtocol(Protocol08))
			sink2, err := NewSink(ctxT(t, 10*time.Second), c2, s, topic, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer sink2.Close(ctxT(t, 10*time.Second))
			got, err := sink2.Sent(ctxT(t, 60*time.Second), msg)
			if err != nil {
				t.Fatal(err)
			}
			looked := time.Since(killed)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				ok := !landedAt.IsZero()
				mu.Unlock()
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the held request was never applied")
				}
			}
			mu.Lock()
			landed := landedAt.Sub(killed)
			mu.Unlock()
			t.Logf("%s: Sent looked %v after the kill and said %v; the held request was applied %v after the kill",
				name, looked.Round(time.Millisecond), got[0], landed.Round(time.Millisecond))
			if withLog && !got[0] {
				t.Fatalf("with a session log, Sent said the message was not sent although the dead process's request was held (window left open)")
			}
			// The held request lands (it was applied as the timer fired):
			// once, as nothing here sends it again.
			n := count(t, c2, s, topic, 0)
			for deadline := time.Now().Add(10 * time.Second); n == 0 && time.Now().Before(deadline); n = count(t, c2, s, topic, 0) {
				time.Sleep(10 * time.Millisecond)
			}
			if n != 1 {
				t.Fatalf("partition holds %d messages, want 1", n)
			}
		})
	}
}

// TestWithSessionLogRefusesAnEmptyPath: the option names itself.
func TestWithSessionLogRefusesAnEmptyPath(t *testing.T) {
	var c pubConfig
	if err := WithSessionLog("").apply(&c); err == nil || !strings.Contains(err.Error(), "iggy.WithSessionLog") {
		t.Fatalf("WithSessionLog(\"\") = %v", err)
	}
}
