package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/rowenc"
	"github.com/strand-io/strand/internal/rowfmt"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"

	"github.com/strand-io/strand/internal/state"
)

// parkedKey is one key whose events wait: behind a failing run (retried
// after next) or behind a poison event (manual, until Release).
type parkedKey struct {
	key      []byte
	attempts int    // failed tries of the record at failedAt, in a row
	failedAt uint64 // offset of the first unapplied record of the failing run
	next     time.Time
	manual   bool
	lastErr  string
	records  []connector.Record // in offset order; they own their bytes
}

// Row layout in state.FamilyParked, under the task's partition:
//
//	meta:   uvarint-prefixed source, 'k', uvarint-prefixed key
//	record: uvarint-prefixed source, 'r', uvarint-prefixed key, offset (u64 BE)
//
// so one key's rows are contiguous and its records sort by offset.
const (
	parkedMeta   = 'k'
	parkedRecord = 'r'
	parkedFormat = 1
	// parkedMetaFormat 2 adds the failing record's offset; format 1 rows
	// (written before it) are read with the key's first parked record as
	// the failing one, which is what it was.
	parkedMetaFormat = 2
)

// attemptOf returns the try that processing the parked record at offset
// will be: one more than the failed tries if the key stopped there, else 1.
func (pk *parkedKey) attemptOf(offset uint64) int {
	if pk.attempts > 0 && offset == pk.failedAt {
		return pk.attempts + 1
	}
	return 1
}

func (t *Task) parkedKeyRow(key []byte) []byte {
	b := rowenc.AppendString(nil, t.src.name)
	b = append(b, parkedMeta)
	return rowenc.AppendString(b, string(key))
}

func (t *Task) parkedRecordRow(key []byte, offset uint64) []byte {
	b := rowenc.AppendString(nil, t.src.name)
	b = append(b, parkedRecord)
	b = rowenc.AppendString(b, string(key))
	return binary.BigEndian.AppendUint64(b, offset)
}

func (pk *parkedKey) metaValue() []byte {
	b := []byte{parkedMetaFormat}
	if pk.manual {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(pk.attempts))
	b = binary.BigEndian.AppendUint64(b, uint64(pk.next.UnixNano()))
	b = rowenc.AppendString(b, pk.lastErr)
	return binary.BigEndian.AppendUint64(b, pk.failedAt)
}

// Parked records are rows in connector.Record's binary encoding (version 1,
// parkedFormat), under their partition.
func encodeParkedRecord(r connector.Record) []byte {
	return rowfmt.AppendRecord(nil, r)
}

func decodeParkedRecord(partition uint32, data []byte) (connector.Record, error) {
	r := connector.Record{Partition: partition}
	if err := rowfmt.DecodeRecord(data, &r); err != nil {
		return connector.Record{}, fmt.Errorf("parked record: %w", err)
	}
	return r, nil
}

// loadParked reads the task's parked keys and records from the database.
func (t *Task) loadParked(ctx context.Context) error {
	legacy := map[string]bool{} // keys whose meta row predates failedAt
	err := t.db.Rows(ctx, state.FamilyParked, t.partition, func(key, value []byte) error {
		rd := rowenc.Reader{B: key}
		if rd.String() != t.src.name {
			return nil
		}
		kind := rd.Byte()
		k := rd.Bytes()
		if rd.Err != nil {
			return fmt.Errorf("%w: parked row key %x: %w", stream.ErrCodec, key, rd.Err)
		}
		pk, ok := t.parked[string(k)]
		if !ok {
			pk = &parkedKey{key: k}
			t.parked[string(k)] = pk
		}
		switch kind {
		case parkedMeta:
			vr := rowenc.Reader{B: value}
			format := vr.Byte()
			if format != parkedFormat && format != parkedMetaFormat {
				return fmt.Errorf("%w: parked key %q: format %d unknown", stream.ErrCodec, k, format)
			}
			pk.manual = vr.Byte() == 1
			pk.attempts = int(vr.Uvarint())
			pk.next = time.Unix(0, int64(vr.U64()))
			pk.lastErr = vr.String()
			if format == parkedMetaFormat {
				pk.failedAt = vr.U64()
			} else {
				legacy[string(k)] = true
			}
			if vr.Err != nil {
				return fmt.Errorf("%w: parked key %q: %w", stream.ErrCodec, k, vr.Err)
			}
		case parkedRecord:
			r, err := decodeParkedRecord(t.partition, value)
			if err != nil {
				return fmt.Errorf("parked record of key %q: %w", k, err)
			}
			pk.records = append(pk.records, r)
		default:
			return fmt.Errorf("%w: parked row key %x: kind %q unknown", stream.ErrCodec, key, kind)
		}
		return nil
	})
	for k := range legacy {
		if pk := t.parked[k]; len(pk.records) > 0 {
			pk.failedAt = pk.records[0].Offset
		}
	}
	return err
}
