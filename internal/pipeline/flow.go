package pipeline

import (
	"context"

	"github.com/strand-io/strand/internal/outbox"
)

// flow is the one owner of a partition pipeline's backpressure: every wait
// of the pipeline for a stage downstream of it is decided here, and
// nowhere else (docs/design.md §3).
//
//   - Read-ahead: the reader takes a slot before each poll (poll) and the
//     batch gives it back only when its commit is done, or when it is
//     dropped before it was submitted (done). So at most prefetch+1
//     batches per partition are polled and not yet committed, and memory
//     stays bounded however far the processor lags (WithPrefetch).
//   - Commit depth: one commit in flight per partition. Task.Submit waits
//     for the previous batch's commit before it starts this one's (a
//     batch commits only after the batch whose writes it read: the
//     executor's ordering rule, not a choice of pace); the slot of a batch
//     whose commit is in flight stays taken, so that wait is part of the
//     read-ahead bound above.
//   - Outbox: after a commit that wrote messages (To, KeyBy), the pipeline
//     waits while more messages of its partition wait to be published than
//     the commit wrote and outbox.FlowRows, as long as the publisher keeps
//     publishing (outbox.Outbox.Await; never after a failed send, never for
//     longer than outbox.Stall without progress). A healthy but slower sink
//     paces its sources; a failing one never holds them up.
//
// Writer turns (writers.go) are not backpressure: they order the pipelines
// of inputs that share a table, and a pipeline holding the turn never waits
// for one.
type flow struct {
	slots chan struct{}  // one token per batch polled and not yet committed
	msgs  *outbox.Outbox // the message outbox, nil without To/KeyBy
	part  uint32
}

func newFlow(part uint32, prefetch int, msgs *outbox.Outbox) *flow {
	return &flow{slots: make(chan struct{}, prefetch+1), msgs: msgs, part: part}
}

// poll waits until the reader may poll one more batch; false when ctx is
// done first.
func (f *flow) poll(ctx context.Context) bool {
	select {
	case f.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// done gives back the slot of a batch that was committed, failed, or
// dropped before it was submitted (an empty or failed poll).
func (f *flow) done() { <-f.slots }

// committed is called after each returned commit that wrote n outbox
// messages, once the outbox has them (Outbox.Push): it waits while the
// outbox is behind.
func (f *flow) committed(n int) {
	if f.msgs != nil && n > 0 {
		f.msgs.Await(f.part, n)
	}
}
