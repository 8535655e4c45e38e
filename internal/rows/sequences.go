package rows

import (
	"encoding/binary"
	"fmt"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// The re-sequencer's rows (docs/design.md §10), under the task's partition:
//
//	FamilyHolds:     AppendString(source) AppendString(key) seq(u64 BE)
//	                 → format, since (u64 BE ns), AppendRecord
//	FamilySequences: AppendString(source) 'n' AppendString(key)
//	                 → format, next (uvarint)
//	FamilySequences: AppendString(source) 'g' AppendString(key) from(u64 BE)
//	                 → format, to, age ns, at ns (u64 BE each), cause, policy
//	FamilySequences: AppendString(source) 'd' batch number (u64 BE)
//	                 → format, count (uvarint), count × (AppendString(key), next uvarint)
//
// One row per held record: a key's holds are contiguous and sort by
// number. Next numbers are written as one delta row ('d') per batch (every
// key the batch changed, with its new next number) rather than one row per
// key per batch; now and then a batch folds the deltas into the keys' own
// rows ('n') and deletes them. The delta rows sort before the 'g' and 'n'
// rows of their source.
const (
	// SeqFormat is the first byte of every hold and sequence row value.
	SeqFormat = 1
	// SeqKindNext marks a key's own next-number row.
	SeqKindNext = 'n'
	// SeqKindGap marks a gap notice's row.
	SeqKindGap = 'g'
	// SeqKindDelta marks a batch's delta row of next numbers.
	SeqKindDelta = 'd'
)

// DeltaKey is the key of the delta row of batch number n of source.
func DeltaKey(source string, n uint64) []byte {
	b := AppendString(nil, source)
	b = append(b, SeqKindDelta)
	return binary.BigEndian.AppendUint64(b, n)
}

// DecodeDelta calls fn with every key and next number of a delta row.
func DecodeDelta(v []byte, fn func(key []byte, next uint64)) error {
	rd := Reader{B: v}
	if f := rd.Byte(); f != SeqFormat {
		return fmt.Errorf("%w: sequence delta row: format %d unknown", stream.ErrCodec, f)
	}
	n := rd.Uvarint()
	for i := uint64(0); i < n && rd.Err == nil; i++ {
		k := rd.Bytes()
		next := rd.Uvarint()
		if rd.Err == nil {
			fn(k, next)
		}
	}
	if rd.Err != nil {
		return fmt.Errorf("%w: sequence delta row: %w", stream.ErrCodec, rd.Err)
	}
	return nil
}

// HoldsPrefix is the start of the keys of the held records of one key of
// source.
func HoldsPrefix(source string, key []byte) []byte {
	return AppendString(AppendString(nil, source), string(key))
}

// HoldKey is the key of the row of the record of key held with number seq.
func HoldKey(source string, key []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(HoldsPrefix(source, key), seq)
}

// SeqNextKey is the key of key's own next-number row.
func SeqNextKey(source string, key []byte) []byte {
	return AppendSeqNextKey(nil, AppendString(nil, source), string(key))
}

// AppendSeqNextKey appends to dst the key of key's own next-number row,
// given the source's prefix AppendString(source) (a batch writes many).
func AppendSeqNextKey(dst, sourcePrefix []byte, key string) []byte {
	dst = append(append(dst, sourcePrefix...), SeqKindNext)
	return AppendString(dst, key)
}

// GapKey is the key of the gap notice of key starting at number from.
func GapKey(source string, key []byte, from uint64) []byte {
	b := AppendString(nil, source)
	b = append(b, SeqKindGap)
	b = AppendString(b, string(key))
	return binary.BigEndian.AppendUint64(b, from)
}

// AppendHold appends the value of a hold row: the record r, held since
// since (unix nanoseconds).
func AppendHold(dst []byte, since int64, r *connector.Record) []byte {
	b := append(dst, SeqFormat)
	b = binary.BigEndian.AppendUint64(b, uint64(since))
	b = AppendRecord(b, *r)
	return b
}

// DecodeHold decodes a hold row value of partition: since when the record
// is held, and the record.
func DecodeHold(partition uint32, v []byte) (int64, connector.Record, error) {
	if len(v) < 9 || v[0] != SeqFormat {
		return 0, connector.Record{}, fmt.Errorf("%w: hold row: bad format", stream.ErrCodec)
	}
	since := int64(binary.BigEndian.Uint64(v[1:9]))
	r := connector.Record{Partition: partition}
	if err := DecodeRecord(v[9:], &r); err != nil {
		return 0, connector.Record{}, fmt.Errorf("hold row: %w", err)
	}
	return since, r, nil
}

// AppendGap appends the value of a gap notice's row.
func AppendGap(dst []byte, g *stream.GapNotice) []byte {
	b := append(dst, SeqFormat)
	b = binary.BigEndian.AppendUint64(b, g.To)
	b = binary.BigEndian.AppendUint64(b, uint64(g.Age))
	b = binary.BigEndian.AppendUint64(b, uint64(g.At.UnixNano()))
	return append(b, byte(g.Cause), byte(g.Policy))
}
