package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/zeebo/xxh3"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
)

// Reason says why an event was dead-lettered.
type Reason uint8

const (
	// ReasonBadHeaders: the record's strand headers were missing or
	// malformed (Record.HeaderErr, or headers that do not validate).
	ReasonBadHeaders Reason = 1
	// ReasonUnknownType: no handler of the topology takes the record's
	// type tag, and the tag is not skipped.
	ReasonUnknownType Reason = 2
	// ReasonDecode: the payload did not decode with the type's codec.
	ReasonDecode Reason = 3
	// ReasonBadKey: the key bytes did not decode with the type's key
	// codec.
	ReasonBadKey Reason = 4
	// ReasonPermanent: a handler failed with a Permanent error.
	ReasonPermanent Reason = 5
	// ReasonExhausted: a handler kept failing until the program's
	// MaxAttempts were used up.
	ReasonExhausted Reason = 6
)

// String returns the reason as written in dead-letter headers:
// "bad-headers", "unknown-type", "undecodable", "bad-key",
// "permanent-failure", "retries-exhausted".
func (r Reason) String() string {
	switch r {
	case ReasonBadHeaders:
		return "bad-headers"
	case ReasonUnknownType:
		return "unknown-type"
	case ReasonDecode:
		return "undecodable"
	case ReasonBadKey:
		return "bad-key"
	case ReasonPermanent:
		return "permanent-failure"
	case ReasonExhausted:
		return "retries-exhausted"
	}
	return "reason-" + strconv.Itoa(int(r))
}

// Names of the headers a dead-letter message carries besides the original
// record's strand headers (when they were valid).
const (
	HeaderDLQReason    = "strand-dlq-reason"
	HeaderDLQError     = "strand-dlq-error"
	HeaderDLQSource    = "strand-dlq-source"
	HeaderDLQPartition = "strand-dlq-partition"
	HeaderDLQOffset    = "strand-dlq-offset"
	HeaderDLQAttempts  = "strand-dlq-attempts"
)

// DeadLetter is an event strand refused or gave up on, with why and where
// it came from. A Task writes every dead letter into its commit (family
// state.FamilyDeadLetters) so that a runtime can publish it exactly once,
// and reports it in Result and to the OnDeadLetter callback.
type DeadLetter struct {
	// Source, Partition and Offset say where the record was read.
	Source    string
	Partition uint32
	Offset    uint64
	// Timestamp is the record's broker timestamp (µs), or 0.
	Timestamp uint64
	// Reason says why the record was dead-lettered.
	Reason Reason
	// Err is the error; after a round trip through a row only its text
	// is kept.
	Err error
	// Attempts is how many times the failing run the record was in was
	// tried in a row (for ReasonExhausted, MaxAttempts; for
	// ReasonPermanent, the try that failed), counted for the run's first
	// unapplied record as MaxAttempts counts; 0 when the record was refused
	// before any handler saw it (bad headers, unknown type, decode).
	Attempts int
	// Headers are the record's strand headers; zero when HeaderErr was set.
	Headers Headers
	// Payload is the record's payload, unchanged.
	Payload []byte
}

// Message turns d into a message for a dead-letter topic: the original
// payload, the original strand headers when they were valid, and headers
// for reason, error text, source, partition, offset and attempts. The
// message id is derived from source, partition and offset, so re-sending
// the same dead letter sends the same id. The key is the original key, or
// "source/partition" when the headers were bad.
func (d DeadLetter) Message() Message {
	m := Message{Payload: d.Payload, ID: d.ID()}
	if len(d.Headers.Key) > 0 {
		if fs, err := d.Headers.AppendFields(nil); err == nil {
			m.Headers = fs
			m.Key = append([]byte(nil), d.Headers.Key...)
		}
	}
	if m.Key == nil {
		m.Key = []byte(d.Source + "/" + strconv.FormatUint(uint64(d.Partition), 10))
		if len(m.Key) > MaxKeyLen {
			m.Key = m.Key[len(m.Key)-MaxKeyLen:]
		}
	}
	errText := ""
	if d.Err != nil {
		errText = d.Err.Error()
	}
	m.Headers = append(m.Headers,
		Field{Name: HeaderDLQReason, Value: []byte(d.Reason.String())},
		Field{Name: HeaderDLQError, Value: []byte(errText)},
		Field{Name: HeaderDLQSource, Value: []byte(d.Source)},
		Field{Name: HeaderDLQPartition, Value: []byte(strconv.FormatUint(uint64(d.Partition), 10))},
		Field{Name: HeaderDLQOffset, Value: []byte(strconv.FormatUint(d.Offset, 10))},
		Field{Name: HeaderDLQAttempts, Value: []byte(strconv.Itoa(d.Attempts))},
	)
	return m
}

// ID returns the dead letter's stable 16-byte message id: a hash of
// source, partition and offset.
func (d DeadLetter) ID() [16]byte {
	b := make([]byte, 0, len(d.Source)+16)
	b = append(b, d.Source...)
	b = binary.BigEndian.AppendUint32(b, d.Partition)
	b = binary.BigEndian.AppendUint64(b, d.Offset)
	return xxh3.Hash128(b).Bytes()
}

// String describes d for logs.
func (d DeadLetter) String() string {
	return fmt.Sprintf("dead letter %s/%d@%d (%s): %v", d.Source, d.Partition, d.Offset, d.Reason, d.Err)
}

const deadLetterVersion = 1

// AppendBinary appends the row encoding of d (version 1) to dst.
func (d DeadLetter) AppendBinary(dst []byte) ([]byte, error) {
	dst = append(dst, deadLetterVersion, byte(d.Reason))
	dst = appendString(dst, d.Source)
	dst = binary.BigEndian.AppendUint32(dst, d.Partition)
	dst = binary.BigEndian.AppendUint64(dst, d.Offset)
	dst = binary.BigEndian.AppendUint64(dst, d.Timestamp)
	dst = binary.AppendUvarint(dst, uint64(d.Attempts))
	errText := ""
	if d.Err != nil {
		errText = d.Err.Error()
	}
	dst = appendString(dst, errText)
	dst = appendHeaders(dst, d.Headers)
	dst = appendString(dst, string(d.Payload))
	return dst, nil
}

// UnmarshalBinary decodes a row written by AppendBinary. The payload and
// key are copied.
func (d *DeadLetter) UnmarshalBinary(data []byte) error {
	r := reader{b: data}
	if v := r.byte(); v != deadLetterVersion {
		return fmt.Errorf("%w: dead letter row version %d unknown", ErrCodec, v)
	}
	d.Reason = Reason(r.byte())
	d.Source = r.string()
	d.Partition = r.u32()
	d.Offset = r.u64()
	d.Timestamp = r.u64()
	d.Attempts = int(r.uvarint())
	if text := r.string(); text != "" {
		d.Err = errors.New(text)
	} else {
		d.Err = nil
	}
	d.Headers = r.headers()
	d.Payload = r.bytes()
	if r.err != nil {
		return fmt.Errorf("%w: dead letter row: %w", ErrCodec, r.err)
	}
	return nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendHeaders(dst []byte, h Headers) []byte {
	dst = appendString(dst, string(h.Key))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.Tag))
	dst = append(dst, byte(h.Ordering), byte(h.Algebra))
	if h.HasSeq {
		dst = append(dst, 1)
		dst = binary.BigEndian.AppendUint64(dst, h.Seq)
	} else {
		dst = append(dst, 0)
	}
	return dst
}

// reader decodes the row encodings of this package; the first problem
// sticks in err and later reads return zero values.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("row too short")

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = errShort
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) byte() byte {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func (r *reader) u64() uint64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	b := r.take(int(n))
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func (r *reader) string() string { return string(r.bytes()) }

func (r *reader) headers() Headers {
	var h Headers
	h.Key = r.bytes()
	if len(h.Key) == 0 {
		h.Key = nil
	}
	h.Tag = planner.Tag(r.u32())
	h.Ordering = planner.Ordering(r.byte())
	h.Algebra = algebra.Kind(r.byte())
	if r.byte() == 1 {
		h.Seq, h.HasSeq = r.u64(), true
	}
	return h
}
