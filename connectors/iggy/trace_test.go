package iggy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// A publisher writes the traceparent of the span its context carries on
// every message, and nothing without one; the source hands it out on the
// record's headers, and EndOffsets reports the partitions' ends.
func TestTraceParentRoundTripAndEndOffsets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg := newTarget(t)
	c := tg.connect(t)
	name := fmt.Sprintf("trace-%d", time.Now().UnixNano())
	if err := c.EnsureTopic(ctx, name, "log", 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteStream(context.Background(), name) })
	pub, err := NewPublisher(ctx, c, name, "log")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled})
	env := stream.Envelope{Headers: connector.Headers{Key: []byte("k"), Tag: 1, Ordering: planner.Relaxed}, Payload: []byte("x")}
	if err := pub.Send(trace.ContextWithSpanContext(ctx, sc), env, env); err != nil {
		t.Fatal(err)
	}
	if err := pub.Send(ctx, env); err != nil {
		t.Fatal(err)
	}
	_ = pub.Close(ctx)

	src, err := NewSource(c, name, "log")
	if err != nil {
		t.Fatal(err)
	}
	ends, err := src.EndOffsets(ctx)
	if err != nil || len(ends) != 1 || ends[0] != 3 {
		t.Fatalf("EndOffsets = %v, %v; want [3]", ends, err)
	}
	rd, err := src.Open(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	recs, err := rd.Poll(ctx, 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("Poll = %d records, %v", len(recs), err)
	}
	const want = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for i, r := range recs[:2] {
		if r.HeaderErr != nil || string(r.Headers.TraceParent) != want {
			t.Errorf("record %d: traceparent %q (%v), want %q", i, r.Headers.TraceParent, r.HeaderErr, want)
		}
	}
	if recs[2].Headers.TraceParent != nil {
		t.Errorf("a message published without a span carries traceparent %q", recs[2].Headers.TraceParent)
	}
}

func TestParseStrandHeadersWithTraceParentDoesNotAllocate(t *testing.T) {
	h := connector.Headers{Key: []byte("account-42"), Tag: 3, Ordering: planner.Acquire}
	b, _ := appendStrandHeaders(nil, &h)
	b = appendTLV(b, connector.HeaderTraceParent, []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	allocs := testing.AllocsPerRun(100, func() {
		got, err := parseStrandHeaders(b)
		if err != nil || len(got.TraceParent) != traceParentLen {
			t.Fatal(got, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("parseStrandHeaders allocates %v times per message", allocs)
	}
}
