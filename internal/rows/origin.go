package rows

import (
	"encoding/binary"

	"github.com/strand-io/strand/internal/xxh32"
)

// Replay origins. `strand dlq replay` gives every replayed event a
// strand-origin header of its own (ReplayOrigin): the origin-stream half is
// xxh32 of the dead-letter topic and replayPartition, a partition number
// no outbox origin can have (partition ids are below the partition count,
// a u32); the sequence half is the first 8 bytes of the replay's message
// id, derived from the dead letter's. A reader keeps every replay origin
// it applied in state.FamilyOrigins, one row each:
//
//	key:   AppendString(source) origin(16)
//	value: unix nanoseconds of the commit (u64 BE)
//
// and drops a replay whose origin it holds: however often a dead letter is
// replayed, and in whatever order, its event is applied at most once. A
// replay is not the producer's: the re-sequencer lets it pass at the key's
// current position (counted in Readmitted and logged) instead of comparing
// its old strand-seq with the key's next number.
const replayPartition = 0xFFFFFFFF

// ReplayOrigin returns the strand-origin value of the replay of a dead
// letter of dlqTopic whose replay message id is id.
func ReplayOrigin(dlqTopic string, id [16]byte) []byte {
	o := binary.BigEndian.AppendUint32(nil, xxh32.Sum([]byte(dlqTopic), 0))
	o = binary.BigEndian.AppendUint32(o, replayPartition)
	return append(o, id[:8]...)
}

// IsReplayOrigin reports whether o is a ReplayOrigin.
func IsReplayOrigin(o []byte) bool {
	return len(o) == OriginLen && binary.BigEndian.Uint32(o[4:8]) == replayPartition
}
