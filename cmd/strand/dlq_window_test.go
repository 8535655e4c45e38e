package main

import (
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/deadletter"
)

// A window's failed final result, like a failed timer, describes no event:
// replay skips it and says why.
func TestReplaySkipsWindowAndTimerLetters(t *testing.T) {
	w := deadletter.Letter{Source: "w/events", Partition: 1, Offset: 4, Reason: deadletter.ReasonWindowFinal, Attempts: 1,
		Payload: deadletter.Window{Table: "sums", Key: []byte("a"), Start: time.Unix(0, 0), End: time.Unix(10, 0), Aggregate: []byte("{}")}.Payload()}
	if _, err := replayMessage("w/dlq", w); err == nil || !strings.Contains(err.Error(), "window's failed final result") {
		t.Fatalf("replay of a window's letter: %v", err)
	}
	tm := deadletter.Letter{Source: "w/events", Partition: 1, Offset: 4, Reason: deadletter.ReasonTimer, Attempts: 3,
		Payload: deadletter.Timer{Table: "vals", Key: []byte("a"), At: time.Unix(5, 0)}.Payload()}
	if _, err := replayMessage("w/dlq", tm); err == nil || !strings.Contains(err.Error(), "failed timer") {
		t.Fatalf("replay of a timer's letter: %v", err)
	}
}
