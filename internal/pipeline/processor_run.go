package pipeline

import (
	"github.com/strand-io/strand/internal/outbox"

	"github.com/strand-io/strand/internal/executor"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// ErrNotContiguous is wrapped by the error Run returns when a
// PartitionReader returned records that do not continue exactly where the
// previous poll ended (or, for the first poll, at the checkpoint): the
// processor refuses to skip or repeat records silently.
var ErrNotContiguous = errors.New("strand: source records not contiguous")

// adviseTimeout bounds the last Advise of a partition at shutdown.
const adviseTimeout = 2 * time.Second

// adviseInterval is the least time between two Advise calls of one
// partition: they are for monitoring and share the reader's connection.
const adviseInterval = 200 * time.Millisecond

// idleRetryFloor is the least wait between two Retry calls that found
// nothing due (a Task clock that lags the wall clock would spin otherwise).
const idleRetryFloor = 100 * time.Millisecond

// Run processes the source until ctx is done or a pipeline fails; see
// Processor for the data flow, the guarantees and the shutdown. It reads
// the partition count, makes one Task per partition (from the committed
// checkpoints and parked events in the store) and opens one PartitionReader
// per partition at its checkpoint; a failure there is returned at once.
//
// Run returns nil after a graceful stop caused by ctx, a *PartitionError
// when a pipeline failed, and ErrRunning when called while running. Every
// goroutine it started has returned and every reader is closed when it
// returns. PartitionReader.Advise is called from its own goroutine, possibly
// while Poll is in progress on the reader.
func (p *Processor) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return strerr.Errorf("strand: run source %q: %w", p.name, ErrRunning)
	}
	defer p.running.Store(false)

	parts, err := p.runPartitions(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	return p.run(ctx, parts)
}

// RunPartitions is Run over the given partitions only, whatever
// WithPartitions said (scale-out runs the partitions its instance owns).
// An empty set returns at once.
func (p *Processor) RunPartitions(ctx context.Context, parts []uint32) error {
	if !p.running.CompareAndSwap(false, true) {
		return strerr.Errorf("strand: run source %q: %w", p.name, ErrRunning)
	}
	defer p.running.Store(false)
	if len(parts) == 0 {
		return nil
	}
	n, err := p.src.Partitions(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		// Scale-out starts a generation after every change of ownership,
		// often right after a broker outage: the count checked at Open
		// serves (the readers retry their polls; a changed count is
		// caught by the next check that reaches the broker).
		if n = p.opts.extent.partitions; n == 0 {
			return strerr.Errorf("strand: run source %q: partitions: %w", p.name, err)
		}
		p.log.Warn("strand: partition count unavailable; using the one checked at Open", "source", p.name, "partitions", n, "err", err)
	}
	if err := p.checkPartitionCount(n); err != nil {
		return strerr.Errorf("strand: run source %q: %w", p.name, err)
	}
	parts = slices.Sorted(slices.Values(parts))
	for i, pt := range parts {
		if pt >= n {
			return fmt.Errorf("strand: run source %q: partition %d does not exist (the source has %d)", p.name, pt, n)
		}
		if i > 0 && parts[i-1] == pt {
			return fmt.Errorf("strand: run source %q: partition %d given twice", p.name, pt)
		}
	}
	return p.run(ctx, parts)
}

func (p *Processor) run(ctx context.Context, parts []uint32) (err error) {

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	drainCtx, stopDrain := drainContext(ctx, runCtx, p.opts.drainTimeout)
	defer stopDrain()

	var outboxes outboxes
	cfg := p.outboxConfig()
	if p.opts.sink != nil {
		if outboxes.dead, err = outbox.NewDeadLetters(cfg); err != nil {
			return strerr.Errorf("strand: run source %q: %w", p.name, err)
		}
	} else {
		p.log.Warn("strand: processor has no dead-letter sink; dead letters stay in the store")
	}
	if len(p.prog.Outputs(p.name)) > 0 {
		if outboxes.msgs, err = outbox.NewMessages(cfg); err != nil {
			return strerr.Errorf("strand: run source %q: %w", p.name, err)
		}
	}
	if err := p.opts.builds.FinishReady(runCtx); err != nil { // build.go
		return err
	}
	pls, err := p.openPipelines(runCtx, parts, outboxes)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	p.log.Info("strand: processor started", "partitions", len(pls))
	stopEnds := p.watchEnds(runCtx, cancel) // extent.go: a log that changed stops the run
	defer stopEnds()

	err = p.runAll(runCtx, drainCtx, cancel, pls, outboxes)
	if cerr := stopEnds(); err == nil {
		err = cerr
	}
	p.mu.Lock()
	for _, pl := range pls {
		delete(p.live, pl.part)
	}
	p.mu.Unlock()
	if err == nil {
		p.log.Info("strand: processor stopped")
	}
	return err
}

// drainContext returns the context that in-flight batches and the last
// dead-letter publication use: it outlives runCtx by the drain timeout (the
// timer starts when runCtx is done), so a stop commits what is in flight
// without waiting forever. stop releases its timer.
func drainContext(ctx, runCtx context.Context, timeout time.Duration) (drainCtx context.Context, stop func()) {
	drainCtx, cancelDrain := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu       sync.Mutex
		timer    *time.Timer
		finished bool
	)
	stopAfter := context.AfterFunc(runCtx, func() {
		mu.Lock()
		if !finished {
			timer = time.AfterFunc(timeout, cancelDrain)
		}
		mu.Unlock()
	})
	return drainCtx, func() {
		stopAfter()
		mu.Lock()
		finished = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancelDrain()
	}
}

// outboxes are a processor's outboxes: of its dead letters and of its To
// and KeyBy messages; nil when it has none of that kind.
type outboxes struct {
	dead, msgs *outbox.Outbox
}

func (o outboxes) all() []*outbox.Outbox {
	var out []*outbox.Outbox
	for _, b := range []*outbox.Outbox{o.dead, o.msgs} {
		if b != nil {
			out = append(out, b)
		}
	}
	return out
}

// runAll runs every pipeline and the outboxes until they stop, and
// returns the first failure; a failure stops the others (cancel). The
// outboxes make their last pass after every pipeline has stopped.
func (p *Processor) runAll(runCtx, drainCtx context.Context, cancel context.CancelCauseFunc, pls []*pipeline, obs outboxes) error {
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
			p.log.Error("strand: processor stopping after a failure", "err", err)
		}
		errMu.Unlock()
		cancel(err)
	}
	pipelinesDone := make(chan struct{})
	var outboxWG sync.WaitGroup
	for _, ob := range obs.all() {
		outboxWG.Go(func() { ob.Run(runCtx, drainCtx, pipelinesDone, fail) })
	}
	for _, pl := range pls {
		wg.Go(func() {
			if err := pl.run(runCtx, drainCtx); err != nil {
				fail(err)
			}
		})
		for _, tb := range p.opts.builds.BuildsOf(p.name, pl.part) { // build.go
			wg.Go(func() {
				if err := pl.build(runCtx, tb); err != nil {
					fail(err)
				}
			})
		}
	}
	wg.Wait()
	close(pipelinesDone)
	outboxWG.Wait()
	errMu.Lock()
	defer errMu.Unlock()
	return firstErr
}

// runPartitions returns the partitions to run, checked against the source.
func (p *Processor) runPartitions(ctx context.Context) ([]uint32, error) {
	n, err := p.src.Partitions(ctx)
	if err != nil {
		return nil, strerr.Errorf("strand: run source %q: partitions: %w", p.name, err)
	}
	if err := p.checkPartitionCount(n); err != nil {
		return nil, strerr.Errorf("strand: run source %q: %w", p.name, err)
	}
	if len(p.opts.partitions) == 0 {
		if n == 0 {
			return nil, fmt.Errorf("strand: run source %q: the source has no partitions", p.name)
		}
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(i)
		}
		return out, nil
	}
	out := slices.Sorted(slices.Values(p.opts.partitions))
	for _, pt := range out {
		if pt >= n {
			return nil, fmt.Errorf("strand: run source %q: partition %d does not exist (the source has %d)", p.name, pt, n)
		}
	}
	return out, nil
}

// openPipelines makes the Task and opens the reader of every partition. On
// failure it closes what it opened.
func (p *Processor) openPipelines(ctx context.Context, parts []uint32, obs outboxes) ([]*pipeline, error) {
	// Tasks name their source and partition in their own log lines.
	topts := append([]executor.TaskOption{executor.WithLogger(p.opts.log.With(slog.String("component", "strand/processor")))}, p.opts.taskOpts...)
	if p.opts.clock != nil {
		topts = append(topts, executor.WithClock(p.opts.clock.Now))
	}
	var pls []*pipeline
	closeAll := func() {
		for _, pl := range pls {
			_ = pl.reader.Close()
		}
	}
	for _, pt := range parts {
		task, err := p.prog.NewTask(ctx, p.db, p.name, pt, topts...)
		if err != nil {
			closeAll()
			return nil, &PartitionError{Source: p.name, Partition: pt, Op: stream.OpOpen, Err: err}
		}
		rd, err := p.src.Open(ctx, pt, task.Next())
		if err != nil {
			closeAll()
			return nil, &PartitionError{Source: p.name, Partition: pt, Offset: task.Next(), Op: stream.OpOpen, Err: err}
		}
		pl := &pipeline{
			p: p, part: pt, task: task, reader: rd, outboxes: obs,
			batches:  make(chan []connector.Record, p.opts.prefetch+1),
			flow:     newFlow(pt, p.opts.prefetch, obs.msgs),
			advise:   make(chan uint64, 1),
			unblock:  make(chan unblockReq),
			handover: make(chan handoverReq),
			stopped:  make(chan struct{}),
			log:      p.log.With(slog.Uint64("partition", uint64(pt))),
			advised:  task.Next(),
			readFrom: task.Next(),
			turn:     p.opts.writers.turn(pt),
		}
		pl.mainNext.Store(task.Next())
		for _, tb := range p.opts.builds.BuildsOf(p.name, pt) { // build.go
			task.SetBuilding(tb.Table(), true)
		}
		pls = append(pls, pl)
		if obs.dead != nil {
			obs.dead.Start(pt, task.Next())
		}
		if obs.msgs != nil {
			n, err := outbox.CountMessages(ctx, p.db, p.name, pt)
			if err != nil {
				closeAll()
				_ = rd.Close()
				return nil, &PartitionError{Source: p.name, Partition: pt, Offset: task.Next(), Op: stream.OpOpen, Err: fmt.Errorf("count outbox messages: %w", err)}
			}
			pl.outboxFound = n
			obs.msgs.Start(pt, task.OutboxNext())
		}
	}
	p.mu.Lock()
	for _, pl := range pls {
		p.live[pl.part] = pl
	}
	p.mu.Unlock()
	// Stats show a partition only once it takes Release requests: a caller
	// that waits for a partition in Stats may then release its keys.
	for _, pl := range pls {
		p.update(pl.part, func(ps *stream.PartitionStats) {
			ps.Next = pl.task.Next()
			parkedStats(pl.task, ps)
			if obs.msgs != nil {
				p.outboxBase[pl.part] = int64(pl.outboxFound) - int64(ps.OutboxCommitted) + int64(ps.OutboxPublished)
			}
		})
	}
	return pls, nil
}

// pipeline is one partition's reader, executor and advisor.
type pipeline struct {
	p        *Processor
	part     uint32
	task     *executor.Task
	reader   connector.PartitionReader
	outboxes outboxes
	log      *slog.Logger

	batches chan []connector.Record // polled batches, in offset order
	flow    *flow                   // the pipeline's backpressure (flow.go)
	advise  chan uint64             // latest committed checkpoint to advise
	unblock chan unblockReq         // Unblock requests
	// handover takes the requests of the partition's build readers
	// (build.go); mainNext is the checkpoint of the last commit finished.
	handover chan handoverReq
	mainNext atomic.Uint64
	stopped  chan struct{} // closed when the pipeline loop has returned

	advised  uint64 // last offset advised (advisor goroutine, then run)
	readFrom uint64 // next offset the reader expects (reader goroutine)

	// pend is the last batch given to Task.Submit whose commit has not
	// been accounted for yet (pipeline goroutine only). Its commit runs
	// while the next batch executes.
	pend      *executor.Pending
	pendFirst uint64
	pendStart time.Time          // when pend was handed to Submit (telemetry)
	pendRecs  []connector.Record // pend's records (telemetry)

	// turn is the partition's writer turn shared with the pipelines of
	// the other sources that write the same tables (writers.go), nil when
	// the source shares no state; holding says this pipeline has it.
	turn    *writerTurn
	holding bool

	outboxFound int // outbox messages found in the store at the start
}

// takeTurn makes the pipeline its partition's writer, waiting for the
// pipelines of other sources that write the same tables; it does nothing
// when the source shares no state or the pipeline has the turn already.
func (pl *pipeline) takeTurn(ctx context.Context) error {
	if pl.turn == nil || pl.holding {
		return nil
	}
	if err := pl.turn.take(ctx); err != nil {
		return err
	}
	pl.holding = true
	return nil
}

// giveTurn gives the writer turn up once no commit of the pipeline is in
// flight (its writes are then visible to whoever takes the turn next).
func (pl *pipeline) giveTurn() {
	if pl.holding && pl.pend == nil {
		pl.turn.give()
		pl.holding = false
	}
}

type unblockReq struct {
	key  []byte
	done chan error
}

func (pl *pipeline) errorf(op stream.PartitionOp, offset uint64, err error) *PartitionError {
	return &PartitionError{Source: pl.p.name, Partition: pl.part, Offset: offset, Op: op, Err: err}
}

// run runs the partition until ctx is done or it fails, then stops its
// goroutines, advises the last checkpoint and closes the reader.
func (pl *pipeline) run(runCtx, drainCtx context.Context) error {
	ctx, cancel := context.WithCancel(runCtx)
	readErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { readErr <- pl.read(ctx) })
	wg.Go(func() { pl.adviseLoop(ctx) })
	err := pl.loop(ctx, drainCtx, readErr)
	// A commit still in flight (the loop stopped on an error) finishes
	// before the pipeline is gone; it never outlives Run.
	if serr := pl.finishCommit(); err == nil {
		err = serr
	}
	pl.giveTurn()
	cancel()
	wg.Wait()
	close(pl.stopped)

	if next := pl.task.Next(); next != pl.advised {
		actx, cancelAdvise := context.WithTimeout(context.WithoutCancel(runCtx), adviseTimeout)
		if aerr := pl.reader.Advise(actx, next); aerr != nil {
			pl.log.Debug("strand: advise failed", "next", next, "err", aerr)
		}
		cancelAdvise()
	}
	if cerr := pl.reader.Close(); cerr != nil {
		pl.log.Warn("strand: close reader", "err", cerr)
	}
	return err
}

// loop is the pipeline goroutine: it processes polled batches, retries
// parked keys when they are due and serves Release requests.
func (pl *pipeline) loop(ctx, drainCtx context.Context, readErr <-chan error) (err error) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	floor := time.Duration(0)
	// failed is the reader's error once it stopped on one: the batches it
	// queued before it are contiguous and were polled before the failure,
	// so they are processed and committed first (a select picking the
	// error before them would drop their commit at random), then Run
	// ends with it.
	var failed error
	defer func() {
		if err == nil {
			err = failed // stopped (ctx) while processing them: still the reader's error
		}
	}()
	for {
		if failed != nil && len(pl.batches) == 0 {
			if err := pl.finishCommit(); err != nil {
				return err
			}
			return failed
		}
		var retryC <-chan time.Time
		if at, ok := pl.task.NextRetry(); ok {
			if c := pl.p.opts.clock; c != nil {
				if floor > 0 {
					at = latest(at, c.Now().Add(floor))
				}
				retryC = c.At(at)
			} else {
				timer.Reset(max(time.Until(at), floor))
				retryC = timer.C
			}
		} else {
			timer.Stop()
		}
		var pendDone <-chan struct{}
		if pl.pend != nil {
			pendDone = pl.pend.Done()
		}
		select {
		case <-ctx.Done():
			return pl.finishCommit()
		case err := <-readErr:
			if err != nil {
				failed, readErr = err, nil // the reader has stopped: nothing more is queued
				continue
			}
			return pl.finishCommit() // the reader stops without an error only when ctx is done
		case <-pendDone:
			if err := pl.finishCommit(); err != nil {
				return err
			}
			pl.giveTurn() // idle: the other sources' pipelines may write
			continue
		case recs := <-pl.batches:
			if ctx.Err() != nil {
				return pl.finishCommit() // this batch not started: read again next time
			}
			if pl.holding && pl.turn.wanted() {
				// Another source waits for the partition: let it write
				// once this pipeline's commit is done.
				if err := pl.finishCommit(); err != nil {
					return err
				}
				pl.giveTurn()
			}
			if err := pl.takeTurn(ctx); err != nil {
				return pl.finishCommit() // stopped while waiting: read again next time
			}
			// process keeps the batch's slot while its commit is in
			// flight (finishCommit frees it), so the read-ahead bound counts
			// every batch not yet committed.
			if err := pl.process(drainCtx, recs); err != nil {
				return err
			}
		case <-retryC:
			if err := pl.finishCommit(); err != nil {
				return err
			}
			if err := pl.takeTurn(ctx); err != nil {
				return nil
			}
			did, err := pl.retry(drainCtx)
			pl.giveTurn()
			if err != nil {
				return err
			}
			floor = 0
			if !did {
				floor = idleRetryFloor
			}
		case req := <-pl.handover:
			if err := pl.serveHandover(ctx, req); err != nil {
				return err
			}
		case req := <-pl.unblock:
			if err := pl.finishCommit(); err != nil {
				req.done <- err
				return err
			}
			err := pl.task.Unblock(drainCtx, req.key)
			pl.p.update(pl.part, func(ps *stream.PartitionStats) { parkedStats(pl.task, ps) })
			// finishCommit ended the commit whose end (pendDone) gives the
			// turn up when idle: give it up here, or a pipeline of another
			// source of the partition waits for it until this one's next
			// batch, which may never come.
			pl.giveTurn()
			req.done <- err
		}
	}
}

// process runs one polled batch through the Task.
func (pl *pipeline) process(ctx context.Context, recs []connector.Record) error {
	h := &pl.p.opts.hooks
	first := recs[0].Offset
	start := time.Now()
	if h.BeforeProcess != nil {
		if err := h.BeforeProcess(pl.part, recs); err != nil {
			return pl.errorf(stream.OpHook, first, fmt.Errorf("BeforeProcess: %w", err))
		}
	}
	// Submit executes the batch, waits for the previous batch's commit
	// and starts this one's: the commit overlaps the next batch's work.
	pend, err := pl.task.Submit(ctx, recs)
	serr := pl.finishCommit() // the previous batch: Submit waited for its commit
	if err == nil {
		// Tracked even when accounting for the previous batch failed, so
		// that this commit is finished before the pipeline is gone.
		pl.pend, pl.pendFirst = pend, first
		pl.pendStart, pl.pendRecs = start, recs
		return serr
	}
	pl.flow.done() // this batch is not pending
	if serr != nil {
		return serr
	}
	if ctx.Err() != nil {
		pl.log.Warn("strand: shutdown timed out; batch abandoned, nothing of it committed",
			"first", first, "last", recs[len(recs)-1].Offset)
		pl.noteStuck()
		return nil
	}
	return pl.errorf(stream.OpProcess, first, err)
}

// finishCommit waits for the commit of the batch last given to Submit, if any,
// and accounts for it (stats, AfterCommit, advice, dead letters).
func (pl *pipeline) finishCommit() error {
	pend := pl.pend
	if pend == nil {
		return nil
	}
	pl.pend = nil
	res, err := pend.Wait()
	if err != nil {
		pl.flow.done()
		return pl.errorf(stream.OpCommit, pl.pendFirst, err)
	}
	pl.observeBatch(pend, res)
	err = pl.committed(res, true)
	pl.flow.done() // only now may the reader poll in the batch's place
	return err
}

// noteStuck reports the runs of an abandoned batch whose handlers had not
// returned (Task.Stuck) in the partition's stats.
func (pl *pipeline) noteStuck() {
	if st := pl.task.Stuck(); st != nil {
		pl.p.update(pl.part, func(ps *stream.PartitionStats) { ps.Stuck = st })
	}
}

// retry retries due parked keys; did reports whether anything was tried.
func (pl *pipeline) retry(ctx context.Context) (did bool, err error) {
	h := &pl.p.opts.hooks
	start := time.Now()
	if h.BeforeProcess != nil {
		if err := h.BeforeProcess(pl.part, nil); err != nil {
			return false, pl.errorf(stream.OpHook, pl.task.Next(), fmt.Errorf("BeforeProcess: %w", err))
		}
	}
	res, err := pl.task.Retry(ctx)
	if err != nil {
		if ctx.Err() != nil {
			pl.noteStuck()
			return false, nil
		}
		return false, pl.errorf(stream.OpRetry, pl.task.Next(), err)
	}
	if res.Records == 0 && !res.Swept {
		return false, nil
	}
	pl.observeRetry(start, res)
	return true, pl.committed(res, false)
}

// committed accounts for a commit, calls AfterCommit, advises the new
// checkpoint and wakes the dead-letter publisher.
func (pl *pipeline) committed(res executor.Result, batch bool) error {
	// The commit returned: its rows may be published (outbox.returned).
	if pl.outboxes.dead != nil {
		pl.outboxes.dead.Committed(pl.part, res.Next)
	}
	if n := len(res.Outbox); n > 0 && pl.outboxes.msgs != nil {
		pl.outboxes.msgs.Committed(pl.part, res.Outbox[n-1].Seq+1)
	}
	now := time.Now()
	pl.mainNext.Store(res.Next)
	pl.p.update(pl.part, func(ps *stream.PartitionStats) {
		ps.Next, ps.LastCommit = res.Next, now
		parkedStats(pl.task, ps)
		ps.Records += uint64(res.Records)
		ps.Applied += uint64(len(res.Applied))
		ps.Skipped += uint64(len(res.Skipped))
		ps.DeadLettered += uint64(len(res.DeadLetters))
		ps.Failures += uint64(len(res.Failures))
		ps.Resequenced += uint64(res.LetThrough)
		ps.Duplicates += uint64(res.Duplicates)
		ps.Readmitted += uint64(res.Readmitted)
		ps.OutboxCommitted += uint64(res.Emitted)
		ps.Redelivered += uint64(res.Redelivered)
		ps.Expired += uint64(res.Expired)
		ps.TimersFired += uint64(res.Fired)
		ps.TimerFailures += uint64(res.TimerFailures)
		ps.LateEvents += uint64(res.Late)
		ps.WindowsClosed += uint64(res.WindowsClosed)
		ps.Gaps += uint64(len(res.Gaps))
		if batch {
			ps.Batches++
		} else {
			ps.Retries++
		}
	})
	if h := pl.p.opts.hooks.AfterCommit; h != nil {
		if err := h(pl.part, res); err != nil {
			return pl.errorf(stream.OpHook, res.Next, fmt.Errorf("AfterCommit: %w", err))
		}
	}
	if batch {
		select {
		case <-pl.advise:
		default:
		}
		pl.advise <- res.Next
	}
	if len(res.DeadLetters) > 0 && pl.outboxes.dead != nil {
		pl.outboxes.dead.Notify(pl.part)
	}
	if res.Emitted > 0 && pl.outboxes.msgs != nil {
		pl.outboxes.msgs.Push(pl.part, res.Outbox)
		pl.flow.committed(len(res.Outbox)) // may wait for the publisher
	}
	return nil
}

// read is the reader goroutine: it polls while a slot is free and queues
// the batches. It returns nil when ctx is done.
func (pl *pipeline) read(ctx context.Context) error {
	for {
		if !pl.flow.poll(ctx) {
			return nil
		}
		pollStart := time.Now()
		recs, err := pl.reader.Poll(ctx, pl.p.opts.pollSize)
		pl.observePoll(len(recs), pollStart, err)
		if err != nil {
			pl.flow.done()
			if ctx.Err() != nil {
				return nil
			}
			return pl.errorf(stream.OpPoll, pl.readFrom, err)
		}
		if len(recs) == 0 {
			pl.flow.done()
			continue
		}
		for i := range recs {
			if want := pl.readFrom + uint64(i); recs[i].Offset != want {
				return pl.errorf(stream.OpPoll, want, fmt.Errorf("%w: record %d of the batch has offset %d, want %d", ErrNotContiguous, i, recs[i].Offset, want))
			}
			recs[i].Partition = pl.part
		}
		pl.readFrom += uint64(len(recs))
		pl.p.update(pl.part, func(ps *stream.PartitionStats) {
			ps.Polled += uint64(len(recs))
			ps.End = max(ps.End, pl.readFrom)
		})
		if h := pl.p.opts.hooks.AfterPoll; h != nil {
			if err := h(pl.part, recs); err != nil {
				return pl.errorf(stream.OpHook, recs[0].Offset, fmt.Errorf("AfterPoll: %w", err))
			}
		}
		pl.batches <- recs // never blocks: the flow's slots bound the queue
	}
}

// adviseLoop is the advisor goroutine: it tells the broker the latest
// committed checkpoint, skipping values superseded meanwhile.
func (pl *pipeline) adviseLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case next := <-pl.advise:
			if next == pl.advised {
				continue
			}
			if err := pl.reader.Advise(ctx, next); err != nil {
				if ctx.Err() == nil {
					pl.log.Debug("strand: advise failed", "next", next, "err", err)
				}
				continue
			}
			pl.advised = next
			select { // later values wait in the mailbox, the latest wins
			case <-ctx.Done():
				return
			case <-time.After(adviseInterval):
			}
		}
	}
}

// parkedStats copies the Task's parked keys, records and next retry into ps.
func parkedStats(t *executor.Task, ps *stream.PartitionStats) {
	ps.ParkedKeys, ps.ParkedRecords = t.Parked()
	ps.NextRetry = time.Time{}
	if at, ok := t.NextRetry(); ok {
		ps.NextRetry = at
	}
	ps.HeldKeys, ps.HeldRecords, ps.OldestHold, ps.NextGapTimeout = t.HeldStats()
	ps.NextDeadline = time.Time{}
	if at, ok := t.NextDeadline(); ok {
		ps.NextDeadline = at
	}
	ps.ReplayMark = t.Replaying() // replaymark.go
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
