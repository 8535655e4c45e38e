package state

import (
	"encoding/binary"
	"strconv"
)

// Family is the first byte of every key in the database: which kind of row
// it is. Families below [FamilyOutbox] are managed by this package; the rest
// are generic row families that the processor writes with [Txn.PutRow] and
// [Txn.DeleteRow] and reads with [DB.Rows] and [DB.Row]. The byte values are
// part of the on-disk format and never change.
type Family byte

const (
	// FamilyMeta holds the database's metadata: key layout version, topology
	// fingerprint and the table name → id registry. Reserved.
	FamilyMeta Family = 0x01
	// FamilyCheckpoint holds one row per source name and partition: the
	// next offset to read. Reserved; written with [Txn.SetCheckpoint].
	FamilyCheckpoint Family = 0x02
	// FamilyTable holds table rows: partition, table id, key bytes. Reserved;
	// written through [Table].
	FamilyTable Family = 0x03

	// FamilyOutbox holds messages to publish after their commit.
	FamilyOutbox Family = 0x10
	// FamilyDeadLetters holds dead letters waiting to be published.
	FamilyDeadLetters Family = 0x11
	// FamilyHolds holds events the re-sequencer keeps back until their
	// predecessors arrive.
	FamilyHolds Family = 0x12
	// FamilySequences holds the re-sequencer's next expected sequence
	// number per key.
	FamilySequences Family = 0x13
	// FamilyParked holds parked (retrying) events and their attempts.
	FamilyParked Family = 0x14
	// FamilyOrigins holds, per source and origin, the last outbox message
	// of another partition's outbox (by its sequence number) that a
	// partition applied: duplicates of published messages are dropped.
	FamilyOrigins Family = 0x15
	// FamilyChangelog rows (partition, seq u64 BE) hold logged commits
	// waiting to be published: value = [EncodeLogged](head, writes), where
	// writes is the commit's Pebble batch representation (see
	// [DB.LogPartition]). The engine deletes a row once it is published.
	FamilyChangelog Family = 0x16
	// FamilyLogHead holds one row per partition (empty rest of key): the
	// head value of the partition's last logged (or applied) commit, written
	// in that commit's batch (see [DB.LogHead]). Like FamilyChangelog it is
	// not reserved, so the engine can read and delete its rows, but only
	// logged commits and [DB.ApplyLogged] should write it.
	FamilyLogHead Family = 0x17
	// FamilyTimers holds the deadlines of TTL tables and timers: an index
	// in due order and each key's deadline (layout: internal/rows).
	FamilyTimers Family = 0x1C
)

// Reserved reports whether f is managed by this package itself (metadata,
// checkpoints, table rows) and so refused by the row operations.
func (f Family) Reserved() bool { return f < FamilyOutbox }

// String names the family ("outbox", "parked", ...), or gives its byte value.
func (f Family) String() string {
	switch f {
	case FamilyMeta:
		return "meta"
	case FamilyCheckpoint:
		return "checkpoint"
	case FamilyTable:
		return "table"
	case FamilyOutbox:
		return "outbox"
	case FamilyDeadLetters:
		return "dead-letters"
	case FamilyHolds:
		return "holds"
	case FamilySequences:
		return "sequences"
	case FamilyParked:
		return "parked"
	case FamilyOrigins:
		return "origins"
	case FamilyChangelog:
		return "changelog"
	case FamilyLogHead:
		return "log-head"
	case FamilyTimers:
		return "timers"
	case FamilyReplayMark:
		return "replay-mark"
	}
	return "family(0x" + strconv.FormatUint(uint64(f), 16) + ")"
}

// layoutVersion is the version of the key layout described in doc.go.
const layoutVersion = 1

const (
	prefixLen   = 5 // family + partition
	rowKeyExtra = prefixLen + 4
)

// Metadata names (after the FamilyMeta|0 prefix).
const (
	metaLayout       = "layout"
	metaFingerprint  = "fingerprint"
	metaTablePrefix  = "table/"
	metaSourcePrefix = "source/"
)

func appendPrefix(dst []byte, f Family, partition uint32) []byte {
	dst = append(dst, byte(f))
	return binary.BigEndian.AppendUint32(dst, partition)
}

func metaKey(name string) []byte {
	k := appendPrefix(make([]byte, 0, prefixLen+len(name)), FamilyMeta, 0)
	return append(k, name...)
}

func checkpointKey(source string, partition uint32) []byte {
	k := appendPrefix(make([]byte, 0, prefixLen+len(source)), FamilyCheckpoint, partition)
	return append(k, source...)
}

func rowKey(f Family, partition uint32, key []byte) []byte {
	k := appendPrefix(make([]byte, 0, prefixLen+len(key)), f, partition)
	return append(k, key...)
}

func appendTableKey(dst []byte, id, partition uint32, key []byte) []byte {
	dst = appendPrefix(dst, FamilyTable, partition)
	dst = binary.BigEndian.AppendUint32(dst, id)
	return append(dst, key...)
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil if there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
