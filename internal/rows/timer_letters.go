package rows

import "encoding/binary"

// The dead letter of a failed timer (docs/design.md §18) is a
// state.FamilyDeadLetters row like a record's, ordered by an offset of its
// batch, with a suffix naming the timer so that it never takes the row of
// the record at that offset:
//
//	AppendString(source) offset(u64 BE) 'T' AppendString(table) at(u64 BE) key
//
// The dead letter of a window's failed final result (EmitFinal) is keyed
// the same way with its own mark, naming the window:
//
//	AppendString(source) offset(u64 BE) 'W' AppendString(table) start(u64 BE) end(u64 BE) key
//
// (start and end as EncodeDeadline encodes event times). Readers of the
// family take the offset from the 8 bytes after the source.

// TimerLetterMark follows the offset in the key of a timer's dead letter.
const TimerLetterMark = 'T'

// WindowLetterMark follows the offset in the key of a window's dead letter.
const WindowLetterMark = 'W'

// WindowDeadLetterKey is the key of the dead-letter row of the final result
// of table's window [start, end) (EncodeDeadline) of key, ordered at offset.
func WindowDeadLetterKey(source string, offset uint64, table string, start, end uint64, key []byte) []byte {
	k := DeadLetterKey(source, offset)
	k = append(k, WindowLetterMark)
	k = AppendString(k, table)
	k = binary.BigEndian.AppendUint64(k, start)
	k = binary.BigEndian.AppendUint64(k, end)
	return append(k, key...)
}

// TimerDeadLetterKey is the key of the dead-letter row of the timer of
// table and key due at at (EncodeDeadline), ordered at offset.
func TimerDeadLetterKey(source string, offset uint64, table string, at uint64, key []byte) []byte {
	k := DeadLetterKey(source, offset)
	k = append(k, TimerLetterMark)
	k = AppendString(k, table)
	k = binary.BigEndian.AppendUint64(k, at)
	return append(k, key...)
}

// IsDeadLetterKey reports whether k (after the partition) is the key of a
// dead-letter row under prefix (DeadLettersPrefix): a record's, a timer's
// or a window's.
func IsDeadLetterKey(prefix, k []byte) bool {
	if len(k) < len(prefix)+8 || string(k[:len(prefix)]) != string(prefix) {
		return false
	}
	return len(k) == len(prefix)+8 || k[len(prefix)+8] == TimerLetterMark || k[len(prefix)+8] == WindowLetterMark
}
