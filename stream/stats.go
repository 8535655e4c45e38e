package stream

import (
	"time"

	"github.com/strand-io/strand/planner"
)

// Counters are running totals of a runtime's work since it was opened (they
// survive restarts of Run, not of the process).
type Counters struct {
	// Polled counts the records the readers returned.
	Polled uint64
	// Records counts the records the Tasks looked at .
	Records uint64
	// Applied counts the records applied by every handler of their type.
	Applied uint64
	// Skipped counts the records of skipped type tags.
	Skipped uint64
	// DeadLettered counts the dead letters committed.
	DeadLettered uint64
	// Published counts the dead letters the sink accepted (or held
	// already) and whose rows were deleted.
	Published uint64
	// PublishErrors counts failed attempts to publish dead letters.
	PublishErrors uint64
	// OutboxCommitted counts the messages of To and KeyBy steps committed
	// to the outbox; OutboxPublished those the sink accepted (or held
	// already) and whose rows were deleted; OutboxErrors the failed
	// attempts to publish them.
	OutboxCommitted, OutboxPublished, OutboxErrors uint64
	// Redelivered counts the records dropped because they are outbox
	// messages (of a To or KeyBy step) applied before: published twice.
	Redelivered uint64
	// Failures counts key failures (parked, held or dead-lettered runs).
	Failures uint64
	// Batches counts Process commits and Retries counts Retry commits.
	Batches, Retries uint64
	// Resequenced counts the records the re-sequencer held and later
	// released (or dead-lettered behind a gap); Duplicates the records it
	// found already applied or held (never applied); Gaps the gaps it gave
	// up (GapNotice).
	Resequenced, Duplicates, Gaps uint64
	// Readmitted counts the replayed events (strand dlq replay: they carry
	// a replay origin) the re-sequencer let pass at their key's current
	// position instead of comparing their old strand-seq with the key's
	// next number; each is applied at most once, whatever the number of
	// replays.
	Readmitted uint64
	// Expired counts the rows of tables with a time to live
	// (topology.WithTTL) removed because they were not written for it;
	// TimersFired the timers (topology.OnTimer) whose handlers were
	// applied; TimerFailures the failed tries of timer handlers (each
	// retried later, blocking its key, or dead-lettered: docs/design.md
	// §18) and the final results of windows that could not be emitted
	// (dead-lettered).
	// Each is counted by the commit that did it.
	Expired, TimersFired, TimerFailures uint64
	// LateEvents counts the events of window tables (topology.Aggregate)
	// that came after every window they belong to closed and were counted
	// instead of aggregated (topology.WithLateEvents); WindowsClosed the
	// windows closed (their results final). Each is counted by the commit
	// that did it.
	LateEvents, WindowsClosed uint64
}

// PartitionStats describes one partition's pipeline.
type PartitionStats struct {
	Partition uint32
	// Next is the committed checkpoint: the next offset to process.
	Next uint64
	// ParkedKeys and ParkedRecords say how many keys wait for a retry
	// (or an Unblock) and how many records they hold.
	ParkedKeys, ParkedRecords int
	// NextRetry is when the earliest parked key is due for a retry; zero
	// when no key waits for one (keys blocked behind a poison event wait for
	// an Unblock instead).
	NextRetry time.Time
	// NextDeadline is when the earliest row expiry (topology.WithTTL) or
	// timer (topology.OnTimer) of the partition may be due; zero when
	// none is set. The partition's pipeline wakes then, also when no
	// record comes.
	NextDeadline time.Time
	// HeldKeys and HeldRecords say how many keys the re-sequencer holds
	// records of, waiting for a missing sequence number, and how many.
	HeldKeys, HeldRecords int
	// OldestHold is when the oldest held record was held (zero when none
	// is); NextGapTimeout is when the earliest gap times out (zero when
	// none will: no holds, or GapWait).
	OldestHold, NextGapTimeout time.Time
	// OutboxPending is how many committed outbox messages (To, KeyBy)
	// wait to be published.
	OutboxPending int
	// LastCommit is when the pipeline last committed (zero if never).
	LastCommit time.Time
	// ReplayMark is, while the partition is rebuilt after a reset
	// (topology.Reset), the offset it had reached before: Next climbs
	// towards it, and the records below it publish nothing again. 0 when
	// the partition is not replaying.
	ReplayMark uint64
	Counters
	// End is the partition's end offset as last seen (the offset the next
	// published record will get): the larger of what the reader has polled
	// up to and what the source last reported (see EndOffsetter). EndAt is
	// when the source last reported it; zero if it never did.
	End   uint64
	EndAt time.Time
	// Stuck lists the runs whose handler had not returned when a stop's
	// drain timeout passed: their batch was abandoned uncommitted (its
	// records are processed again at the next start). Nil when none was.
	Stuck []StuckRun
}

// StuckRun is a run whose handler (a fold, a ForEach, To or KeyBy
// function) had not returned when a stop's drain timeout passed.
type StuckRun struct {
	// Source and Partition say where; Key is the key's bytes and Tag the
	// run's type tag.
	Source    string
	Partition uint32
	Key       []byte
	Tag       planner.Tag
	// Handlers names the type's handlers (`project into "balances"`,
	// `ForEach "notify"`, ...).
	Handlers string
	// Since is when the batch started executing.
	Since time.Time
}

// Lag returns how many records of the partition are not yet committed:
// End - Next, or 0 when the checkpoint is at or past the known end.
func (ps PartitionStats) Lag() uint64 {
	if ps.End > ps.Next {
		return ps.End - ps.Next
	}
	return 0
}

// Waiting returns how many records and messages of the partition are past
// its checkpoint but not done: records the re-sequencer holds behind an
// open gap (HeldRecords), records of parked keys (ParkedRecords) and
// committed outbox messages not yet published (OutboxPending). Lag does not
// count them: a partition is caught up when both are 0.
func (ps PartitionStats) Waiting() uint64 {
	return uint64(max(ps.HeldRecords, 0)) + uint64(max(ps.ParkedRecords, 0)) + uint64(max(ps.OutboxPending, 0))
}

// Stats is a snapshot of the progress of one source's partitions.
type Stats struct {
	// Source is the source's name.
	Source string
	// Partitions holds one entry per partition the processor has run, in
	// partition order.
	Partitions []PartitionStats
	// Total sums the counters of all partitions.
	Total Counters
	// ParkedKeys and ParkedRecords sum those of all partitions.
	ParkedKeys, ParkedRecords int
	// Builds lists the tables built in the background from the source
	// since the App opened (a table new to the topology, or with a new
	// version: docs/design.md §19), finished ones included.
	Builds []BuildStats
}

// BuildStats is the progress of a table built in the background.
type BuildStats struct {
	// Table names the table; Source the log it is built from.
	Table, Source string
	// Replacing: the table had rows before (a new version), which reads
	// are answered from until the build is done.
	Replacing bool
	// Built counts the records the build has read, Target those it must
	// read (the partitions' checkpoints), summed over the partitions.
	Built, Target uint64
	// Partitions counts the source's partitions, Left those not handed
	// over to their pipelines yet.
	Partitions, Left int
	// Done: the table serves its built rows.
	Done bool
}

// Waiting returns the sum of the partitions' waiting records
// (PartitionStats.Waiting).
func (s Stats) Waiting() uint64 {
	var n uint64
	for _, p := range s.Partitions {
		n += p.Waiting()
	}
	return n
}

// Lag returns the sum of the partitions' lags (PartitionStats.Lag).
func (s Stats) Lag() uint64 {
	var n uint64
	for _, p := range s.Partitions {
		n += p.Lag()
	}
	return n
}
