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
		stream.WithSequence(func(e encodeEvent) uint64 { return e.Seq }), stream.WithFence(planner.Ordering(1)))
	events := []encodeEvent{
		{Key: "a", Seq: 1},
		{Key: "customer-17", Seq: 9, Note: strings.Repeat("x", 300)},
		{Key: "c", Seq: 2, Note: strings.Repeat("y", 20000)}, // larger than a buffer
		{Key: "d", Seq: 3, Note: "after the large one"},
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
			var buf []byte
			var held [][]byte // what earlier envelopes hold, as encoded
			var envs []stream.Envelope
			for i, e := range events {
				want, wantErr := d.Envelope(e)
				got, b, err := encodeEnvelope(d, e, &hint, buf)
				buf = b
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
				if cap(gh.Key) != len(gh.Key) || cap(got.Payload) != len(got.Payload) {
					t.Fatalf("event %d: the key or the payload has room after it: appends would write into the next envelope", i)
				}
				envs = append(envs, got)
				held = append(held, bytes.Clone(gh.Key), bytes.Clone(got.Payload))
			}
			// Later envelopes never wrote into the bytes of earlier ones.
			for j, env := range envs {
				if !bytes.Equal(env.Headers.Key, held[2*j]) || !bytes.Equal(env.Payload, held[2*j+1]) {
					t.Fatalf("tag %d hint %d: envelope %d changed after later ones were encoded", d.Tag(), h0, j)
				}
			}
		}
	}
}
