package stream_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
)

func TestReasonUnclassified(t *testing.T) {
	if s := stream.ReasonUnclassified.String(); s != "unclassified" {
		t.Fatalf("String() = %q", s)
	}
	for r := stream.ReasonBadHeaders; r <= stream.ReasonUnclassified; r++ {
		got, err := stream.ParseReason(r.String())
		if err != nil || got != r {
			t.Errorf("ParseReason(%q) = %v, %v", r, got, err)
		}
	}
	if _, err := stream.ParseReason("reason-99"); !errors.Is(err, stream.ErrBadHeaders) {
		t.Errorf("ParseReason of an unknown reason: %v", err)
	}
}

func TestFieldKindString(t *testing.T) {
	for k, want := range map[stream.FieldKind]string{0: "default", stream.FieldRaw: "raw", stream.FieldString: "string",
		stream.FieldUint64: "uint64", stream.FieldDouble: "double", 16: "kind-16"} {
		if got := k.String(); got != want {
			t.Errorf("FieldKind(%d).String() = %q, want %q", k, got, want)
		}
		if k.Valid() != (k <= 15) {
			t.Errorf("FieldKind(%d).Valid() = %v", k, k.Valid())
		}
	}
}

// rawField draws a header as Iggy carries it: 1..255-byte name and value,
// any kinds; names include the ones strand gives meaning to.
func rawField(t *rapid.T, label string) stream.Field {
	name := rapid.OneOf(rapid.Just(stream.HeaderKey), rapid.Just(stream.HeaderDLQReason), rapid.Just(stream.HeaderDLQRaw),
		rapid.StringN(1, 20, 255)).Draw(t, label+" name")
	return stream.Field{
		Name:      name,
		Value:     rapid.SliceOfN(rapid.Byte(), 1, 255).Draw(t, label+" value"),
		NameKind:  stream.FieldKind(rapid.IntRange(0, 15).Draw(t, label+" name kind")),
		ValueKind: stream.FieldKind(rapid.IntRange(0, 15).Draw(t, label+" value kind")),
	}
}

func rawMessage(t *rapid.T) *stream.RawMessage {
	m := &stream.RawMessage{Headers: []stream.Field{}}
	for i := range rapid.IntRange(0, 5).Draw(t, "headers") {
		m.Headers = append(m.Headers, rawField(t, fmt.Sprint("header ", i)))
	}
	return m
}

// A foreign record's dead letter carries the original headers first, kinds
// kept, whatever their names (strand's own included), and reads back with
// them; its strand headers and dead-letter fields read back as for any
// dead letter.
func TestForeignDeadLetterMessageRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		raw := rawMessage(t)
		d := stream.DeadLetter{Source: "s/t", Partition: 3, Offset: 17, Reason: stream.ReasonUnclassified,
			Err: errors.New("no idea"), Payload: []byte("{}"), Raw: raw}
		if rapid.Bool().Draw(t, "classified") {
			d.Reason = stream.ReasonDecode
			d.Headers = stream.Headers{Key: []byte("acct"), Tag: 4, Ordering: planner.Acquire, Algebra: algebra.Associative}
		}
		m := d.Message()
		if !reflect.DeepEqual(m.Headers[:len(raw.Headers)], raw.Headers) && len(raw.Headers) > 0 {
			t.Fatalf("message headers %v do not start with the raw ones %v", m.Headers, raw.Headers)
		}
		got, err := stream.ParseDeadLetter(m)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Raw, raw) {
			t.Fatalf("raw %+v, want %+v", got.Raw, raw)
		}
		if got.Reason != d.Reason || got.Offset != 17 || got.Partition != 3 || got.Source != "s/t" ||
			got.Err.Error() != "no idea" || string(got.Headers.Key) != string(d.Headers.Key) || got.Headers.Tag != d.Headers.Tag {
			t.Fatalf("read back %v (headers %+v), want %v", got, got.Headers, d)
		}
		if len(d.Headers.Key) > 0 && string(m.Key) != "acct" || len(d.Headers.Key) == 0 && string(m.Key) != "s/t/3" {
			t.Fatalf("message key %q", m.Key)
		}
	})
}

func TestStrandDeadLetterHasNoRaw(t *testing.T) {
	d := stream.DeadLetter{Source: "s/t", Reason: stream.ReasonDecode, Payload: []byte("x"),
		Headers: stream.Headers{Key: []byte("k"), Tag: 1, Ordering: planner.Relaxed}}
	m := d.Message()
	for _, f := range m.Headers {
		if f.Name == stream.HeaderDLQRaw {
			t.Fatal("a strand dead letter has a raw count")
		}
	}
	got, err := stream.ParseDeadLetter(m)
	if err != nil || got.Raw != nil {
		t.Fatalf("ParseDeadLetter: raw %+v, %v", got.Raw, err)
	}
}

func TestParseDeadLetterRefusesABadRawCount(t *testing.T) {
	d := stream.DeadLetter{Source: "s/t", Reason: stream.ReasonUnclassified, Payload: []byte("x"), Raw: &stream.RawMessage{}}
	m := d.Message()
	for _, bad := range []string{"7", "-1", "x", ""} {
		m.Headers[len(m.Headers)-1].Value = []byte(bad)
		if _, err := stream.ParseDeadLetter(m); !errors.Is(err, stream.ErrBadHeaders) || !strings.Contains(err.Error(), stream.HeaderDLQRaw) {
			t.Errorf("count %q: %v", bad, err)
		}
	}
}

// Rows: a record or dead letter without a raw message is written as before
// (version 1); with one, version 2 keeps it, id and kinds included.
func TestForeignRowsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var raw *stream.RawMessage
		if rapid.Bool().Draw(t, "foreign") {
			raw = rawMessage(t)
			copy(raw.ID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "id"))
		}
		r := stream.Record{Offset: 9, Timestamp: 5, Payload: []byte("p"), Raw: raw,
			Headers: stream.Headers{Key: []byte("k"), Tag: 2, Ordering: planner.Release, Seq: 4, HasSeq: true}}
		b, _ := r.AppendBinary(nil)
		if want := byte(1); raw != nil {
			want = 2
			if b[0] != want {
				t.Fatalf("record row version %d, want %d", b[0], want)
			}
		} else if b[0] != want {
			t.Fatalf("record row version %d, want %d", b[0], want)
		}
		var back stream.Record
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Raw, raw) || back.Offset != 9 || string(back.Headers.Key) != "k" || back.Headers.Seq != 4 {
			t.Fatalf("record read back %+v, want raw %+v", back, raw)
		}
		d := stream.DeadLetter{Source: "s", Offset: 9, Reason: stream.ReasonUnclassified, Err: errors.New("e"), Payload: []byte("p"), Raw: raw}
		b, _ = d.AppendBinary(nil)
		var dback stream.DeadLetter
		if err := dback.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dback.Raw, raw) || dback.Reason != d.Reason || dback.Err.Error() != "e" {
			t.Fatalf("dead letter read back %+v, want raw %+v", dback, raw)
		}
		// Truncated rows are errors, never panics.
		for n := range len(b) {
			var x stream.DeadLetter
			if err := x.UnmarshalBinary(b[:n]); err == nil && n < len(b) && raw != nil {
				t.Fatalf("a dead-letter row cut to %d of %d bytes decoded", n, len(b))
			}
		}
	})
}

func TestForeignMessageHeader(t *testing.T) {
	m := stream.ForeignMessage{Headers: []stream.Field{{Name: "a", Value: []byte("1")}, {Name: "b", Value: []byte("2")}, {Name: "a", Value: []byte("3")}}}
	if v, ok := m.Header("a"); !ok || string(v) != "1" {
		t.Errorf("Header(a) = %q, %v", v, ok)
	}
	if _, ok := m.Header("c"); ok {
		t.Error("Header(c) found")
	}
	raw := &stream.RawMessage{ID: [16]byte{1}, Headers: m.Headers}
	c := raw.Clone()
	c.Headers[0].Value[0] = 'x'
	if string(m.Headers[0].Value) != "1" || c.ID != raw.ID {
		t.Error("Clone shares bytes")
	}
	if (*stream.RawMessage)(nil).Clone() != nil {
		t.Error("Clone of nil")
	}
}
