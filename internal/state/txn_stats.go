package state

import "time"

// CommitStats describe the Pebble commit of a Txn: when it started and
// ended (the write and, with Sync, the fsync; not the wait for a
// predecessor) and how big it was.
type CommitStats struct {
	Start, End time.Time
	// Bytes is the size of the Pebble batch; Changes counts its writes.
	Bytes, Changes int
}

// Duration returns End - Start.
func (s CommitStats) Duration() time.Duration { return s.End.Sub(s.Start) }

// CommitStats returns the stats of the Txn's commit once Commit has
// returned nil; the zero value before, after a failed commit, or when the
// Txn had nothing to write (then End is still set). Call it only after
// Commit returned (it is not synchronized with a Commit in progress).
func (tx *Txn) CommitStats() CommitStats { return tx.stats }

// commitNow is the clock of CommitStats.
func commitNow() time.Time { return time.Now() }
