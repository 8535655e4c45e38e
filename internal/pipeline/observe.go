package pipeline

import (
	"github.com/strand-io/strand/internal/executor"

	"context"
	"fmt"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

// Observer receives a processor's measurements (package internal/telemetry
// turns them into OpenTelemetry metrics and spans). Its methods are called
// on the pipelines' goroutines, concurrently for different partitions, and
// must be quick; they must not keep the records past the call.
type Observer interface {
	// Polled is called on a partition's reader goroutine after every Poll:
	// how many records it returned, when it started and its error.
	Polled(partition uint32, records int, start time.Time, err error)
	// Committed is called on a partition's pipeline goroutine after every
	// commit of a polled batch or of a retry.
	Committed(partition uint32, c Commit)
}

// Commit describes one commit of a partition pipeline for an Observer.
type Commit struct {
	// Retry is true for a commit of Task.Retry (parked keys retried, no new
	// records), false for a polled batch.
	Retry bool
	// Start is when the batch was handed to the Task (or the retry began);
	// End is when its commit was done (for a batch that wrote nothing, and
	// for a retry, when the pipeline saw it done).
	Start, End time.Time
	// Records is the polled batch (nil for a retry).
	Records []connector.Record
	// Result is the Task's result.
	Result executor.Result
	// Store describes the Pebble commit; zero for retries and for batches
	// that wrote nothing.
	Store state.CommitStats
}

type observeOptions struct {
	observer Observer
	endEvery time.Duration // 0: default; <0: never ask the source
}

// DefaultEndOffsetInterval is how often a processor asks a source that is a
// connector.EndOffsetter for its end offsets, unless WithEndOffsetInterval says
// otherwise.
const DefaultEndOffsetInterval = time.Second

// WithObserver makes the processor report its polls and commits to o.
func WithObserver(o Observer) ProcessorOption {
	return func(opts *processorOptions) { opts.observe.observer = o }
}

// WithEndOffsetInterval sets how often Run asks a source that implements
// connector.EndOffsetter for its end offsets (for PartitionStats.End and the
// lag); d < 0 never asks (the end is then only what the reader polled).
func WithEndOffsetInterval(d time.Duration) ProcessorOption {
	return func(opts *processorOptions) { opts.observe.endEvery = d }
}

func (pl *pipeline) observePoll(n int, start time.Time, err error) {
	if o := pl.p.opts.observe.observer; o != nil {
		o.Polled(pl.part, n, start, err)
	}
}

func (pl *pipeline) observeBatch(pend *executor.Pending, res executor.Result) {
	recs := pl.pendRecs
	pl.pendRecs = nil // the batch is done: keep no reference to it
	o := pl.p.opts.observe.observer
	if o == nil {
		return
	}
	c := Commit{Start: pl.pendStart, Records: recs, Result: res}
	c.Store = pend.CommitStats() // done: Wait returned
	c.End = c.Store.End
	if c.End.IsZero() {
		c.End = time.Now()
	}
	o.Committed(pl.part, c)
}

func (pl *pipeline) observeRetry(start time.Time, res executor.Result) {
	if o := pl.p.opts.observe.observer; o != nil {
		o.Committed(pl.part, Commit{Retry: true, Start: start, End: time.Now(), Result: res})
	}
}

// watchEnds starts asking the source for its end offsets periodically, if
// it is a connector.EndOffsetter, and checking them against the state
// (extent.go): a log that no longer matches calls stop with the error and
// ends the watch. It returns a function that stops the watch, waits for it
// and returns that error, if any.
func (p *Processor) watchEnds(ctx context.Context, stop context.CancelCauseFunc) (wait func() error) {
	eo, ok := p.src.(connector.EndOffsetter)
	every := p.opts.observe.endEvery
	if every == 0 {
		every = DefaultEndOffsetInterval
	}
	if !ok || every < 0 {
		return func() error { return nil }
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		changed error
	)
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			nexts := p.committedNexts()
			ends, err := p.refreshEnds(ctx, eo)
			switch {
			case err != nil && ctx.Err() == nil:
				p.log.Debug("strand: end offsets", "err", err)
			case err == nil:
				if cerr := p.checkExtent(ctx, nexts, ends); cerr != nil && ctx.Err() == nil {
					changed = cerr
					p.log.Error("strand: the source's log changed under the processor; stopping", "err", cerr)
					stop(cerr)
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return sync.OnceValue(func() error { cancel(); wg.Wait(); return changed })
}

// refreshEnds asks eo for the end offsets and records them in the stats of
// the partitions the processor runs or has run.
func (p *Processor) refreshEnds(ctx context.Context, eo connector.EndOffsetter) ([]uint64, error) {
	ends, err := eo.EndOffsets(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	p.mu.Lock()
	for pt, ps := range p.stats {
		if int(pt) < len(ends) {
			ps.End, ps.EndAt = max(ps.End, ends[pt]), now
		}
	}
	p.mu.Unlock()
	return ends, nil
}

// EndOffsets asks the source for the end offsets of its partitions now (it
// must be a connector.EndOffsetter) and records them in the stats. The
// result is indexed by partition.
func (p *Processor) EndOffsets(ctx context.Context) ([]uint64, error) {
	eo, ok := p.src.(connector.EndOffsetter)
	if !ok {
		return nil, fmt.Errorf("strand: source %q cannot report its end offsets (not a connector.EndOffsetter)", p.name)
	}
	ends, err := p.refreshEnds(ctx, eo)
	if err != nil {
		return nil, strerr.Errorf("strand: source %q: end offsets: %w", p.name, err)
	}
	return ends, nil
}
