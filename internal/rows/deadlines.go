package rows

import (
	"encoding/binary"
	"time"
)

// Deadlines (docs/design.md §17): the expiries of a table's TTL and its
// timers, rows of state.FamilyTimers.
//
//	kind uvarint(len(table)) table 0x00 at(u64 BE) key  → empty       the index, in due order
//	kind uvarint(len(table)) table 0x01 key              → at(u64 BE)  the key's deadline
//
// at is Unix nanoseconds with the sign bit flipped (EncodeDeadline), so
// that byte order is time order.

// The kinds of deadline.
const (
	DeadlineExpiry = 'X'
	DeadlineTimer  = 'T'
	// DeadlineWindow: a window table's next action per key, in event
	// time; DeadlineStreamTime: its stream time row (internal/engine/windows.go).
	DeadlineWindow     = 'W'
	DeadlineStreamTime = 'M'
)

// DeadlinePrefix returns the prefix of the rows of one kind of deadline of
// one table; DeadlineIndex(prefix) starts its index, DeadlineKey its key
// rows.
func DeadlinePrefix(kind byte, table string) []byte {
	p := []byte{kind}
	p = binary.AppendUvarint(p, uint64(len(table)))
	return append(p, table...)
}

// DeadlineIndex returns the start of the index rows under prefix.
func DeadlineIndex(prefix []byte) []byte {
	return append(append(make([]byte, 0, len(prefix)+1), prefix...), 0x00)
}

// DeadlineIndexKey returns the index row of key due at at (encoded).
func DeadlineIndexKey(prefix []byte, at uint64, key []byte) []byte {
	k := make([]byte, 0, len(prefix)+9+len(key))
	k = append(append(k, prefix...), 0x00)
	k = binary.BigEndian.AppendUint64(k, at)
	return append(k, key...)
}

// DeadlineKey returns the row holding key's deadline.
func DeadlineKey(prefix []byte, key []byte) []byte {
	k := make([]byte, 0, len(prefix)+1+len(key))
	return append(append(append(k, prefix...), 0x01), key...)
}

// EncodeDeadline encodes a time so that byte order is time order.
func EncodeDeadline(at time.Time) uint64 { return uint64(at.UnixNano()) ^ (1 << 63) }

// DecodeDeadline is EncodeDeadline's inverse.
func DecodeDeadline(v uint64) time.Time { return time.Unix(0, int64(v^(1<<63))) }
