package deadletter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/deadletter"
)

func TestWindowLetterRoundTrip(t *testing.T) {
	if s := deadletter.ReasonWindowFinal.String(); s != "window-final-failed" {
		t.Fatalf("String() = %q", s)
	}
	if r, err := deadletter.ParseReason("window-final-failed"); err != nil || r != deadletter.ReasonWindowFinal {
		t.Fatalf("ParseReason = %v, %v", r, err)
	}
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	w := deadletter.Window{Table: "hourly", Key: []byte{0, 'k', 0xff}, Start: start, End: start.Add(time.Hour), Aggregate: []byte(`{"Sum":3}`)}
	dl := deadletter.Letter{Source: "s", Partition: 2, Offset: 9, Reason: deadletter.ReasonWindowFinal, Err: errors.New("boom"), Attempts: 1, Payload: w.Payload()}
	got, err := dl.Window()
	if err != nil {
		t.Fatal(err)
	}
	if got.Table != w.Table || string(got.Key) != string(w.Key) || !got.Start.Equal(w.Start) || !got.End.Equal(w.End) || string(got.Aggregate) != string(w.Aggregate) {
		t.Fatalf("Window() = %+v, want %+v", got, w)
	}
	// Two windows of one batch (same offset) have distinct ids; a record's
	// letter at that offset too.
	w2 := w
	w2.Start, w2.End = w.End, w.End.Add(time.Hour)
	dl2 := dl
	dl2.Payload = w2.Payload()
	rec := deadletter.Letter{Source: "s", Partition: 2, Offset: 9, Reason: deadletter.ReasonDecode}
	if dl.ID() == dl2.ID() || dl.ID() == rec.ID() || dl2.ID() == rec.ID() {
		t.Fatalf("ids not distinct: %x %x %x", dl.ID(), dl2.ID(), rec.ID())
	}
	// A timer's letter with the same payload bytes has another id.
	tl := dl
	tl.Reason = deadletter.ReasonTimer
	if tl.ID() == dl.ID() {
		t.Fatal("a timer's letter and a window's with one payload share an id")
	}
	if _, err := rec.Window(); !errors.Is(err, deadletter.ErrNotWindow) {
		t.Fatalf("Window() of a record's letter: %v", err)
	}
	bad := dl
	bad.Payload = []byte("{")
	if _, err := bad.Window(); !errors.Is(err, deadletter.ErrNotWindow) {
		t.Fatalf("Window() of a bad payload: %v", err)
	}
	if _, err := dl.Timer(); !errors.Is(err, deadletter.ErrNotTimer) {
		t.Fatalf("Timer() of a window's letter: %v", err)
	}
}
