package main

import (
	"bytes"
	"context"
	"log"
	"strings"
	"testing"

	"github.com/strand-io/strand/connectors/iggy"
)

// Every message says what is wrong by name and what to do; none echoes
// unbounded input (issue 27, item 4).
func TestMessagesNameWhatIsWrong(t *testing.T) {
	f := newFixture(t)
	_, errb, code := f.strand(t, replayHooks{}, "dlq", "list", "-topic", "nosuch/topic")
	if code != 1 || !strings.Contains(errb, `dead-letter topic nosuch/topic: the server has no stream "nosuch"`) || strings.Contains(errb, "id: 0") {
		t.Errorf("missing stream: %d %q", code, errb)
	}
	_, errb, code = f.strand(t, replayHooks{}, "dlq", "list", "-topic", "t/nosuch")
	if code != 1 || !strings.Contains(errb, "dead-letter topic t/nosuch: the server has no such topic") {
		t.Errorf("missing topic: %d %q", code, errb)
	}
	// The source topic is not a dead-letter topic: replay warns.
	out, errb, code := f.strand(t, replayHooks{}, "dlq", "replay", "-dry-run", "-topic", "t/events")
	if code != 0 || !strings.Contains(errb, "t/events holds 33 messages and none is a dead letter") || !strings.Contains(out, "would replay 0") {
		t.Errorf("replay of a source topic: %d %q %q", code, out, errb)
	}
	// Lag says what waits: nothing, in the fixture's store.
	out, _, code = f.strand(t, replayHooks{}, "lag", "-dir", f.dir)
	if code != 0 || !strings.Contains(out, "total lag 0 records") || !strings.Contains(out, "waiting: nothing") {
		t.Errorf("lag: %d %q", code, out)
	}
	out, _, code = f.strand(t, replayHooks{}, "inspect", f.dir)
	if code != 0 || !strings.Contains(out, "held (open gaps)") || !strings.Contains(out, "outbox (To, KeyBy)") {
		t.Errorf("inspect: %d %q", code, out)
	}
	// A megabyte of bad input is not echoed back.
	huge := strings.Repeat("x", 1<<20)
	for _, args := range [][]string{
		{"dlq", "list", "-topic", huge},
		{"dlq", "list", "-topic", "a/b", "-reason", huge},
		{"dlq", "list", "-topic", "a/b", "-key", "0x" + huge},
	} {
		var o, e bytes.Buffer
		if code := run(context.Background(), args, &o, &e, func(string) string { return "" }); code != 2 || e.Len() > 4096 {
			t.Errorf("strand %.40q...: exit %d, %d bytes of stderr", args, code, e.Len())
		}
	}
}

// The SDK's standard-log chatter, routed as main routes it, is dropped;
// warnings pass.
func TestQuietLoggerDropsSDKChatter(t *testing.T) {
	var buf bytes.Buffer
	restore := iggy.RouteStdLog(quietLogger(&buf))
	log.Print("Checking cluster metadata for leader detection")
	restore()
	if buf.Len() != 0 {
		t.Fatalf("SDK line printed: %q", buf.String())
	}
	quietLogger(&buf).Warn("iggy: reconnecting")
	if !strings.Contains(buf.String(), "reconnecting") {
		t.Fatalf("warning dropped: %q", buf.String())
	}
}
