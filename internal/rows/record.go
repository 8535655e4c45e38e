package rows

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// Row versions of dead letters and records: 2 is 1 followed by the raw
// message, written for records of foreign sources only.
const (
	deadLetterVersion        = 1
	deadLetterVersionForeign = 2
)

// AppendLetter appends the row encoding of d (version 1, or 2 with the raw
// message of a foreign record) to dst.
func AppendLetter(dst []byte, d deadletter.Letter) []byte {
	v := byte(deadLetterVersion)
	if d.Raw != nil {
		v = deadLetterVersionForeign
	}
	dst = append(dst, v, byte(d.Reason))
	dst = AppendString(dst, d.Source)
	dst = binary.BigEndian.AppendUint32(dst, d.Partition)
	dst = binary.BigEndian.AppendUint64(dst, d.Offset)
	dst = binary.BigEndian.AppendUint64(dst, d.Timestamp)
	dst = binary.AppendUvarint(dst, uint64(d.Attempts))
	errText := ""
	if d.Err != nil {
		errText = d.Err.Error()
	}
	dst = AppendString(dst, errText)
	dst = appendHeaders(dst, d.Headers)
	dst = AppendString(dst, string(d.Payload))
	if d.Raw != nil {
		dst = appendRaw(dst, d.Raw)
	}
	return dst
}

// DecodeLetter decodes into d a row written by AppendLetter. The payload and
// key are copied.
func DecodeLetter(data []byte, d *deadletter.Letter) error {
	r := Reader{B: data}
	v := r.Byte()
	if v != deadLetterVersion && v != deadLetterVersionForeign {
		return fmt.Errorf("%w: dead letter row version %d unknown", stream.ErrCodec, v)
	}
	d.Reason = deadletter.Reason(r.Byte())
	d.Source = r.String()
	d.Partition = r.U32()
	d.Offset = r.U64()
	d.Timestamp = r.U64()
	d.Attempts = int(r.Uvarint())
	if text := r.String(); text != "" {
		d.Err = errors.New(text)
	} else {
		d.Err = nil
	}
	d.Headers = readHeaders(&r)
	d.Payload = r.Bytes()
	d.Raw = nil
	if v == deadLetterVersionForeign {
		d.Raw = readRaw(&r)
	}
	if r.Err != nil {
		return fmt.Errorf("%w: dead letter row: %w", stream.ErrCodec, r.Err)
	}
	return nil
}

func appendHeaders(dst []byte, h connector.Headers) []byte {
	dst = AppendString(dst, string(h.Key))
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

func readHeaders(r *Reader) connector.Headers {
	var h connector.Headers
	h.Key = r.Bytes()
	if len(h.Key) == 0 {
		h.Key = nil
	}
	h.Tag = planner.Tag(r.U32())
	h.Ordering = planner.Ordering(r.Byte())
	h.Algebra = algebra.Kind(r.Byte())
	if r.Byte() == 1 {
		h.Seq, h.HasSeq = r.U64(), true
	}
	return h
}

const (
	recordVersion        = 1
	recordVersionForeign = 2
)

// AppendRecord appends the row encoding of r (offset, timestamp, headers,
// payload and, for a record of a foreign source, its raw message; not the
// partition, which the row's place gives) to dst, as the runtime stores
// records that wait (parked behind a failure, held by the re-sequencer).
func AppendRecord(dst []byte, r connector.Record) []byte {
	v := byte(recordVersion)
	if r.Raw != nil {
		v = recordVersionForeign
	}
	dst = append(dst, v)
	dst = binary.BigEndian.AppendUint64(dst, r.Offset)
	dst = binary.BigEndian.AppendUint64(dst, r.Timestamp)
	dst = appendHeaders(dst, r.Headers)
	dst = AppendString(dst, string(r.Payload))
	if r.Raw != nil {
		dst = appendRaw(dst, r.Raw)
	}
	return dst
}

// DecodeRecord decodes into r a row written by AppendRecord; it leaves
// r.Partition alone. The key and payload are copied.
func DecodeRecord(data []byte, r *connector.Record) error {
	rd := Reader{B: data}
	v := rd.Byte()
	if v != recordVersion && v != recordVersionForeign {
		return fmt.Errorf("%w: record row version %d unknown", stream.ErrCodec, v)
	}
	r.Offset = rd.U64()
	r.Timestamp = rd.U64()
	r.Headers = readHeaders(&rd)
	r.Payload = rd.Bytes()
	r.HeaderErr = nil
	r.Raw = nil
	if v == recordVersionForeign {
		r.Raw = readRaw(&rd)
	}
	if rd.Err != nil {
		return fmt.Errorf("%w: record row: %w", stream.ErrCodec, rd.Err)
	}
	return nil
}
