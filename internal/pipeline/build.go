package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// The build readers of tables built in the background and their hand-over
// to the partitions' pipelines (docs/design.md §19; what to build and the
// build's Task are internal/executor's, build.go). Per partition and table
// being built, a build reader runs a Task of its own from the partition's
// first record, never past the main pipeline's last committed checkpoint;
// once it has reached it, it asks the pipeline (handover), which at a batch
// boundary with no parked key answers with its checkpoint m and waits
// while the reader applies the records below m and records the hand-over
// (state.DB.HandOver); the pipeline then applies the table from m on.

// ErrBuildRetention is wrapped by the error a build returns when the log
// no longer holds the records it needs (the source's retention removed
// the oldest ones): the table would miss their events. Open checks it
// first when the connector can tell (executor.ErrBuildRetention).
var ErrBuildRetention = executor.ErrBuildRetention

// handoverReq is a build reader's request to the main pipeline of its
// partition: answer with the pipeline's checkpoint (next; ok false: not
// now) and wait for done (true: the partition was handed over).
type handoverReq struct {
	table string
	reply chan handoverReply
	done  chan bool
}

type handoverReply struct {
	next uint64
	ok   bool
}

// serveHandover answers a build reader from the pipeline goroutine
// (pipeline.loop): at a batch boundary with no parked key, it gives its
// checkpoint and waits until the reader has applied the records below it.
func (pl *pipeline) serveHandover(ctx context.Context, req handoverReq) error {
	if err := pl.finishCommit(); err != nil {
		req.reply <- handoverReply{}
		return err
	}
	// finishCommit ended the commit whose end (pendDone) would have given
	// the writer turn up: give it up here, refused or not, or the
	// pipelines of other sources of the partition wait for it until this
	// one's next batch, which may never come.
	pl.giveTurn()
	if k, _ := pl.task.Parked(); k > 0 {
		req.reply <- handoverReply{}
		return nil
	}
	req.reply <- handoverReply{next: pl.task.Next(), ok: true}
	select {
	case ok := <-req.done:
		if ok {
			pl.task.SetBuilding(req.table, false)
			pl.log.Info("strand: table build handed over to the main pipeline", "table", req.table, "offset", pl.task.Next())
		}
	case <-ctx.Done():
	}
	return nil
}

// buildIdle is how long a build reader that has caught up waits before it
// asks again (the pipeline refused, or it had nothing to read).
const buildIdle = 50 * time.Millisecond

// build runs the build reader of table tb in the pipeline's partition
// until it is handed over or ctx is done.
func (pl *pipeline) build(ctx context.Context, tb *executor.TableBuild) error {
	p, pt := pl.p, pl.part
	topts := append([]executor.TaskOption{executor.WithLogger(p.opts.log.With(slog.String("component", "strand/build"), slog.String("table", tb.Table())))}, p.opts.taskOpts...)
	if p.opts.clock != nil {
		topts = append(topts, executor.WithClock(p.opts.clock.Now))
	}
	task, err := p.prog.NewBuildTask(ctx, p.db, tb, pt, topts...)
	if err != nil {
		return pl.errorf(stream.OpOpen, 0, fmt.Errorf("build table %q: %w", tb.Table(), err))
	}
	from := task.Next()
	tb.Progress(pt, from, pl.mainNext.Load())
	rd, err := p.src.Open(ctx, pt, from)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return pl.errorf(stream.OpOpen, from, fmt.Errorf("build table %q: %w", tb.Table(), err))
	}
	defer rd.Close()
	br := &buildReader{rd: rd, next: from, first: !task.Resumed(), size: p.opts.pollSize}
	fail := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return pl.errorf(stream.OpProcess, task.Next(), fmt.Errorf("build table %q: %w", tb.Table(), err))
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		target := pl.mainNext.Load()
		tb.Progress(pt, task.Next(), target)
		if at, ok := task.NextRetry(); ok && !at.After(task.Now()) {
			if _, err := task.Retry(ctx); err != nil {
				return fail(err)
			}
		}
		if task.Next() < target {
			recs, err := br.read(ctx, target)
			if err != nil {
				return fail(err)
			}
			if len(recs) > 0 {
				if _, err := task.Process(ctx, recs); err != nil {
					return fail(err)
				}
				tb.Progress(pt, task.Next(), target)
			}
			continue
		}
		if k, _ := task.Parked(); k > 0 {
			if !sleepCtx(ctx, buildIdle) {
				return nil
			}
			continue
		}
		handed, err := pl.handOver(ctx, tb, task, br)
		if err != nil {
			return fail(err)
		}
		if handed {
			if err := tb.HandedOver(ctx, p.db, pt); err != nil {
				return fail(err)
			}
			return nil
		}
		if !sleepCtx(ctx, buildIdle) {
			return nil
		}
	}
}

// handOver asks the pipeline for the hand-over and, when it agrees,
// applies the records up to its checkpoint and records the hand-over.
func (pl *pipeline) handOver(ctx context.Context, tb *executor.TableBuild, task *executor.Task, br *buildReader) (bool, error) {
	req := handoverReq{table: tb.Table(), reply: make(chan handoverReply, 1), done: make(chan bool, 1)}
	select {
	case pl.handover <- req:
	case <-ctx.Done():
		return false, nil
	case <-pl.stopped:
		return false, nil
	}
	var rep handoverReply
	select {
	case rep = <-req.reply:
	case <-ctx.Done():
		return false, nil
	}
	if !rep.ok {
		return false, nil
	}
	handed := false
	defer func() { req.done <- handed }()
	for task.Next() < rep.next {
		recs, err := br.read(ctx, rep.next)
		if err != nil {
			return false, err
		}
		if _, err := task.Process(ctx, recs); err != nil {
			return false, err
		}
		tb.Progress(pl.part, task.Next(), rep.next)
	}
	if k, _ := task.Parked(); k > 0 {
		return false, nil // a record of the last stretch failed: retried first
	}
	if err := pl.p.db.HandOver(ctx, tb.Table(), pl.part, rep.next, tb.Alias(), tb.Prefixes()); err != nil {
		return false, err
	}
	handed = true
	return true, nil
}

// buildReader reads a partition for a build reader, never past a limit:
// records it polled beyond it wait for the next read.
type buildReader struct {
	rd    connector.PartitionReader
	next  uint64 // the offset of the first record not handed out
	first bool   // nothing read yet from a build that starts at the log's start
	carry []connector.Record
	size  int
}

func (br *buildReader) read(ctx context.Context, limit uint64) ([]connector.Record, error) {
	if len(br.carry) == 0 {
		recs, err := br.rd.Poll(ctx, br.size)
		if err != nil {
			return nil, err
		}
		if len(recs) > 0 && br.first && recs[0].Offset > br.next {
			return nil, fmt.Errorf("%w: records %d to %d of the partition are gone; reset the store (strand reset) to rebuild every table from what the log holds",
				ErrBuildRetention, br.next, recs[0].Offset-1)
		}
		br.first = false
		br.carry = recs
	}
	n := 0
	for n < len(br.carry) && br.carry[n].Offset < limit {
		n++
	}
	out := br.carry[:n:n]
	br.carry = br.carry[n:]
	if n > 0 {
		br.next = out[n-1].Offset + 1
	}
	return out, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
