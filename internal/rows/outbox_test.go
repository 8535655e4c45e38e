package rows

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// A row of messages decodes to the messages written, with the headers
// connector.Headers.AppendFields gives plus the origin.
func TestOutboxRowRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	origin := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	for range 200 {
		dests := []string{"x/a", "x/bb", "x/ccc"}[:1+r.IntN(3)]
		var enc OutboxEncoder
		enc.Begin(origin, dests)
		first := 1 + r.Uint64N(1<<40)
		n := 1 + r.IntN(300)
		var want []OutboxMsg
		for i := range n {
			h := connector.Headers{Key: randBytes(r, 1+r.IntN(connector.MaxKeyLen)), Tag: planner.Tag(r.Uint32()),
				Ordering: []planner.Ordering{planner.Relaxed, planner.Acquire, planner.Release, planner.AcqRel}[r.IntN(4)],
				Algebra:  algebra.Kind(r.IntN(int(algebra.IdempotentCommutative) + 1)), Seq: r.Uint64(), HasSeq: r.IntN(2) == 0}
			payload := randBytes(r, r.IntN(200))
			d := r.IntN(len(dests))
			enc.Add(d, &h, payload)
			m, _, _, err := OutboxMessage(origin, first+uint64(i), &h, payload, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, OutboxMsg{Seq: first + uint64(i), Dest: dests[d], Msg: m})
			// The fields are those of AppendFields, then the origin.
			fs, err := h.AppendFields(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Headers) != len(fs)+1 {
				t.Fatalf("%d header fields, AppendFields gives %d", len(m.Headers), len(fs))
			}
			for j, f := range fs {
				if m.Headers[j].Name != f.Name || !bytes.Equal(m.Headers[j].Value, f.Value) {
					t.Fatalf("field %d = %s %x, AppendFields %s %x", j, m.Headers[j].Name, m.Headers[j].Value, f.Name, f.Value)
				}
			}
		}
		value := enc.End()
		if c, err := OutboxCount(first, value); err != nil || c != n {
			t.Fatalf("OutboxCount = %d, %v; want %d", c, err, n)
		}
		got, err := DecodeOutbox(first, slices.Clone(value))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d messages decoded, want %d", len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Seq != w.Seq || g.Dest != w.Dest || !bytes.Equal(g.Msg.Key, w.Msg.Key) || g.Msg.ID != w.Msg.ID ||
				!bytes.Equal(g.Msg.Payload, w.Msg.Payload) || len(g.Msg.Headers) != len(w.Msg.Headers) {
				t.Fatalf("message %d: %+v, want %+v", i, g, w)
			}
			for j := range w.Msg.Headers {
				if g.Msg.Headers[j].Name != w.Msg.Headers[j].Name || !bytes.Equal(g.Msg.Headers[j].Value, w.Msg.Headers[j].Value) {
					t.Fatalf("message %d header %d: %+v, want %+v", i, j, g.Msg.Headers[j], w.Msg.Headers[j])
				}
			}
		}
		// Every cut of the row is refused, never a panic.
		for _, cut := range []int{0, 1, 5, len(value) / 2, len(value) - 1} {
			if _, err := DecodeOutbox(first, value[:cut]); err == nil {
				t.Fatalf("a row cut at %d of %d bytes decoded", cut, len(value))
			}
		}
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// FuzzDecodeOutboxRow: no input panics the decoder, and what it accepts it
// accepts consistently with OutboxCount.
func FuzzDecodeOutboxRow(f *testing.F) {
	var enc OutboxEncoder
	enc.Begin([8]byte{9}, []string{"a/b"})
	h := connector.Headers{Key: []byte("k"), Tag: 3, Ordering: planner.Relaxed, Algebra: algebra.NonAssociative}
	enc.Add(0, &h, []byte("payload"))
	h.Seq, h.HasSeq = 5, true
	enc.Add(0, &h, nil)
	f.Add(enc.End())
	m, _, _, _ := OutboxMessage([8]byte{}, 1, &h, []byte("p"), nil, nil)
	f.Add(encodeOutboxV1("a/b", m))
	f.Fuzz(func(t *testing.T, value []byte) {
		msgs, err := DecodeOutbox(17, value)
		if err != nil {
			return
		}
		if n, err := OutboxCount(17, value); err != nil || n != len(msgs) {
			t.Fatalf("decoded %d messages, OutboxCount %d, %v", len(msgs), n, err)
		}
	})
}

// encodeOutboxV1 is the row value of version 1, as strand wrote it before
// runs of messages.
func encodeOutboxV1(dest string, m connector.Message) []byte {
	dst := []byte{outboxVersion1}
	dst = AppendString(dst, dest)
	dst = AppendString(dst, string(m.Key))
	dst = AppendString(dst, string(m.ID[:]))
	dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
	for _, f := range m.Headers {
		dst = AppendString(dst, f.Name)
		dst = AppendString(dst, string(f.Value))
	}
	return AppendString(dst, string(m.Payload))
}
