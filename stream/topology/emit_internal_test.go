package topology

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
)

type encodeEvent struct {
	Key  string `json:"key"`
	Seq  uint64 `json:"seq"`
	Note string `json:"note"`
}

// TestEncodeEnvelopeMatchesEnvelope checks that the To step's encoder
// gives what stream.Event.Envelope gives, envelope and error, whatever
// its size hint (a buffer too small, none, a large one).
func TestEncodeEnvelopeMatchesEnvelope(t *testing.T) {
	plain := stream.DeclareFunc[string](7, func(e encodeEvent) string { return e.Key })
	seqd := stream.DeclareFunc[string](8, func(e encodeEvent) string { return e.Key },
		stream.Sequence(func(e encodeEvent) uint64 { return e.Seq }), stream.Fence(planner.Ordering(1)))
	events := []encodeEvent{
		{Key: "a", Seq: 1},
		{Key: "customer-17", Seq: 9, Note: strings.Repeat("x", 300)},
		{Key: "", Seq: 1},                       // an empty key: refused
		{Key: strings.Repeat("k", 256), Seq: 1}, // too long: refused
		{Key: "b", Seq: 0},                      // sequence 0: refused when sequenced
	}
	for _, d := range []*stream.Event[string, encodeEvent]{plain, seqd} {
		if err := d.Err(); err != nil {
			t.Fatal(err)
		}
		for _, h0 := range []int64{0, 1, 40, 4096} {
			var hint atomic.Int64
			hint.Store(h0)
			for i, e := range events {
				want, wantErr := d.Envelope(e)
				got, err := encodeEnvelope(d, e, &hint)
				if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
					t.Fatalf("tag %d hint %d event %d: error %v, want %v", d.Tag(), h0, i, err, wantErr)
				}
				if wantErr != nil {
					if errors.Is(wantErr, stream.ErrBadSequence) != errors.Is(err, stream.ErrBadSequence) {
						t.Fatalf("tag %d event %d: %v does not wrap like %v", d.Tag(), i, err, wantErr)
					}
					continue
				}
				gh, wh := got.Headers, want.Headers
				if !bytes.Equal(gh.Key, wh.Key) || gh.Tag != wh.Tag || gh.Ordering != wh.Ordering || gh.Algebra != wh.Algebra ||
					gh.Seq != wh.Seq || gh.HasSeq != wh.HasSeq || !bytes.Equal(got.Payload, want.Payload) {
					t.Fatalf("tag %d hint %d event %d: %+v %q, want %+v %q", d.Tag(), h0, i, gh, got.Payload, wh, want.Payload)
				}
				if cap(gh.Key) != len(gh.Key) {
					t.Fatalf("event %d: the key has room after it (%d of %d): appends would write into the payload", i, len(gh.Key), cap(gh.Key))
				}
			}
		}
	}
}
