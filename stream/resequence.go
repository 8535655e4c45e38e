package stream

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/strand-io/strand/stream/connector"
)

// ErrBadSequence is wrapped by the error of a record of a sequenced type
// whose strand-seq header is missing or 0, and by Envelope's error for an
// event whose Sequence function returns 0.
var ErrBadSequence = errors.New("strand: bad sequence number")

// ErrDuplicate is wrapped by the error of a dead letter with
// ReasonDuplicate.
var ErrDuplicate = errors.New("strand: duplicate sequence number")

// ErrGap is wrapped by the error of a record dead-lettered because it was
// held behind a gap that was given up (ReasonGapTimeout,
// ReasonHoldOverflow).
var ErrGap = errors.New("strand: held behind a sequence gap that was given up")

// GapPolicy says what the re-sequencer does with a key whose sequence has
// a gap that timed out (or whose held records exceed a bound).
type GapPolicy uint8

const (
	// GapWait waits for the missing numbers for ever: there is no
	// timeout. A bound that overflows cannot wait, so an overflow is dealt
	// with as under GapDeadLetter.
	GapWait GapPolicy = 1
	// GapSkip advances past the gap: a GapNotice with the missing range is
	// recorded in the same commit, and the held records after the gap are
	// let through in order.
	GapSkip GapPolicy = 2
	// GapDeadLetter gives the gap up too, but dead-letters the held
	// records after it (ReasonGapTimeout or ReasonHoldOverflow) instead of
	// applying them; a GapNotice is recorded as well.
	GapDeadLetter GapPolicy = 3
)

// String returns "wait", "skip" or "dead-letter".
func (p GapPolicy) String() string {
	switch p {
	case GapWait:
		return "wait"
	case GapSkip:
		return "skip"
	case GapDeadLetter:
		return "dead-letter"
	}
	return "gap-policy-" + strconv.Itoa(int(p))
}

// Valid reports whether p is one of the declared policies.
func (p GapPolicy) Valid() bool { return p >= GapWait && p <= GapDeadLetter }

// DuplicatePolicy says what the re-sequencer does with a record whose
// sequence number its key has already applied, given up, or holds.
// Duplicates are never applied and always counted.
type DuplicatePolicy uint8

const (
	// DropDuplicates drops them (counted in Counters.Duplicates).
	DropDuplicates DuplicatePolicy = 1
	// DeadLetterDuplicates dead-letters them with ReasonDuplicate.
	DeadLetterDuplicates DuplicatePolicy = 2
)

// String returns "drop" or "dead-letter".
func (p DuplicatePolicy) String() string {
	switch p {
	case DropDuplicates:
		return "drop"
	case DeadLetterDuplicates:
		return "dead-letter"
	}
	return "duplicate-policy-" + strconv.Itoa(int(p))
}

// Valid reports whether p is one of the declared policies.
func (p DuplicatePolicy) Valid() bool { return p == DropDuplicates || p == DeadLetterDuplicates }

// SeqStart says where a key's sequence starts.
type SeqStart uint8

const (
	// StartAtOne expects every key's first event to have number 1.
	StartAtOne SeqStart = 1
	// StartAtFirstSeen takes the first number seen of a key as its start,
	// for streams that ran before strand consumed them: earlier numbers
	// that arrive later are duplicates.
	StartAtFirstSeen SeqStart = 2
)

// String returns "one" or "first-seen".
func (s SeqStart) String() string {
	switch s {
	case StartAtOne:
		return "one"
	case StartAtFirstSeen:
		return "first-seen"
	}
	return "seq-start-" + strconv.Itoa(int(s))
}

// Valid reports whether s is one of the declared starts.
func (s SeqStart) Valid() bool { return s == StartAtOne || s == StartAtFirstSeen }

// GapCause says why a gap was given up.
type GapCause uint8

const (
	// GapTimedOut: the oldest record held behind the gap waited longer
	// than the gap timeout.
	GapTimedOut GapCause = 1
	// GapOverflow: the key, or the partition, held more records than its
	// bound allows.
	GapOverflow GapCause = 2
)

// String returns "timeout" or "overflow".
func (c GapCause) String() string {
	switch c {
	case GapTimedOut:
		return "timeout"
	case GapOverflow:
		return "overflow"
	}
	return "gap-cause-" + strconv.Itoa(int(c))
}

// GapNotice records that the re-sequencer gave up waiting for the numbers
// From..To (inclusive) of one key: under GapSkip the records after them
// were applied, under GapDeadLetter (or an overflow under GapWait) they
// were dead-lettered. It is committed in the same batch as the state it
// describes.
type GapNotice struct {
	// Source and Partition locate the key.
	Source    string
	Partition uint32
	// Key is the key's bytes.
	Key []byte
	// From and To are the first and last missing sequence numbers.
	From, To uint64
	// Age is how long the oldest record held behind the gap had waited, on
	// the processor's clock.
	Age time.Duration
	// At is when the gap was given up, on the processor's clock.
	At time.Time
	// Cause says why it was given up, Policy what was done.
	Cause  GapCause
	Policy GapPolicy
}

// String describes the gap.
func (g GapNotice) String() string {
	return fmt.Sprintf("gap %s/%d key %q seq %d..%d (%s after %v, %s)", g.Source, g.Partition, g.Key, g.From, g.To, g.Cause, g.Age, g.Policy)
}

// HeldRecord is one record the re-sequencer holds until its predecessors
// arrive: the record as read (offset, headers with its sequence number,
// payload) and when it was held, on the processor's clock.
type HeldRecord struct {
	connector.Record
	// Since is when the record was held.
	Since time.Time
}
