package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/strand-io/strand/internal/rowenc"
	"github.com/strand-io/strand/planner"
)

// Foreign input (docs/design.md, "Foreign input"): a source whose producers
// write no strand headers. Its connector delivers each message with its raw
// user headers (Record.Raw); before anything reads a record's headers, the
// runtime hands the message to the source's classifier, which gives its key,
// type tag and, optionally, its fence and sequence number. From there on a
// foreign record is planned, re-sequenced, applied and dead-lettered like
// any other.

// ErrUnclassified is wrapped by the error of a record of a foreign source
// that its classifier could not classify: the classifier returned an error
// or panicked, or the key it gave encodes to 0 or more than MaxKeyLen
// bytes, or the fence it gave is not valid. Such a record is dead-lettered
// with ReasonUnclassified.
var ErrUnclassified = errors.New("stream: foreign record not classified")

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

// ForeignMessage is one message of a foreign source as its classifier sees
// it. Headers and Payload alias the record's bytes: the classifier must not
// modify them, nor keep them past its return.
type ForeignMessage struct {
	// Partition and Offset say where the message is in its source.
	Partition uint32
	Offset    uint64
	// Timestamp is the broker's append time in microseconds since the Unix
	// epoch, or 0 when unknown.
	Timestamp uint64
	// ID is the broker's message id, or zero when unknown.
	ID [16]byte
	// Headers are the message's user headers as the producer wrote them.
	Headers []Field
	// Payload is the message body.
	Payload []byte
}

// Header returns the value of the first header named name, and false when
// the message has none.
func (m *ForeignMessage) Header(name string) ([]byte, bool) {
	for i := range m.Headers {
		if m.Headers[i].Name == name {
			return m.Headers[i].Value, true
		}
	}
	return nil, false
}

// Classified is what a classifier says of a foreign message: what the
// strand headers of a strand publisher's message would have said.
type Classified[K any] struct {
	// Key is the message's key: the events of one key keep their order,
	// are folded into its table rows and handed to handlers with it. The
	// source's key codec encodes it, to 1..MaxKeyLen bytes. It is the
	// record's key whatever the decoded event's own key (its Key method, or
	// DeclareFunc's function) is: that one is not consulted, so a key may
	// be anything the message tells (its partition, for a topic that is
	// not keyed, to be re-keyed with topology.KeyBy).
	Key K
	// Tag names the event type: the tag of a declaration the topology
	// handles on the source, or one it skips. Another tag makes the record
	// a dead letter (ReasonUnknownType).
	Tag planner.Tag
	// Ordering is the event's fence, for types declared with FenceBy; 0
	// means Relaxed. A type with a static fence is planned with its
	// declaration's fence whatever Ordering says, as for strand records.
	Ordering planner.Ordering
	// Seq is the producer's sequence number of the event within its key
	// (the strand-seq header of a strand publisher), for re-sequenced
	// sources; 0 means none.
	Seq uint64
}

// ForeignConnector is a Connector that can also read foreign topics: topics
// whose producers write no strand headers. The front door opens a source
// declared foreign (topology.ForeignSource) with OpenForeignSource and
// refuses a connector without it. connectors/iggy's Client and
// topologytest's in-memory connector implement it.
type ForeignConnector interface {
	Connector
	// OpenForeignSource returns the source named topic, which must exist,
	// whose readers deliver every record with Raw set (its message id and
	// every user header, kinds kept) and its strand headers unparsed:
	// HeaderErr is set only when the message's headers are malformed as
	// the broker's format goes.
	OpenForeignSource(ctx context.Context, topic string) (Source, error)
}

// appendRaw appends the row encoding of m (id, then its headers) to dst.
func appendRaw(dst []byte, m *RawMessage) []byte {
	dst = append(dst, m.ID[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
	for _, f := range m.Headers {
		dst = append(dst, byte(f.NameKind))
		dst = rowenc.AppendString(dst, f.Name)
		dst = append(dst, byte(f.ValueKind))
		dst = rowenc.AppendString(dst, string(f.Value))
	}
	return dst
}

// readRaw decodes what appendRaw wrote; the bytes are copied.
func readRaw(r *rowenc.Reader) *RawMessage {
	m := &RawMessage{}
	for i := range m.ID {
		m.ID[i] = r.Byte()
	}
	n := r.Uvarint()
	if n > uint64(len(r.B)) { // each header takes at least a byte
		r.Err = rowenc.ErrShort
		return m
	}
	m.Headers = make([]Field, 0, n)
	for range n {
		var f Field
		f.NameKind = FieldKind(r.Byte())
		f.Name = string(r.Bytes())
		f.ValueKind = FieldKind(r.Byte())
		f.Value = r.Bytes()
		if r.Err != nil {
			return m
		}
		m.Headers = append(m.Headers, f)
	}
	return m
}
