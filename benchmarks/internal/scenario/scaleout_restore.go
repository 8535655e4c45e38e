package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/internal/scaleout/changelog"
	"github.com/strand-io/strand/stream/topology"
)

// The restore measurement's variants.
const (
	// RestoreNaive processes the partition's log from scratch on a fresh
	// store, outside any group: what a new owner does without a
	// changelog (the baseline).
	RestoreNaive = "naive"
	// RestoreChangelog: a new owner restores from a changelog without
	// snapshots (topology.WithSnapshotEvery(0)).
	RestoreChangelog = "clog"
	// RestoreSnapshot: a new owner restores from the latest snapshot and
	// the commits after it.
	RestoreSnapshot = "snap"
)

// ScaleoutRestore measures how long a new owner takes to serve a partition
// holding o.Keys accounts with o.History events per key: the log is
// published (one partition), an owner processes it in a group, with
// snapshots every o.SnapshotEvery commits (snap) or none (clog), its
// changelog settles and it leaves; then a new owner on a fresh store is
// opened and the clock runs from topology.Open to the partition being
// Serving there (join, fence, restore). naive times topology.Open to the
// last event committed by an App outside a group on a fresh store. Every
// variant checks the table against the reference.
func ScaleoutRestore(ctx context.Context, o ScaleoutOptions, variant string) (Result, error) {
	res := Result{Scenario: "scaleout-restore", Variant: variant, Codec: string(o.Codec),
		Extra: map[string]float64{"keys": float64(o.Keys), "history": float64(o.History)}}
	snapEvery := 0
	switch variant {
	case RestoreNaive, RestoreChangelog:
	case RestoreSnapshot:
		snapEvery = o.SnapshotEvery
	default:
		return res, fmt.Errorf("scaleout: restore: unknown variant %q", variant)
	}
	log, err := historyLog(o.Keys, o.History, o.Codec)
	if err != nil {
		return res, err
	}
	res.Events = log.Len()
	dir, err := os.MkdirTemp(o.Dir, "scaleout-restore-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	b, err := startScaleoutBroker(ctx, 1)
	if err != nil {
		return res, err
	}
	defer b.close()
	t := time.Now()
	if err := b.publishAll(ctx, log); err != nil {
		return res, err
	}
	res.Extra["publish_s"] = time.Since(t).Seconds()
	end := uint64(log.Len())
	codec := bank.Codec(o.Codec)
	clog := changelogTopic(o.Codec)

	if variant == RestoreNaive {
		m, err := startMeasure("")
		if err != nil {
			return res, err
		}
		bcpu := b.cpu()
		app, bal, err := openRestoreApp(ctx, b.cl, filepath.Join(dir, "naive"), codec)
		if err != nil {
			return res, err
		}
		defer app.Close()
		run := runApp(ctx, app)
		err = waitCheckpoint(ctx, app, end, run, 30*time.Minute)
		m.stop(&res)
		res.Extra["broker_cpu_s"] = (b.cpu() - bcpu).Seconds()
		if err := errors.Join(err, run.stop()); err != nil {
			return res, err
		}
		if err := verifyTable(ctx, bal, log); err != nil {
			return res, err
		}
		res.Verified = true
		res.Note = "topology.Open (fresh store, no group) to the last event committed; the broker in a process of its own"
		return res, nil
	}

	res.Extra["snapshot_every"] = float64(snapEvery)
	group := b.cl.Group(groupStream, iggy.WithSessionTimeout(max(o.Session, 10*time.Second)))
	// The first owner processes the log and settles its changelog.
	t = time.Now()
	first, _, err := openRestoreApp(ctx, b.cl, filepath.Join(dir, "first"), codec,
		topology.WithGroup(group), topology.WithSnapshotEvery(snapEvery))
	if err != nil {
		return res, err
	}
	run := runApp(ctx, first)
	err = waitCheckpoint(ctx, first, end, run, 30*time.Minute)
	if err == nil {
		err = waitChangelogSettled(ctx, b.cl, clog)
	}
	res.Extra["build_s"] = time.Since(t).Seconds()
	err = errors.Join(err, run.stop(), first.Close())
	if err != nil {
		return res, fmt.Errorf("first owner: %w", err)
	}
	clogStream, clogTopic, _ := strings.Cut(clog, "/")
	clogEnds, err := b.cl.EndOffsets(ctx, clogStream, clogTopic)
	if err != nil {
		return res, err
	}
	res.Extra["changelog_records"] = float64(clogEnds[0])
	if mark, ok, err := b.cl.Bookmark(ctx, clog, 0, changelog.SnapshotBookmark); err == nil && ok {
		res.Extra["snapshot_offset"] = float64(mark)
	}

	// The new owner.
	m, err := startMeasure("")
	if err != nil {
		return res, err
	}
	bcpu := b.cpu()
	start := time.Now()
	app, bal, err := openRestoreApp(ctx, b.cl, filepath.Join(dir, "new"), codec,
		topology.WithGroup(group), topology.WithSnapshotEvery(snapEvery))
	if err != nil {
		return res, err
	}
	defer app.Close()
	run = runApp(ctx, app)
	var restore topology.RestoreProgress
	for err == nil {
		if app.Phase(0) == topology.Serving {
			break
		}
		select {
		case <-run.done:
			err = fmt.Errorf("new owner: Run returned %v", run.err)
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(time.Millisecond):
			if time.Since(start) > 30*time.Minute {
				err = errors.New("new owner: not serving after 30 minutes")
			}
		}
	}
	m.stop(&res)
	res.Extra["broker_cpu_s"] = (b.cpu() - bcpu).Seconds()
	for _, ps := range app.Ownership() {
		if ps.Partition == 0 {
			restore = ps.Restore
		}
	}
	if err := errors.Join(err, run.stop()); err != nil {
		return res, err
	}
	res.Rate = 0
	res.Extra["restore_s"] = restore.Took.Seconds()
	res.Extra["applied"] = float64(restore.Applied)
	res.Extra["read_records"] = float64(restore.Offset - restore.From)
	res.Extra["from"] = float64(restore.From)
	if restore.Snapshot {
		res.Extra["from_snapshot"] = 1
	}
	if err := verifyTable(ctx, bal, log); err != nil {
		return res, err
	}
	res.Verified = true
	res.Note = "topology.Open of a new owner (fresh store) to the partition Serving: join, fence, restore; the broker in a process of its own"
	return res, nil
}

// openRestoreApp opens the accounts topology on a fresh store in dir.
func openRestoreApp(ctx context.Context, cl *iggy.Client, dir string, codec bank.Codec, opts ...topology.OpenOption) (*topology.App, *topology.Table[workload.AccountID, workload.Account], error) {
	topo, bal := bank.NewTopology(bank.Declarations(codec), workload.Source)
	app, err := topology.Open(ctx, topo, cl, dir, append([]topology.OpenOption{topology.WithLogger(quietLogger())}, opts...)...)
	return app, bal, err
}

// running is an App's Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // what it returned, once done is closed
}

// runApp runs app until stop.
func runApp(ctx context.Context, app *topology.App) *running {
	rctx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = app.Run(rctx)
		close(r.done)
	}()
	return r
}

// stop cancels Run and returns its error (nil for the stop it caused).
func (r *running) stop() error {
	r.cancel()
	<-r.done
	return stoppedErr(r.err)
}

// stoppedErr is the error of a Run that was stopped: nil when it only
// says that the stop cancelled a call in flight. (A stop that lands while
// a processor asks the source for its partition count, as a generation of
// a group starts, makes Run return that call's context error instead of
// nil.)
func stoppedErr(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// waitCheckpoint waits until app committed partition 0 of the accounts
// source up to end.
func waitCheckpoint(ctx context.Context, app *topology.App, end uint64, run *running, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		next, _, err := app.Checkpoint(workload.Source, 0)
		if err != nil {
			return err
		}
		if next >= end {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("checkpoint %d of %d after %v", next, end, timeout)
		}
		select {
		case <-run.done:
			return fmt.Errorf("Run returned %v at checkpoint %d of %d", run.err, next, end)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitChangelogSettled waits until partition 0 of the changelog topic has
// not grown for a second: every commit is sent and no snapshot is being
// written (its chunks go out one after the other, then its end, and the
// bookmark follows as soon as the owner reads them back, which the second
// leaves time for).
func waitChangelogSettled(ctx context.Context, cl *iggy.Client, topic string) error {
	st, tp, _ := strings.Cut(topic, "/")
	var last uint64
	since := time.Now()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		ends, err := cl.EndOffsets(ctx, st, tp)
		if err != nil {
			return err
		}
		if ends[0] != last {
			last, since = ends[0], time.Now()
		}
		if time.Since(since) >= time.Second {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("changelog %s still growing after 10 minutes", topic)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// verifyTable scans the balances table and compares it with log's
// reference.
func verifyTable(ctx context.Context, bal *topology.Table[workload.AccountID, workload.Account], log *workload.Log) error {
	got := map[workload.AccountID]workload.Account{}
	if err := bal.Scan(ctx, func(k workload.AccountID, v workload.Account) bool {
		got[k] = v
		return true
	}); err != nil {
		return err
	}
	return log.Verify(got)
}
