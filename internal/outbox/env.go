package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// Config is what an outbox needs of the processor it publishes for.
type Config struct {
	// Source names the processor's source: its rows are filed under it.
	Source string
	DB     *state.DB
	Log    *slog.Logger
	// DeadLetterSink receives the dead letters (NewDeadLetters);
	// Sinks the messages of each destination topic (NewMessages).
	DeadLetterSink connector.Sink
	Sinks          map[string]connector.Sink
	// Backoff is the least and the most wait between two failed sends.
	Backoff [2]time.Duration
	// Grace is how long a run waits, once, for the sends of an earlier
	// run that may still be in flight before it asks a SentChecker.
	Grace time.Duration
	// Gate, when set, is called before rows of a partition are sent: an
	// error wrapping executor.ErrFenced stops the processor, others are
	// retried. Check, when set, is called right before the send.
	Gate  func(ctx context.Context, partition uint32) error
	Check func(partition uint32) error
	// Deadline, when set, is called after Check: until when the rows of
	// a partition may reach their topic (connector.WithSendDeadline).
	Deadline func(partition uint32) (time.Time, bool, error)
	Hooks    Hooks
	// Update applies fn to the stats of a partition under the
	// processor's lock.
	Update func(partition uint32, fn func(ps *stream.PartitionStats))
	// Pending returns how many messages of a partition wait to be
	// published, as the processor's Stats count them (flow control).
	Pending func(partition uint32) int64
}

// Hooks are the test hooks of the outboxes (the fault points of
// pipeline.Hooks of the same names).
type Hooks struct {
	BeforeDeadLetterSend, AfterDeadLetterSend, AfterDeadLetterDelete func(partition uint32, letters []deadletter.Letter) error
	BeforeOutboxSend, AfterOutboxSend                                func(partition uint32, msgs []connector.Message) error
}

// env is a Config in the shape the publishers read it.
type env struct {
	name string
	db   *state.DB
	log  *slog.Logger
	opts envOptions
	cfg  Config
}

type envOptions struct {
	sink        connector.Sink
	outboxSinks map[string]connector.Sink
	dlqBackoff  [2]time.Duration
	outboxGrace time.Duration
	gate        func(ctx context.Context, partition uint32) error
	check       func(partition uint32) error
	deadline    func(partition uint32) (time.Time, bool, error)
	hooks       Hooks
}

func newEnv(c Config) (*env, error) {
	switch {
	case c.DB == nil || c.Log == nil || c.Update == nil || c.Pending == nil:
		return nil, errors.New("outbox: Config needs DB, Log, Update and Pending")
	case c.Backoff[0] <= 0 || c.Backoff[1] < c.Backoff[0]:
		return nil, fmt.Errorf("outbox: backoff %v..%v, want 0 < min <= max", c.Backoff[0], c.Backoff[1])
	}
	return &env{name: c.Source, db: c.DB, log: c.Log, cfg: c, opts: envOptions{
		sink: c.DeadLetterSink, outboxSinks: c.Sinks, dlqBackoff: c.Backoff, outboxGrace: c.Grace,
		gate: c.Gate, check: c.Check, deadline: c.Deadline, hooks: c.Hooks,
	}}, nil
}

func (p *env) update(pt uint32, fn func(ps *stream.PartitionStats)) { p.cfg.Update(pt, fn) }

func (p *env) outboxPending(pt uint32) int64 { return p.cfg.Pending(pt) }

// Outbox publishes the rows one kind of commit output left in the store
// (dead letters, or the messages of To and KeyBy) for one processor: see
// outbox.go for the rules. Start, Committed, Notify and Push are called by
// the pipelines, Run once per processor run.
type Outbox struct {
	o        *outbox
	messages *messageKind // nil for dead letters
}

// NewDeadLetters returns the outbox of a processor's dead letters, sent to
// c.DeadLetterSink.
func NewDeadLetters(c Config) (*Outbox, error) {
	e, err := newEnv(c)
	if err != nil {
		return nil, err
	}
	if c.DeadLetterSink == nil {
		return nil, errors.New("outbox: NewDeadLetters without a dead-letter sink")
	}
	return &Outbox{o: newOutbox(e, deadLetterKind{e})}, nil
}

// NewMessages returns the outbox of a processor's To and KeyBy messages,
// sent to c.Sinks by destination.
func NewMessages(c Config) (*Outbox, error) {
	e, err := newEnv(c)
	if err != nil {
		return nil, err
	}
	k := newMessageKind(e)
	o := newOutbox(e, k)
	k.ob = o
	return &Outbox{o: o, messages: k}, nil
}

// Start makes partition pt publishable from next on: rows ordered below
// next are an earlier run's (checked with a SentChecker before a send).
func (b *Outbox) Start(pt uint32, next uint64) { b.o.start(pt, next) }

// Committed says that every commit of partition pt that wrote rows ordered
// below next has returned: those rows may be published.
func (b *Outbox) Committed(pt uint32, next uint64) { b.o.committed(pt, next) }

// Notify wakes the publisher of partition pt: a commit wrote rows.
func (b *Outbox) Notify(pt uint32) { b.o.notify(pt) }

// Push hands the messages a returned commit of partition pt wrote to the
// message outbox, which sends them from memory, and wakes its publisher.
// The pipeline calls it after each commit that wrote messages, in commit
// order; it never waits (Await is the flow control).
func (b *Outbox) Push(pt uint32, rows []executor.OutboxRow) {
	if b.messages != nil {
		b.messages.push(pt, rows)
	}
}

// Await is the message outbox's flow control: it returns once partition pt
// no longer has too many messages waiting after a commit that wrote n, or
// the publisher stalled or fails (see FlowRows). The pipeline's flow
// (internal/pipeline, flow.go) is its one caller.
func (b *Outbox) Await(pt uint32, n int) {
	if b.messages != nil && n > 0 {
		b.o.await(pt, n)
	}
}

// Run publishes until runCtx is done and pipelinesDone is closed, then makes
// a last pass with drainCtx; fail reports a failure that must stop the
// processor.
func (b *Outbox) Run(runCtx, drainCtx context.Context, pipelinesDone <-chan struct{}, fail func(error)) {
	b.o.run(runCtx, drainCtx, pipelinesDone, fail)
}

// PendingDeadLetters returns the committed dead letters of source in
// partition pt whose rows are not yet deleted, in offset order.
func PendingDeadLetters(ctx context.Context, db *state.DB, source string, pt uint32) ([]deadletter.Letter, error) {
	rows, err := (&env{name: source, db: db}).deadLetterRows(ctx, pt, 0)
	if err != nil {
		return nil, err
	}
	out := make([]deadletter.Letter, len(rows))
	for i, r := range rows {
		out[i] = r.letter
	}
	return out, nil
}
