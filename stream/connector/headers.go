package connector

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
)

// Names of the user headers a strand publisher writes on every message
// (docs/design.md §5). Their values are raw bytes.
const (
	// HeaderKey carries the key bytes, 1..255 long.
	HeaderKey = "strand-key"
	// HeaderType carries the type tag as a little-endian u32.
	HeaderType = "strand-type"
	// HeaderProps carries 3 bytes: props version, ordering, algebra kind.
	HeaderProps = "strand-props"
	// HeaderSeq optionally carries the producer's per-key sequence number as
	// a little-endian u64, for the re-sequencer.
	HeaderSeq = "strand-seq"
	// HeaderTraceParent optionally carries the W3C Trace Context
	// traceparent of the span the event was published in (55 ASCII bytes,
	// "00-<trace id>-<span id>-<flags>"). Consumers link their processing
	// spans to it.
	HeaderTraceParent = "traceparent"
	// HeaderOrigin is written by strand on the messages its outbox
	// publishes (topology.To, topology.KeyBy): where the message came from
	// (docs/design.md §11). A topology that reads such a topic drops a
	// message whose origin it has applied already, so a message published
	// twice (a crash between publishing and forgetting it) is applied once.
	HeaderOrigin = "strand-origin"
)

// PropsVersion is the version of the strand-props layout this package
// writes. Readers refuse versions they do not know.
const PropsVersion = 1

// MaxKeyLen is the longest key, in bytes, that strand accepts.
const MaxKeyLen = 255

// ErrBadHeaders is wrapped by every error that ParseHeaders and
// Headers.Validate return, so that callers can tell malformed input from
// other failures with errors.Is.
var ErrBadHeaders = errors.New("strand: bad strand headers")

// Headers are the strand headers of one message: everything the planner
// needs, read without decoding the payload.
type Headers struct {
	// Key is the key bytes (1..MaxKeyLen). It aliases the message's bytes
	// when parsed; copy it to keep it past the record's life.
	Key []byte
	// Tag names the event type.
	Tag planner.Tag
	// Ordering is the event's fence.
	Ordering planner.Ordering
	// Algebra is the law the event's type promises.
	Algebra algebra.Kind
	// Seq is the producer's sequence number of this event within its key;
	// meaningful only when HasSeq is true.
	Seq uint64
	// HasSeq reports whether the message carried a strand-seq header.
	HasSeq bool
	// TraceParent is the value of the message's traceparent header (see
	// HeaderTraceParent), nil when it had none. It aliases the message's
	// bytes when parsed. It is not one of the strand headers proper:
	// Validate and AppendFields ignore it.
	TraceParent []byte
	// Origin is the value of the message's strand-origin header (see
	// HeaderOrigin), nil when it had none. It aliases the message's bytes
	// when parsed. Like TraceParent it is not validated here: a malformed
	// origin is ignored (the record is applied as any other).
	Origin []byte
}

// Validate reports whether h can be written: a key of 1..MaxKeyLen bytes, a
// valid ordering and a valid algebra kind. The error wraps ErrBadHeaders.
func (h Headers) Validate() error {
	if len(h.Key) == 0 || len(h.Key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, want 1..%d", ErrBadHeaders, len(h.Key), MaxKeyLen)
	}
	if !h.Ordering.Valid() {
		return fmt.Errorf("%w: invalid ordering %d for type tag %d", ErrBadHeaders, uint8(h.Ordering), h.Tag)
	}
	if !h.Algebra.Valid() {
		return fmt.Errorf("%w: invalid algebra kind %d for type tag %d", ErrBadHeaders, uint8(h.Algebra), h.Tag)
	}
	return nil
}

// Field is one named header with a raw value, independent of any broker's
// header types.
type Field struct {
	Name  string
	Value []byte
	// NameKind and ValueKind are the types the broker gave the name and
	// the value, for headers of foreign messages (RawMessage); 0, the kind
	// of every header strand writes, means a string name and a raw value.
	NameKind, ValueKind FieldKind
}

// AppendFields validates h and appends its header fields to dst: key, type,
// props and, when HasSeq, seq. The values are freshly allocated.
func (h Headers) AppendFields(dst []Field) ([]Field, error) {
	if err := h.Validate(); err != nil {
		return dst, err
	}
	var buf [8 + 4 + 3]byte
	binary.LittleEndian.PutUint32(buf[0:4], uint32(h.Tag))
	buf[4], buf[5], buf[6] = PropsVersion, byte(h.Ordering), byte(h.Algebra)
	key := append([]byte(nil), h.Key...)
	dst = append(dst,
		Field{Name: HeaderKey, Value: key},
		Field{Name: HeaderType, Value: append([]byte(nil), buf[0:4]...)},
		Field{Name: HeaderProps, Value: append([]byte(nil), buf[4:7]...)},
	)
	if h.HasSeq {
		seq := make([]byte, 8)
		binary.LittleEndian.PutUint64(seq, h.Seq)
		dst = append(dst, Field{Name: HeaderSeq, Value: seq})
	}
	return dst, nil
}

// ParseHeaders builds Headers from the raw values of the strand headers of
// one message. A nil seq means the message had no strand-seq header; a nil
// key, typ or props means that header was missing. The returned Key aliases
// key. Every error wraps ErrBadHeaders and says which header was wrong.
func ParseHeaders(key, typ, props, seq []byte) (Headers, error) {
	var h Headers
	switch {
	case key == nil:
		return h, fmt.Errorf("%w: %s header missing", ErrBadHeaders, HeaderKey)
	case typ == nil:
		return h, fmt.Errorf("%w: %s header missing", ErrBadHeaders, HeaderType)
	case props == nil:
		return h, fmt.Errorf("%w: %s header missing", ErrBadHeaders, HeaderProps)
	}
	if len(typ) != 4 {
		return h, fmt.Errorf("%w: %s is %d bytes, want 4", ErrBadHeaders, HeaderType, len(typ))
	}
	if len(props) < 1 || props[0] != PropsVersion {
		v := -1
		if len(props) > 0 {
			v = int(props[0])
		}
		return h, fmt.Errorf("%w: %s version %d unknown (this reader knows %d)", ErrBadHeaders, HeaderProps, v, PropsVersion)
	}
	if len(props) != 3 {
		return h, fmt.Errorf("%w: %s is %d bytes, want 3", ErrBadHeaders, HeaderProps, len(props))
	}
	h.Key = key
	h.Tag = planner.Tag(binary.LittleEndian.Uint32(typ))
	h.Ordering = planner.Ordering(props[1])
	h.Algebra = algebra.Kind(props[2])
	if seq != nil {
		if len(seq) != 8 {
			return Headers{}, fmt.Errorf("%w: %s is %d bytes, want 8", ErrBadHeaders, HeaderSeq, len(seq))
		}
		h.Seq, h.HasSeq = binary.LittleEndian.Uint64(seq), true
	}
	if err := h.Validate(); err != nil {
		return Headers{}, err
	}
	return h, nil
}
