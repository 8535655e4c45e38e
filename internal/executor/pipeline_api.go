package executor

import (
	"time"

	"github.com/strand-io/strand/internal/state"
)

// What the partition pipelines (internal/pipeline) read of a Program, a
// Task and a Pending beyond Submit, Retry and Release.

// HasSource reports whether the program reads a source of that name.
func (p *Program) HasSource(name string) bool { return p.sources[name] != nil }

// Done is closed when the batch's commit has returned (Wait then returns at
// once).
func (p *Pending) Done() <-chan struct{} { return p.done }

// CommitStats describes the Pebble commit of the batch once Wait returned;
// zero for a batch that wrote nothing.
func (p *Pending) CommitStats() state.CommitStats {
	if p.txn == nil {
		return state.CommitStats{}
	}
	return p.txn.CommitStats()
}

// OutboxNext is the sequence number the partition's next outbox message
// gets: the message outbox publishes the rows below it.
func (t *Task) OutboxNext() uint64 { return t.outNext }

// NextDeadline returns when the partition's next TTL expiry or timer is
// due, if any (timers.go).
func (t *Task) NextDeadline() (time.Time, bool) { return t.nextDeadline() }
