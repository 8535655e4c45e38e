package iggy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/testrun"
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
// Sent says the message is there.
//
// The broker holds the request until the new sink is looking, whatever
// the machine's speed: without a log until Sent answered, with one until
// the sink first lists the server's clients (the wait for the dead
// session); so Sent looks inside the window in both cases, and the test
// asserts both answers.
func TestSessionLogClosesTheWindowAcrossAKill(t *testing.T) {
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
			held := holdFirstSend(t, srv, 0, iggytest.Pass)
			var looking atomic.Bool // the next process's sink exists
			remove := srv.Control(func(r *iggytest.Request) iggytest.Reply {
				if r.Command == iggytest.CmdGetClients && looking.Load() {
					held.release() // the new sink waits for the dead session
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
			msg := letter()
			sent := make(chan error, 1)
			go func() { sent <- sink1.Send(context.Background(), msg) }()
			<-held.reached
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
			looking.Store(true)
			got, err := sink2.Sent(ctxT(t, 60*time.Second), msg)
			if err != nil {
				t.Fatal(err)
			}
			looked := time.Since(killed)
			landedBefore := !held.releasedAt().IsZero()
			held.release() // without a log, the held request lands only now
			t.Logf("%s: Sent looked %v after the kill and said %v; the held request was let go %v after the kill",
				name, looked.Round(time.Millisecond), got[0], held.releasedAt().Sub(killed).Round(time.Millisecond))
			switch {
			case withLog && !got[0]:
				t.Fatalf("with a session log, Sent said the message was not sent although the dead process's request was held (window left open)")
			case withLog && !landedBefore:
				t.Fatalf("with a session log, Sent answered without listing the server's clients")
			case !withLog && got[0]:
				t.Fatalf("without a session log, Sent said the message was sent while its request was still held")
			}
			// The held request lands: once, as nothing here sends it again.
			var n int
			testrun.WaitFor(t, 10*time.Second, func() error {
				if n = count(t, c2, s, topic, 0); n == 0 {
					return fmt.Errorf("partition holds %d messages, want 1", n)
				}
				return nil
			})
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
