package planner

import "fmt"

// Ordering is what an event asks of the events of its key around it: the
// fence it puts into the key's stream. The wire values are fixed; Acquire and
// Release are bits and AcqRel is both.
type Ordering uint8

const (
	// Relaxed joins the current segment of its key and may move past
	// Relaxed events of other types; events of its own type never swap.
	Relaxed Ordering = 1
	// Acquire ("this event opens something") starts a new segment; the run
	// of its type heads that segment, so nothing later in the key is
	// applied before it. The planner also applies everything earlier in the
	// key before it, since the segment is cut before it.
	Acquire Ordering = 2
	// Release ("this event closes something") ends the current segment;
	// the run of its type is that segment's tail, so it is applied after
	// everything before it. The planner also applies everything later in
	// the key after it, since the segment ends with it.
	Release Ordering = 4
	// AcqRel is both Acquire and Release: a full barrier for its key. It
	// plans as Acquire does: it cuts before itself, which keeps its release
	// half, and heads the new segment, which stays open, so later Relaxed
	// events of its own type join its head run.
	AcqRel Ordering = Acquire | Release
)

// Valid reports whether o is one of Relaxed, Acquire, Release and AcqRel.
func (o Ordering) Valid() bool {
	switch o {
	case Relaxed, Acquire, Release, AcqRel:
		return true
	}
	return false
}

// String returns the ordering's name, or "Ordering(n)" for an invalid value.
func (o Ordering) String() string {
	switch o {
	case Relaxed:
		return "Relaxed"
	case Acquire:
		return "Acquire"
	case Release:
		return "Release"
	case AcqRel:
		return "AcqRel"
	}
	return fmt.Sprintf("Ordering(%d)", uint8(o))
}

// Tag names an event type; it is unique within a topic.
type Tag uint32
