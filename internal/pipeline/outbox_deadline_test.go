package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream/connector"
)

// deadlineSink records the send deadline of every Send (the outbox must
// hand the owner's lease end to the sink: a paused owner's queued
// messages are then never written after it).
type deadlineSink struct {
	*partSink
	mu    sync.Mutex
	seen  []time.Time
	unset int
}

func (s *deadlineSink) Send(ctx context.Context, msgs []connector.Message) error {
	s.mu.Lock()
	if t, ok := connector.SendDeadline(ctx); ok {
		s.seen = append(s.seen, t)
	} else {
		s.unset++
	}
	s.mu.Unlock()
	return s.partSink.Send(ctx, msgs)
}

// Every send of an outbox carries the deadline WithPublishDeadline gives
// for its partition; a fenced answer stops Run without sending.
func TestOutboxSendsUnderThePublishDeadline(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := emitFixture(t, 1)
	r := rand.New(rand.NewPCG(9, 10))
	pipeDeposits(t, fx, 200, 10, r)
	a, b := &deadlineSink{partSink: newPartSink(2)}, &deadlineSink{partSink: newPartSink(2)}
	until := time.Now().Add(time.Hour).Round(0)
	var fenced atomic.Bool
	deadline := func(pt uint32) (time.Time, bool, error) {
		if fenced.Load() {
			return time.Time{}, false, fmt.Errorf("partition %d: %w", pt, executor.ErrFenced)
		}
		return until, true, nil
	}
	db := fx.openDB(t)
	defer closeDB(t, db)
	p := newProc(t, fx, db, WithPollSize(50), WithPublishDeadline(deadline), WithDeadLetterBackoff(time.Millisecond, 2*time.Millisecond),
		WithOutboxSinks(map[string]connector.Sink{outTopicA: a, outTopicB: b}))
	run := startProcessor(p)
	waitFor(t, "published", func() bool { return caughtUp(p, fx.src) && pendingNone(p) })
	sent := a.count() + b.count()
	if sent == 0 {
		t.Fatal("nothing was published")
	}
	for _, s := range []*deadlineSink{a, b} {
		s.mu.Lock()
		if s.unset > 0 {
			t.Errorf("%d sends without a send deadline", s.unset)
		}
		for _, got := range s.seen {
			if !got.Equal(until) {
				t.Errorf("a send's deadline is %v, want %v", got, until)
			}
		}
		s.mu.Unlock()
	}
	fenced.Store(true)
	pipeDeposits(t, fx, 50, 10, r)
	err := run.wait(t)
	if !errors.Is(err, executor.ErrFenced) {
		t.Fatalf("Run = %v, want ErrFenced", err)
	}
	if n := a.count() + b.count(); n != sent {
		t.Errorf("%d messages sent after the deadline said fenced", n-sent)
	}
}
