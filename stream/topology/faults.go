package topology

import (
	"errors"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// Faults are points inside an App's pipelines where a test can inject a
// failure or end its own process: the crash tests of strand and of its
// users kill a child process right after a commit, around a dead-letter
// or outbox send, and check that a restart is exact. Each function is
// called with the partition (of the source, for dead letters and outbox
// messages) and what is at that point; nil functions are not called. An
// error it returns fails the partition as a failing store would (Run
// returns it wrapped in a *stream.PartitionError). Functions run on the
// pipelines' goroutines, so they must be safe for concurrent use and
// should not block.
//
// Faults are for tests; a production App never needs them.
type Faults struct {
	// AfterPoll sees every polled batch of a source partition before it
	// is queued.
	AfterPoll func(source string, partition uint32, records []connector.Record) error
	// BeforeProcess runs before a batch (records) or a retry of parked
	// keys (records nil) executes.
	BeforeProcess func(source string, partition uint32, records []connector.Record) error
	// AfterCommit runs after a batch or a retry committed; next is the
	// partition's new checkpoint.
	AfterCommit func(source string, partition uint32, next uint64) error
	// BeforeDeadLetterSend runs with dead letters about to be sent (their
	// commit is durable), AfterDeadLetterSend once the sink accepted them
	// (their rows not yet deleted), AfterDeadLetterDelete once their rows
	// were deleted.
	BeforeDeadLetterSend, AfterDeadLetterSend, AfterDeadLetterDelete func(source string, partition uint32, letters []deadletter.Letter) error
	// BeforeOutboxSend runs with To and KeyBy messages about to be sent
	// (their commit is durable), AfterOutboxSend once the sinks accepted
	// them (their rows not yet deleted).
	BeforeOutboxSend, AfterOutboxSend func(source string, partition uint32, msgs []connector.Message) error
}

// WithFaults installs fault points in every pipeline of the App (tests; see
// Faults).
func WithFaults(f Faults) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		o.faults = &f
		return nil
	})
}

// WithOutboxGrace sets how long a restarted App waits, once, before it
// looks again for dead letters and outbox messages of the run before it
// that the sink did not report as sent: a send of a killed process can
// still be on its way to the broker (default 500 ms). Zero is right for
// sinks that have no send in flight across a restart (in-memory ones, as
// in package topologytest); negative values are refused.
func WithOutboxGrace(d time.Duration) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if d < 0 {
			return errors.New("strand: topology.WithOutboxGrace: the grace must not be negative")
		}
		o.grace = &d
		return nil
	})
}

// processorFaults turns the App's options into the engine's hooks and
// grace for one source's processor.
func (o *openOptions) processorFaults(source string) []pipeline.ProcessorOption {
	var out []pipeline.ProcessorOption
	if o.grace != nil {
		out = append(out, pipeline.WithOutboxGrace(*o.grace))
	}
	f := o.faults
	if f == nil {
		return out
	}
	var h pipeline.Hooks
	if fn := f.AfterPoll; fn != nil {
		h.AfterPoll = func(p uint32, recs []connector.Record) error { return fn(source, p, recs) }
	}
	if fn := f.BeforeProcess; fn != nil {
		h.BeforeProcess = func(p uint32, recs []connector.Record) error { return fn(source, p, recs) }
	}
	if fn := f.AfterCommit; fn != nil {
		h.AfterCommit = func(p uint32, res executor.Result) error { return fn(source, p, res.Next) }
	}
	letters := func(fn func(string, uint32, []deadletter.Letter) error) func(uint32, []deadletter.Letter) error {
		if fn == nil {
			return nil
		}
		return func(p uint32, ls []deadletter.Letter) error { return fn(source, p, ls) }
	}
	h.BeforeDeadLetterSend = letters(f.BeforeDeadLetterSend)
	h.AfterDeadLetterSend = letters(f.AfterDeadLetterSend)
	h.AfterDeadLetterDelete = letters(f.AfterDeadLetterDelete)
	msgs := func(fn func(string, uint32, []connector.Message) error) func(uint32, []connector.Message) error {
		if fn == nil {
			return nil
		}
		return func(p uint32, ms []connector.Message) error { return fn(source, p, ms) }
	}
	h.BeforeOutboxSend = msgs(f.BeforeOutboxSend)
	h.AfterOutboxSend = msgs(f.AfterOutboxSend)
	return append(out, pipeline.WithHooks(h))
}
