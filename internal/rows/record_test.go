package rows_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"pgregory.net/rapid"
)

func TestForeignRowsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var raw *connector.RawMessage
		if rapid.Bool().Draw(t, "foreign") {
			raw = rawMessage(t)
			copy(raw.ID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "id"))
		}
		r := connector.Record{Offset: 9, Timestamp: 5, Payload: []byte("p"), Raw: raw,
			Headers: connector.Headers{Key: []byte("k"), Tag: 2, Ordering: planner.Release, Seq: 4, HasSeq: true}}
		b := rows.AppendRecord(nil, r)
		if want := byte(1); raw != nil {
			want = 2
			if b[0] != want {
				t.Fatalf("record row version %d, want %d", b[0], want)
			}
		} else if b[0] != want {
			t.Fatalf("record row version %d, want %d", b[0], want)
		}
		var back connector.Record
		if err := rows.DecodeRecord(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Raw, raw) || back.Offset != 9 || string(back.Headers.Key) != "k" || back.Headers.Seq != 4 {
			t.Fatalf("record read back %+v, want raw %+v", back, raw)
		}
		d := deadletter.Letter{Source: "s", Offset: 9, Reason: deadletter.ReasonUnclassified, Err: errors.New("e"), Payload: []byte("p"), Raw: raw}
		b = rows.AppendLetter(nil, d)
		var dback deadletter.Letter
		if err := rows.DecodeLetter(b, &dback); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dback.Raw, raw) || dback.Reason != d.Reason || dback.Err.Error() != "e" {
			t.Fatalf("dead letter read back %+v, want raw %+v", dback, raw)
		}
		// Truncated rows are errors, never panics.
		for n := range len(b) {
			var x deadletter.Letter
			if err := rows.DecodeLetter(b[:n], &x); err == nil && n < len(b) && raw != nil {
				t.Fatalf("a dead-letter row cut to %d of %d bytes decoded", n, len(b))
			}
		}
	})
}

// rawMessage draws the id-less part of a foreign record's raw message:
// up to five headers of any kinds, bytes and names.
func rawMessage(t *rapid.T) *connector.RawMessage {
	m := &connector.RawMessage{Headers: []connector.Field{}}
	for range rapid.IntRange(0, 5).Draw(t, "headers") {
		m.Headers = append(m.Headers, connector.Field{
			Name: rapid.StringN(1, 20, 255).Draw(t, "name"), Value: rapid.SliceOfN(rapid.Byte(), 1, 255).Draw(t, "value"),
			NameKind: connector.FieldKind(rapid.IntRange(0, 15).Draw(t, "name kind")), ValueKind: connector.FieldKind(rapid.IntRange(0, 15).Draw(t, "value kind"))})
	}
	return m
}

func TestLetterRowRoundTrip(t *testing.T) {
	dl := deadletter.Letter{
		Source: "bank/accounts", Partition: 3, Offset: 77, Timestamp: 5,
		Reason: deadletter.ReasonDecode, Err: errors.New("bad json"), Attempts: 2,
		Headers: connector.Headers{Key: []byte("k"), Tag: 4, Ordering: planner.Release, Seq: 9, HasSeq: true},
		Payload: []byte("{"),
	}
	b := rows.AppendLetter(nil, dl)
	var back deadletter.Letter
	if err := rows.DecodeLetter(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Source != dl.Source || back.Offset != 77 || back.Err.Error() != "bad json" || back.Headers.Seq != 9 || string(back.Payload) != "{" || back.Attempts != 2 {
		t.Fatalf("round trip %+v", back)
	}
	if err := rows.DecodeLetter(b[:len(b)-3], &back); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("truncated row: %v", err)
	}
}
