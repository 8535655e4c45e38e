package connector

import (
	"context"
	"strconv"
	"strings"
)

// FieldKind is the type a broker gave a header name or value. Iggy's user
// headers are typed (raw bytes, a string, a bool, integers, floats); a
// record of a foreign source keeps the kinds its producer wrote, so that a
// replay writes the headers back as they were. The values are Iggy's
// numbering. The zero value means the kind strand writes: a string name and
// a raw value.
type FieldKind uint8

// The kinds of Iggy 0.8's user headers.
const (
	FieldRaw     FieldKind = 1
	FieldString  FieldKind = 2
	FieldBool    FieldKind = 3
	FieldInt8    FieldKind = 4
	FieldInt16   FieldKind = 5
	FieldInt32   FieldKind = 6
	FieldInt64   FieldKind = 7
	FieldInt128  FieldKind = 8
	FieldUint8   FieldKind = 9
	FieldUint16  FieldKind = 10
	FieldUint32  FieldKind = 11
	FieldUint64  FieldKind = 12
	FieldUint128 FieldKind = 13
	FieldFloat   FieldKind = 14
	FieldDouble  FieldKind = 15
)

var fieldKindNames = [...]string{"default", "raw", "string", "bool", "int8", "int16", "int32", "int64", "int128",
	"uint8", "uint16", "uint32", "uint64", "uint128", "float", "double"}

// String returns the kind's name ("raw", "string", "uint64", ...),
// "default" for 0, or "kind-N" for an unknown value.
func (k FieldKind) String() string {
	if int(k) < len(fieldKindNames) {
		return fieldKindNames[k]
	}
	return "kind-" + strconv.Itoa(int(k))
}

// Valid reports whether k is 0 or one of the kinds above.
func (k FieldKind) Valid() bool { return k <= FieldDouble }

// RawMessage is what a record of a foreign source keeps of the message as
// the broker delivered it, besides its position and payload: its message id
// and its user headers, in order, with their kinds. Names and values are 1
// to 255 bytes each (Iggy's limits).
type RawMessage struct {
	// ID is the broker's message id (for Iggy, set by the producer or
	// random), or zero when unknown. A dead letter read back from its
	// topic has none.
	ID [16]byte
	// Headers are the message's user headers, every one of them (strand
	// headers too, if the producer wrote any).
	Headers []Field
}

// Clone returns a copy of m that aliases nothing m aliases; nil for nil.
func (m *RawMessage) Clone() *RawMessage {
	if m == nil {
		return nil
	}
	c := &RawMessage{ID: m.ID}
	if m.Headers != nil {
		c.Headers = make([]Field, len(m.Headers))
		for i, f := range m.Headers {
			f.Name = strings.Clone(f.Name)
			f.Value = append([]byte(nil), f.Value...)
			c.Headers[i] = f
		}
	}
	return c
}

// ForeignConnector is a Connector that can also read foreign topics: topics
// whose producers write no strand headers. The front door opens a source
// declared foreign (topology.ForeignSource) with OpenForeignSource and
// refuses a connector without it. connectors/iggy's Client and
// memconn's in-memory Broker implement it.
type ForeignConnector interface {
	Connector
	// OpenForeignSource returns the source named topic, which must exist,
	// whose readers deliver every record with Raw set (its message id and
	// every user header, kinds kept) and its strand headers unparsed:
	// HeaderErr is set only when the message's headers are malformed as
	// the broker's format goes.
	OpenForeignSource(ctx context.Context, topic string) (Source, error)
}
