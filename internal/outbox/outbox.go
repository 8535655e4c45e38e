package outbox

import (
	"github.com/strand-io/strand/internal/executor"

	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// Limits of one publication round of an outbox.
const (
	outboxRoundMessages = 16384
	outboxRoundBytes    = 4 << 20
)

// Flow control of the message outbox (outbox.await): a commit that leaves
// more messages of its partition waiting than it wrote itself (and more
// than FlowRows) makes the pipeline wait for the publisher, as long
// as the publisher keeps publishing: not after a failed send, and never
// longer than Stall without a round published. So the publisher
// sends one commit's messages while the pipeline executes the next batch;
// a healthy but slower sink paces its sources, and the rows are deleted
// while still in Pebble's memtable (a backlog is flushed and compacted,
// then read back); a failing or stuck sink never holds them up for more
// than Stall.
const (
	FlowRows = 4096
	Stall    = time.Second
)

// outRow is one committed row an outbox publishes: a dead letter or an
// outbox message.
type outRow struct {
	key   []byte // the row's key, deleted once published
	order uint64 // the row's position: the record's offset, or the message's seq
	dest  string // the sink's name; rows of one dest go to one sink
	sink  connector.Sink
	// The row's message is msgs[mi]: the messages of one commit share one
	// array, laid out per destination in seq order, so that a round of one
	// commit's messages is handed to each sink as a part of that array,
	// without a copy (sendRows).
	msgs []connector.Message
	mi   int
	size int // payload bytes, for the bounds of a round and of memory
	// last says that the row ends with this message: the row is deleted
	// once it is published (dead letters: every row).
	last bool
	// letter is the dead letter the row holds (dead-letter rows only).
	letter *deadletter.Letter
}

// msg returns the row's message.
func (r *outRow) msg() *connector.Message { return &r.msgs[r.mi] }

// oneMessage holds m for an outRow of its own.
func oneMessage(m connector.Message) []connector.Message { return []connector.Message{m} }

// outboxKind is what one outbox publishes: how its rows are read, where
// they go, and what is counted and called around a send.
type outboxKind interface {
	// what names the rows in logs and errors ("dead letters").
	what() string
	family() state.Family
	op() stream.PartitionOp
	// rows reads the committed rows of partition pt in order, from the
	// first one not published by this run: at most limit rows and about
	// outboxRoundBytes of payload (limit 0: all). final is the last pass
	// of Run: look in the store even where memory says nothing waits.
	rows(ctx context.Context, pt uint32, limit int, final bool) ([]outRow, error)
	beforeSend(pt uint32, rows []outRow) error
	afterSend(pt uint32, rows []outRow) error
	afterDelete(pt uint32, rows []outRow) error
	// count accounts for a published round (n rows) or a failed try (n 0).
	count(ps *stream.PartitionStats, n int, failed bool)
}

// outbox publishes the committed rows of one kind, for every partition of
// a processor, and deletes them once published. Rows are sent in order, a
// round at a time per partition (a round's destinations concurrently),
// partitions concurrently (one goroutine each); a row is deleted only
// after its sink accepted all of its messages, so a crash sends them
// again, and a sink that implements connector.SentChecker is asked first
// which of the rows an earlier run (or a failed Send) may have published,
// so none is published twice. Failures of a sink are retried with backoff
// and never stop the processor; only a store failure does. The message
// outbox also paces its pipelines while its sinks keep up (await).
type outbox struct {
	p    *env
	kind outboxKind
	// runCtx is Run's context once run started (await waits only then).
	runCtx context.Context

	mu    sync.Mutex
	parts map[uint32]*outboxPart
}

// outboxPart is one partition's state in an outbox.
type outboxPart struct {
	wake chan struct{} // a commit wrote rows
	// unsure: rows ordered below it may have been published already (by
	// an earlier run, or by a failed Send), so they are checked with the
	// connector.SentChecker before being sent. started is unsure at Run:
	// rows below it are an earlier run's, and graced says whether the
	// grace for that run's sends in flight was given. Guarded by
	// outbox.mu.
	unsure, started uint64
	graced          bool
	// durable: rows ordered at or above it belong to commits that have
	// not returned yet. Pebble shows a batch to readers before its
	// write-ahead log record is synced, so the store may hold rows a crash
	// takes back; they are not published before their commit returned
	// (committed raises it). Guarded by outbox.mu.
	durable uint64

	// Flow control (await), guarded by outbox.mu: progress is closed and
	// replaced when a round was published or failed; failing is set by a
	// failed round and cleared by a published one; alive is when the
	// publisher last published a round or started publishing after idling.
	progress chan struct{}
	failing  bool
	alive    time.Time
}

func newOutbox(p *env, kind outboxKind) *outbox {
	return &outbox{p: p, kind: kind, parts: map[uint32]*outboxPart{}}
}

// start registers a partition whose rows at Run are all ordered below
// next. Call it for every partition before run.
func (o *outbox) start(pt uint32, next uint64) {
	o.mu.Lock()
	o.parts[pt] = &outboxPart{wake: make(chan struct{}, 1), unsure: next, started: next, durable: next,
		progress: make(chan struct{}), alive: time.Now()}
	o.mu.Unlock()
}

// committed says that a commit of partition pt returned: its rows, all
// ordered below next, may be published.
func (o *outbox) committed(pt uint32, next uint64) {
	o.mu.Lock()
	if part := o.parts[pt]; part != nil {
		part.durable = max(part.durable, next)
	}
	o.mu.Unlock()
}

// returned cuts rows, which are in order, before the first one whose
// commit has not returned (outboxPart.durable).
func (o *outbox) returned(pt uint32, rows []outRow) []outRow {
	o.mu.Lock()
	durable := o.parts[pt].durable
	o.mu.Unlock()
	for i := range rows {
		if rows[i].order >= durable {
			return wholeRows(rows[:i:i])
		}
	}
	return rows
}

// notify says that partition pt committed rows.
func (o *outbox) notify(pt uint32) {
	o.mu.Lock()
	part := o.parts[pt]
	o.mu.Unlock()
	if part == nil {
		return
	}
	select {
	case part.wake <- struct{}{}:
	default:
	}
}

// fatalError marks an outbox error that must stop Run (a store failure or a
// hook); other errors (the sink's) are retried.
type fatalError struct{ err *stream.PartitionError }

func (f fatalError) Error() string { return f.err.Error() }
func (f fatalError) Unwrap() error { return f.err }

// run publishes every registered partition until the pipelines are done,
// then makes one last pass with drainCtx. A fatal error of a partition is
// given to fail at once (Run's cancellation stops the pipelines; the other
// partitions make their last pass); run returns when every partition's
// loop has.
func (o *outbox) run(runCtx, drainCtx context.Context, pipelinesDone <-chan struct{}, fail func(error)) {
	o.mu.Lock()
	o.runCtx = runCtx
	pts := make([]uint32, 0, len(o.parts))
	for pt := range o.parts {
		pts = append(pts, pt)
	}
	o.mu.Unlock()
	var wg sync.WaitGroup
	for _, pt := range pts {
		wg.Go(func() {
			if err := o.runPartition(runCtx, drainCtx, pipelinesDone, pt); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
}

// runPartition is one partition's publisher loop.
func (o *outbox) runPartition(runCtx, drainCtx context.Context, pipelinesDone <-chan struct{}, pt uint32) error {
	o.mu.Lock()
	part := o.parts[pt]
	o.mu.Unlock()
	lo, hi := o.p.opts.dlqBackoff[0], o.p.opts.dlqBackoff[1]
	wait := lo
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var retryC <-chan time.Time
		if runCtx.Err() == nil {
			o.flow(pt, func(part *outboxPart) { part.alive = time.Now() })
			err := o.drainPartition(runCtx, pt, false)
			o.flow(pt, func(part *outboxPart) { part.failing = err != nil })
			var fe fatalError
			switch {
			case errors.As(err, &fe):
				return fe.err
			case err != nil && runCtx.Err() == nil:
				o.p.log.Warn("strand: publishing "+o.kind.what()+" failed; retrying",
					"partition", pt, "in", wait, "err", err)
				timer.Reset(wait)
				retryC = timer.C
				wait = min(wait*2, hi)
			case err == nil:
				wait = lo
			}
		}
		select {
		case <-part.wake:
		case <-retryC:
		case <-pipelinesDone:
			err := o.drainPartition(drainCtx, pt, true)
			var fe fatalError
			if errors.As(err, &fe) {
				return fe.err
			}
			if err != nil {
				o.p.log.Warn("strand: "+o.kind.what()+" left in the store at shutdown; they are published on the next run",
					"partition", pt, "err", err)
			}
			return nil
		}
	}
}

// drainPartition publishes and deletes the rows of partition pt, round by
// round, until none is left; final is the last pass of Run (see
// outboxKind.rows).
func (o *outbox) drainPartition(ctx context.Context, pt uint32, final bool) error {
	p, k := o.p, o.kind
	fatal := func(op stream.PartitionOp, order uint64, err error) error {
		return fatalError{&stream.PartitionError{Source: p.name, Partition: pt, Offset: order, Op: op, Err: err}}
	}
	storeErr := func(what string, order uint64, err error) error {
		if ctx.Err() != nil {
			return strerr.Errorf("strand: source %q partition %d: %s: %w", p.name, pt, what, err)
		}
		return fatal(k.op(), order, fmt.Errorf("%s: %w", what, err))
	}
	for {
		rows, err := k.rows(ctx, pt, outboxRoundMessages, final)
		if err != nil {
			var fe fatalError
			if errors.As(err, &fe) {
				return err
			}
			return storeErr("read "+k.what(), 0, err)
		}
		rows = o.returned(pt, rows)
		if len(rows) == 0 {
			return nil
		}
		first, last := rows[0].order, rows[0].order
		for _, r := range rows {
			first, last = min(first, r.order), max(last, r.order)
		}
		if gate := p.opts.gate; gate != nil {
			if err := gate(ctx, pt); err != nil {
				if errors.Is(err, executor.ErrFenced) {
					return fatal(k.op(), first, err)
				}
				return strerr.Errorf("strand: source %q partition %d: wait to publish %s %d..%d: %w", p.name, pt, k.what(), first, last, err)
			}
		}
		send, err := o.unsent(ctx, pt, rows)
		if err != nil {
			p.update(pt, func(ps *stream.PartitionStats) { k.count(ps, 0, true) })
			return strerr.Errorf("strand: source %q partition %d: check %s %d..%d already published: %w", p.name, pt, k.what(), first, last, err)
		}
		if len(send) > 0 {
			// The rows' commit must be durable before anyone can see the
			// messages (NoSync stores).
			if !p.db.Synced() {
				if err := p.db.SyncWAL(); err != nil {
					return storeErr("sync before publishing "+k.what(), first, err)
				}
			}
			if err := k.beforeSend(pt, send); err != nil {
				return fatal(stream.OpHook, first, err)
			}
			if check := p.opts.check; check != nil {
				if err := check(pt); err != nil {
					return fatal(k.op(), first, err)
				}
			}
			sctx := ctx
			if deadline := p.opts.deadline; deadline != nil {
				until, ok, err := deadline(pt)
				if err != nil {
					return fatal(k.op(), first, err)
				}
				if ok {
					sctx = connector.WithSendDeadline(ctx, until)
				}
			}
			if err := sendRows(sctx, send); err != nil {
				o.raiseUnsure(pt, last+1)
				p.update(pt, func(ps *stream.PartitionStats) { k.count(ps, 0, true) })
				return strerr.Errorf("strand: source %q partition %d: publish %d %s (%d..%d): %w", p.name, pt, len(send), k.what(), first, last, err)
			}
			if err := k.afterSend(pt, send); err != nil {
				o.raiseUnsure(pt, last+1)
				return fatal(stream.OpHook, first, err)
			}
		}

		// A row goes once all of its messages are published (the round
		// holds its last one). Lost in a crash, the deletes only make the
		// rows unsure again: the next run checks them (SentChecker)
		// instead of sending them.
		tx := p.db.NewTxn()
		tx.Lazy()
		for _, r := range rows {
			if r.last {
				tx.DeleteRow(k.family(), pt, r.key)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			o.raiseUnsure(pt, last+1)
			return storeErr("delete published "+k.what(), first, err)
		}
		p.update(pt, func(ps *stream.PartitionStats) { k.count(ps, len(rows), false) })
		if err := k.afterDelete(pt, rows); err != nil {
			return fatal(stream.OpHook, first, err)
		}
		o.flow(pt, func(part *outboxPart) { part.alive, part.failing = time.Now(), false })
	}
}

// unsent returns the rows to send: all of them but those an earlier run or
// a failed Send published already, as their sink's connector.SentChecker
// tells (a sink that cannot tell gets them again).
func (o *outbox) unsent(ctx context.Context, pt uint32, rows []outRow) ([]outRow, error) {
	o.mu.Lock()
	part := o.parts[pt]
	unsure, started, graced := part.unsure, part.started, part.graced
	o.mu.Unlock()
	if !slices.ContainsFunc(rows, func(r outRow) bool { return r.order < unsure }) {
		return rows, nil // none can have been published
	}
	skip := make([]bool, len(rows))
	var inherited bool // rows an earlier run may have been sending
	check := func(only func(r outRow) bool) error {
		bySink := map[string][]int{}
		for i, r := range rows {
			if !skip[i] && only(r) {
				bySink[r.dest] = append(bySink[r.dest], i)
			}
		}
		for _, idx := range bySink {
			checks, ok := rows[idx[0]].sink.(connector.SentChecker)
			if !ok {
				continue
			}
			msgs := make([]connector.Message, len(idx))
			for j, i := range idx {
				msgs[j] = *rows[i].msg()
			}
			sent, err := checks.Sent(ctx, msgs)
			if err == nil && len(sent) != len(msgs) {
				err = fmt.Errorf("strand: connector.SentChecker returned %d answers for %d messages", len(sent), len(msgs))
			}
			if err != nil {
				return err
			}
			for j, i := range idx {
				skip[i] = sent[j]
				if !sent[j] && rows[i].order < started {
					inherited = true
				}
			}
		}
		return nil
	}
	if err := check(func(r outRow) bool { return r.order < unsure }); err != nil {
		return nil, err
	}
	if inherited && !graced {
		// A send of the process that ran before may still be on its way
		// to the broker (it was killed with the request in a socket
		// buffer): give it a moment to land, once per run, and look again.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(o.p.opts.outboxGrace):
		}
		o.mu.Lock()
		part.graced = true
		o.mu.Unlock()
		if err := check(func(r outRow) bool { return r.order < started }); err != nil {
			return nil, err
		}
	}
	out := make([]outRow, 0, len(rows))
	for i, r := range rows {
		if !skip[i] {
			out = append(out, r)
		}
	}
	return out, nil
}

// sendRows sends rows to their sinks, each sink's messages in row order in
// one Send, the sinks concurrently: their orders are independent. It
// returns once every Send has returned, with the first sink's error.
func sendRows(ctx context.Context, rows []outRow) error {
	type dest struct {
		name string
		sink connector.Sink
		msgs []connector.Message
		n    int // rows of this dest
		err  error
	}
	var dests []*dest
	idx := make([]int, len(rows)) // rows[i] goes to dests[idx[i]]
	// contiguous: the messages of each dest are consecutive in one array
	// so far (first[j] is dest j's first row).
	var first []int
	contiguous := []bool{}
	for i := range rows {
		r := &rows[i]
		j := slices.IndexFunc(dests, func(d *dest) bool { return d.name == r.dest })
		if j < 0 {
			j = len(dests)
			dests = append(dests, &dest{name: r.dest, sink: r.sink})
			first = append(first, i)
			contiguous = append(contiguous, true)
		} else if contiguous[j] {
			f := &rows[first[j]]
			contiguous[j] = r.mi == f.mi+dests[j].n && &r.msgs[0] == &f.msgs[0]
		}
		dests[j].n++
		idx[i] = j
	}
	for j, d := range dests {
		if contiguous[j] {
			f := &rows[first[j]]
			d.msgs = f.msgs[f.mi : f.mi+d.n : f.mi+d.n]
		} else {
			d.msgs = make([]connector.Message, 0, d.n)
		}
	}
	for i := range rows {
		if j := idx[i]; !contiguous[j] {
			dests[j].msgs = append(dests[j].msgs, *rows[i].msg())
		}
	}
	if len(dests) == 1 {
		dests[0].err = dests[0].sink.Send(ctx, dests[0].msgs)
	} else {
		var wg sync.WaitGroup
		for _, d := range dests[1:] {
			wg.Go(func() { d.err = d.sink.Send(ctx, d.msgs) })
		}
		dests[0].err = dests[0].sink.Send(ctx, dests[0].msgs)
		wg.Wait()
	}
	for _, d := range dests {
		if d.err != nil {
			return fmt.Errorf("to %s: %w", d.name, d.err)
		}
	}
	return nil
}

// raiseUnsure marks the rows of pt ordered below next as possibly published.
func (o *outbox) raiseUnsure(pt uint32, next uint64) {
	o.mu.Lock()
	o.parts[pt].unsure = max(o.parts[pt].unsure, next)
	o.mu.Unlock()
}

// flow changes the flow-control state of partition pt and wakes await.
func (o *outbox) flow(pt uint32, fn func(part *outboxPart)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	part := o.parts[pt]
	if part == nil {
		return
	}
	fn(part)
	close(part.progress)
	part.progress = make(chan struct{})
}

// await is the flow control of a pipeline that just committed n outbox
// messages of partition pt: it returns once at most max(n, FlowRows)
// of them wait, or at once when the publisher is failing, has not
// published a round for Stall, or Run is ending.
func (o *outbox) await(pt uint32, n int) {
	o.mu.Lock()
	ctx, part := o.runCtx, o.parts[pt]
	o.mu.Unlock()
	if ctx == nil || part == nil {
		return
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ctx.Err() != nil || o.p.outboxPending(pt) <= int64(max(n, FlowRows)) {
			return
		}
		o.mu.Lock()
		failing, idle, ch := part.failing, time.Since(part.alive), part.progress
		o.mu.Unlock()
		if failing || idle >= Stall {
			return
		}
		if timer == nil {
			timer = time.NewTimer(Stall - idle)
		} else {
			timer.Reset(Stall - idle)
		}
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
}
