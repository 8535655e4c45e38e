package rows

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// Parked rows, in state.FamilyParked under the task's partition:
//
//	meta:   AppendString(source) 'k' AppendString(key)
//	        → format(2) manual(1) uvarint(attempts) next(u64 BE ns)
//	          AppendString(last error) failedAt(u64 BE)
//	record: AppendString(source) 'r' AppendString(key) offset(u64 BE)
//	        → AppendRecord
//
// so one key's rows are contiguous and its records sort by offset. Meta
// rows of format 1 (written before failedAt) lack the failing record's
// offset; they are still read.
const (
	// ParkedKindMeta marks a key's meta row.
	ParkedKindMeta = 'k'
	// ParkedKindRecord marks a parked record's row.
	ParkedKindRecord = 'r'
	parkedFormat     = 1
	parkedMetaFormat = 2
)

// ParkedMetaKey is the key of the meta row of a parked key of source.
func ParkedMetaKey(source string, key []byte) []byte {
	b := AppendString(nil, source)
	b = append(b, ParkedKindMeta)
	return AppendString(b, string(key))
}

// ParkedRecordKey is the key of the row of the parked record of key at
// offset.
func ParkedRecordKey(source string, key []byte, offset uint64) []byte {
	b := AppendString(nil, source)
	b = append(b, ParkedKindRecord)
	b = AppendString(b, string(key))
	return binary.BigEndian.AppendUint64(b, offset)
}

// ParseParkedKey splits the key of a state.FamilyParked row (after the
// partition) into its source, kind (ParkedKindMeta or ParkedKindRecord)
// and parked key; the kind is not checked.
func ParseParkedKey(k []byte) (source string, kind byte, key []byte, err error) {
	rd := Reader{B: k}
	source = rd.String()
	kind = rd.Byte()
	key = rd.Bytes()
	if rd.Err != nil {
		return "", 0, nil, fmt.Errorf("%w: parked row key %x: %w", stream.ErrCodec, k, rd.Err)
	}
	return source, kind, key, nil
}

// ParkedMeta is the value of a parked key's meta row.
type ParkedMeta struct {
	Manual   bool      // held by a poison record, until released
	Attempts int       // failed tries of the record at FailedAt, in a row
	Next     time.Time // when the key is retried
	LastErr  string
	FailedAt uint64 // the first unapplied record's offset
	// HasFailedAt is false for a row of format 1, which lacks FailedAt.
	HasFailedAt bool
}

// AppendParkedMeta appends the meta row value of m (format 2).
func AppendParkedMeta(dst []byte, m ParkedMeta) []byte {
	dst = append(dst, parkedMetaFormat)
	if m.Manual {
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(m.Attempts))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.Next.UnixNano()))
	dst = AppendString(dst, m.LastErr)
	return binary.BigEndian.AppendUint64(dst, m.FailedAt)
}

// DecodeParkedMeta decodes a meta row value of format 1 or 2.
func DecodeParkedMeta(v []byte) (ParkedMeta, error) {
	var m ParkedMeta
	vr := Reader{B: v}
	format := vr.Byte()
	if format != parkedFormat && format != parkedMetaFormat {
		return m, fmt.Errorf("%w: format %d unknown", stream.ErrCodec, format)
	}
	m.Manual = vr.Byte() == 1
	m.Attempts = int(vr.Uvarint())
	m.Next = time.Unix(0, int64(vr.U64()))
	m.LastErr = vr.String()
	if format == parkedMetaFormat {
		m.FailedAt, m.HasFailedAt = vr.U64(), true
	}
	if vr.Err != nil {
		return ParkedMeta{}, fmt.Errorf("%w: %w", stream.ErrCodec, vr.Err)
	}
	return m, nil
}

// DecodeParkedRecord decodes the row value of a parked record of
// partition.
func DecodeParkedRecord(partition uint32, data []byte) (connector.Record, error) {
	r := connector.Record{Partition: partition}
	if err := DecodeRecord(data, &r); err != nil {
		return connector.Record{}, fmt.Errorf("parked record: %w", err)
	}
	return r, nil
}

// DeadLettersPrefix is the start of the keys of a source partition's
// state.FamilyDeadLetters rows (after the partition):
//
//	key:   AppendString(source) offset(u64 BE)
//	value: AppendLetter
func DeadLettersPrefix(source string) []byte { return AppendString(nil, source) }

// DeadLetterKey is the key of the dead-letter row of the record of source at
// offset.
func DeadLetterKey(source string, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(DeadLettersPrefix(source), offset)
}
