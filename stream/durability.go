package stream

import (
	"fmt"
	"time"
)

// Durability says when a commit of an App's store returns
// (topology.WithDurability). It is defined here once: package topology
// and strand's store use this type under their own names (aliases).
type Durability uint8

const (
	// Sync makes a commit return only after it is fsynced: a committed
	// batch survives a machine crash. The default; concurrent commits of
	// different partitions share fsyncs (group commit).
	Sync Durability = iota
	// NoSync makes a commit return once it is in the write-ahead log
	// buffer: a process crash loses nothing, a machine crash may lose the
	// last commits, and what survives is always a prefix of the commits,
	// so tables still match their checkpoints. Dead letters and outbox
	// messages are published only after their commit is synced.
	NoSync
)

// String returns "sync" or "nosync", and "Durability(n)" for a value that
// is neither.
func (d Durability) String() string {
	switch d {
	case Sync:
		return "sync"
	case NoSync:
		return "nosync"
	}
	return fmt.Sprintf("Durability(%d)", uint8(d))
}

// Clock is the time an App's retries, re-sequencer timeouts, TTLs and
// timers run on. The default is the wall clock; package topologytest
// drives an App on a clock of its own (topology.WithClock).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// At returns a channel that receives once the clock reads t or later
	// (at once if it already does).
	At(t time.Time) <-chan time.Time
}
