package iggy

import (
	"bytes"
	"errors"
	"log"
	"log/slog"
	"strings"
	"testing"
)

func TestRouteStdLogSendsLinesToSlogAndRestores(t *testing.T) {
	var buf bytes.Buffer
	prev := log.Writer()
	restore := RouteStdLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.Printf("first line\nsecond line")
	restore()
	restore() // idempotent
	if log.Writer() != prev {
		t.Fatal("restore did not put the previous writer back")
	}
	out := buf.String()
	if strings.Count(out, "source=stdlog") != 2 || !strings.Contains(out, `msg="first line"`) || !strings.Contains(out, `msg="second line"`) {
		t.Fatalf("slog got %q", out)
	}
}

func TestClientCloseStopsAReaderMidPoll(t *testing.T) {
	tg := newTarget(t)
	c, err := Connect(ctxT(t, 5e9), tg.addr, tg.options()...)
	if err != nil {
		t.Fatal(err)
	}
	s, topic := tg.topic(t, tg.connect(t), 1)
	src, _ := NewSource(c, s, topic)
	r, err := src.Open(ctxT(t, 5e9), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Poll(ctxT(t, 10e9), 10)
		done <- err
	}()
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Poll after Client.Close: %v", err)
	}
	r.Close()
}
