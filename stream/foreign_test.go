package stream_test

import (
	"testing"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// rawField draws a header as Iggy carries it: 1..255-byte name and value,
// any kinds; names include the ones strand gives meaning to.

// A foreign record's dead letter carries the original headers first, kinds
// kept, whatever their names (strand's own included), and reads back with
// them; its strand headers and dead-letter fields read back as for any
// dead letter.

// Rows: a record or dead letter without a raw message is written as before
// (version 1); with one, version 2 keeps it, id and kinds included.

func TestForeignMessageHeader(t *testing.T) {
	m := stream.ForeignMessage{Headers: []connector.Field{{Name: "a", Value: []byte("1")}, {Name: "b", Value: []byte("2")}, {Name: "a", Value: []byte("3")}}}
	if v, ok := m.Header("a"); !ok || string(v) != "1" {
		t.Errorf("Header(a) = %q, %v", v, ok)
	}
	if _, ok := m.Header("c"); ok {
		t.Error("Header(c) found")
	}
	raw := &connector.RawMessage{ID: [16]byte{1}, Headers: m.Headers}
	c := raw.Clone()
	c.Headers[0].Value[0] = 'x'
	if string(m.Headers[0].Value) != "1" || c.ID != raw.ID {
		t.Error("Clone shares bytes")
	}
	if (*connector.RawMessage)(nil).Clone() != nil {
		t.Error("Clone of nil")
	}
}
