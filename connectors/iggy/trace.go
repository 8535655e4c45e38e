package iggy

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// traceParentLen is the length of a version-00 W3C traceparent value.
const traceParentLen = 55

// traceParent returns the W3C Trace Context traceparent value of the span
// ctx carries ("00-<trace id>-<span id>-<flags>"), or nil when it carries
// no valid span context. A publisher writes it as the traceparent header of
// every message it sends in that context (docs/design.md §5), so that
// consumers can link their processing to it.
func traceParent(ctx context.Context) []byte {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	b := make([]byte, traceParentLen)
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return b
}
