package stream

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// PartitionOp says what a partition's pipeline was doing when it failed.
type PartitionOp uint8

const (
	// OpOpen: opening the partition (its reader, checkpoint, parked keys).
	OpOpen PartitionOp = iota + 1
	// OpPoll: reading records from the source.
	OpPoll
	// OpProcess: executing a batch (a store failure; handler errors never
	// stop a partition).
	OpProcess
	// OpCommit: committing a batch.
	OpCommit
	// OpRetry: retrying parked keys.
	OpRetry
	// OpDeadLetters: reading, publishing or deleting committed dead
	// letters.
	OpDeadLetters
	// OpHook: a test hook refused to go on.
	OpHook
	// OpOutbox: reading, publishing or deleting committed outbox
	// messages (topology.To, topology.KeyBy).
	OpOutbox
)

// String returns "open", "poll", "process", "commit", "retry",
// "dead letters", "hook" or "outbox".
func (o PartitionOp) String() string {
	switch o {
	case OpOpen:
		return "open"
	case OpPoll:
		return "poll"
	case OpProcess:
		return "process"
	case OpCommit:
		return "commit"
	case OpRetry:
		return "retry"
	case OpDeadLetters:
		return "dead letters"
	case OpHook:
		return "hook"
	case OpOutbox:
		return "outbox"
	}
	return fmt.Sprintf("PartitionOp(%d)", uint8(o))
}

// PartitionError is the error a runtime's Run returns when one partition's
// pipeline failed: it names the source, the partition and the offset where
// it stopped (the first record of the failed batch, or the checkpoint).
// What was committed before stays committed; a new Run resumes there.
type PartitionError struct {
	Source    string
	Partition uint32
	Offset    uint64
	// Op says what failed.
	Op PartitionOp
	// Err is the cause.
	Err error
}

// Error describes the failure with source, partition, offset and cause.
// It starts with "strand: " once, and names the source and partition once:
// a cause that names them too (a connector's "iggy: open s/log partition
// 3: …") is shown without them.
func (e *PartitionError) Error() string {
	cause := "<nil>"
	if e.Err != nil {
		cause = strings.ReplaceAll(e.Err.Error(), "strand: ", "")
		where := regexp.QuoteMeta(e.Source) + ` partition ` + strconv.FormatUint(uint64(e.Partition), 10) + `(?: at)?(?: offset \d+)?: `
		cause = regexp.MustCompile(`(?:^|: | )`+where).ReplaceAllStringFunc(cause, func(m string) string {
			if strings.HasPrefix(m, ":") || strings.HasPrefix(m, " ") {
				return ": " // "open s/log partition 3: x" → "open: x"
			}
			return "" // "s/log partition 3 offset 1: x" → "x"
		})

	}
	return fmt.Sprintf("strand: source %q partition %d offset %d: %s: %s", e.Source, e.Partition, e.Offset, e.Op, cause)
}

// Unwrap returns the cause.
func (e *PartitionError) Unwrap() error { return e.Err }
