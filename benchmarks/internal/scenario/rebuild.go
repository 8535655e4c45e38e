package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector/memconn"
)

// Rebuild measures a table rebuilt in the background (issue 26,
// docs/design.md §19): the core workload is applied to a fresh store by
// one Task per partition (timed: the core rate of the same run, Extra
// "core_rate"), then the same program with the balances table at version 1
// is started on the store by a processor per source over an in-memory
// topic holding the log, and the time until the table has switched to its
// rebuilt rows is the measured section (Rate: events rebuilt per second).
// The rebuilt table is checked against the sequential reference.
func Rebuild(ctx context.Context, o CoreOptions) (Result, error) {
	log, err := o.PrepareLog()
	if err != nil {
		return Result{}, err
	}
	res, dir, err := newRun("rebuild", "strand", o.Codec, log, o.Dir, "rebuild-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	n := log.Partitions()

	// The store as version 0 leaves it (the core scenario's run).
	topo0, err := workload.NewTopology(log.Decls, o.Workers)
	if err != nil {
		return res, err
	}
	db, err := state.Open(dir, state.WithDurability(state.Sync), state.WithLogger(quietLogger()))
	if err != nil {
		return res, err
	}
	if err := topo0.Program.Attach(db); err != nil {
		_ = db.Close()
		return res, err
	}
	tasks := make([]*executor.Task, n)
	for p := range n {
		if tasks[p], err = topo0.Program.NewTask(ctx, db, workload.Source, p, executor.WithLogger(quietLogger())); err != nil {
			_ = db.Close()
			return res, err
		}
	}
	start := time.Now()
	if _, err := runTasks(ctx, log, tasks, o.Batch, true); err != nil {
		_ = db.Close()
		return res, err
	}
	coreRate := float64(log.Len()) / time.Since(start).Seconds()
	if err := db.Close(); err != nil {
		return res, err
	}

	// The log, in memory.
	b, err := memconn.New()
	if err != nil {
		return res, err
	}
	topic, err := b.CreateTopic(workload.Source, n)
	if err != nil {
		return res, err
	}
	for p := range n {
		for _, r := range log.Records(nil, p, 0, log.PartitionLen(p)) {
			if _, err := topic.Append(p, r); err != nil {
				return res, err
			}
		}
	}

	topo1, err := workload.NewTopologyVersion(log.Decls, o.Workers, 1)
	if err != nil {
		return res, err
	}
	topo1.SetPartitions(n)
	db, err = state.Open(dir, state.WithDurability(state.Sync), state.WithLogger(quietLogger()))
	if err != nil {
		return res, err
	}
	defer db.Close()
	m, err := startMeasure(o.CPUProfile)
	if err != nil {
		return res, err
	}
	ev, err := topo1.Program.AttachEvolving(ctx, db, map[string]uint32{workload.Source: n})
	if err != nil {
		return res, err
	}
	if !ev.Building() {
		return res, errors.New("rebuild: the new version started without a build")
	}
	proc, err := pipeline.NewProcessor(topo1.Program, db, topic, pipeline.WithBuilds(ev), pipeline.WithProcessorLogger(quietLogger()),
		pipeline.WithPollSize(o.Batch))
	if err != nil {
		return res, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(runCtx) }()
	for ev.Building() {
		select {
		case err := <-done:
			cancel()
			return res, fmt.Errorf("rebuild: the processor stopped: %w", err)
		case <-time.After(time.Millisecond):
		}
	}
	m.stop(&res)
	cancel()
	if err := <-done; err != nil {
		return res, err
	}
	got, err := workload.ReadBalances(ctx, topo1.Balances)
	if err != nil {
		return res, err
	}
	if err := log.Verify(got); err != nil {
		return res, err
	}
	res.Verified = true
	res.Extra = map[string]float64{"core_rate": coreRate}
	return res, nil
}
