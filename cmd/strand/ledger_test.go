package main

import (
	"errors"
	"strings"
	"testing"
)

// A replay killed after recording a batch's intent but before sending it
// sent nothing: the next replay settles the batch (it finds none of its
// messages past the recorded ends) and sends every dead letter once; the
// markers are not taken for dead letters or foreign messages.
func TestReplayLedgerSettlesAnIntentThatWasNeverSent(t *testing.T) {
	f := newFixture(t)
	before := len(f.destination(t))
	killed := errors.New("killed before the send")
	_, errOut, code := f.strand(t, replayHooks{beforeSend: func(int) error { return killed }}, "dlq", "replay", "-topic", "t/events.dlq", "-batch", "8")
	if code == 0 || !strings.Contains(errOut, "killed before the send") {
		t.Fatalf("interrupted replay: %d %s", code, errOut)
	}
	if n := len(f.destination(t)) - before; n != 0 {
		t.Fatalf("a replay stopped before its send sent %d messages", n)
	}
	out, errOut, code := f.strand(t, replayHooks{}, "dlq", "replay", "-topic", "t/events.dlq", "-batch", "8")
	if code != 0 || !strings.Contains(out, "settled 1 interrupted replay batches") || !strings.Contains(out, "replayed 20 dead letters; 0 were already replayed; 3 skipped") {
		t.Fatalf("replay after the interruption: %d\n%s\n%s", code, out, errOut)
	}
	ids := f.destination(t)
	if len(ids) != before+20 {
		t.Fatalf("source topic holds %d distinct messages, want %d", len(ids), before+20)
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("message %x is in the source topic %d times", id, n)
		}
	}
	out, errOut, code = f.strand(t, replayHooks{}, "dlq", "list", "-topic", "t/events.dlq")
	if code != 0 || !strings.Contains(out, "23 dead letters") || strings.Contains(out, "other messages") || strings.Contains(errOut, "warning") {
		t.Fatalf("dlq list with ledger markers in the topic: %d\n%s\n%s", code, out, errOut)
	}
}
