package scenario

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream"
)

// LatencyOptions configure the publish-to-queryable scenario.
type LatencyOptions struct {
	E2EOptions
	// Rate is the producer's pace in events per second.
	Rate float64
	// Duration is how long the producer publishes; the workload has
	// Rate × Duration events.
	Duration time.Duration
}

// Latency runs a paced producer and a stream.Processor through the
// embedded broker and measures, for every event, the time from the moment
// it was due to be published (its slot in the producer's schedule, so a
// producer that falls behind counts against the latency rather than
// hiding it) to the end of the commit that made it queryable (the
// processor's AfterCommit hook: the table and checkpoint are committed and
// Table.Get returns the new state). It reports percentiles over all events.
func Latency(ctx context.Context, o LatencyOptions) (Result, error) {
	if o.Rate <= 0 || o.Duration <= 0 {
		return Result{}, fmt.Errorf("latency: rate %v and duration %v must be positive", o.Rate, o.Duration)
	}
	o.Workload.Events = max(1, int(o.Rate*o.Duration.Seconds()))
	o.Log = nil
	log, err := o.prepareLog()
	if err != nil {
		return Result{}, err
	}
	res := Result{Scenario: "latency", Variant: "strand", Codec: string(o.Codec), Events: log.Len(), InputBytes: int64(log.Bytes())}
	dir, err := os.MkdirTemp(o.Dir, "latency-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	b, err := startBroker(ctx, dir, o.Broker, log.Partitions())
	if err != nil {
		return res, err
	}
	defer b.close()
	pub, err := o.publisher(ctx, b)
	if err != nil {
		return res, err
	}
	defer pub.Close(context.Background())

	// due(i) is start + i/rate; start is set just before the producer
	// begins, after the processor is running.
	var startNanos atomic.Int64
	interval := float64(time.Second) / o.Rate
	due := func(i int) time.Time {
		return time.Unix(0, startNanos.Load()+int64(float64(i)*interval))
	}
	pr := newProgress(log)
	lat := make([][]float64, log.Partitions()) // per partition, milliseconds
	var hookErr atomic.Pointer[error]
	hooks := stream.Hooks{AfterCommit: func(p uint32, r stream.Result) error {
		now := time.Now()
		if err := checkCommit(r); err != nil {
			err = fmt.Errorf("partition %d: %w", p, err)
			hookErr.CompareAndSwap(nil, &err)
			return err
		}
		prev := pr.committed(p, r.Next)
		for off := prev; off < r.Next; off++ {
			lat[p] = append(lat[p], float64(now.Sub(due(log.Index(p, int(off)))))/float64(time.Millisecond))
		}
		return nil
	}}
	proc, err := newProcessor(ctx, filepath.Join(dir, "store"), b, log, o.Batch, hooks)
	if err != nil {
		return res, err
	}
	defer proc.db.Close()

	stop := proc.run(ctx, pr.done)
	time.Sleep(200 * time.Millisecond) // let the pipelines connect and poll
	m, err := startMeasure(o.CPUProfile)
	if err != nil {
		_ = stop()
		return res, err
	}
	start := time.Now()
	startNanos.Store(start.UnixNano())
	prodErr := pace(ctx, pub, log, due)
	published := time.Since(start)
	var runErr error
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second+o.Duration)
	select {
	case <-pr.done:
	case <-waitCtx.Done():
		runErr = errors.New("latency: the processor did not commit every event in time")
	}
	cancel()
	m.stop(&res)
	runErr = errors.Join(runErr, stop())
	if e := hookErr.Load(); e != nil {
		return res, *e
	}
	if err := errors.Join(prodErr, runErr, ctx.Err()); err != nil {
		return res, err
	}
	res.Commits = int(pr.commits.Load())
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	res.P50, res.P99, res.P999 = percentile(all, 0.50), percentile(all, 0.99), percentile(all, 0.999)
	if len(all) > 0 {
		res.Max = all[len(all)-1]
	}
	res.Rate = 0 // not a throughput figure
	res.Extra = map[string]float64{
		"target_rate":   o.Rate,
		"achieved_rate": float64(log.Len()) / published.Seconds(),
		"duration_s":    published.Seconds(),
	}
	got, err := workload.ReadBalances(ctx, proc.topo.Balances)
	if err != nil {
		return res, err
	}
	if err := log.Verify(got); err != nil {
		return res, err
	}
	res.Verified = true
	res.Note = fmt.Sprintf("broker %s; %.0f events per commit on average", brokerKind(o.Broker), float64(log.Len())/math.Max(1, float64(res.Commits)))
	return res, nil
}

// pace publishes the log in order, each event not before due(i): every
// millisecond or so it sends, in one call, every event that has come due.
func pace(ctx context.Context, pub *iggy.Publisher, log *workload.Log, due func(int) time.Time) error {
	envs := make([]stream.Envelope, 0, publishChunk)
	for i := 0; i < log.Len(); {
		now := time.Now()
		envs = envs[:0]
		for i < log.Len() && len(envs) < publishChunk && !due(i).After(now) {
			envs = append(envs, log.Envelope(i))
			i++
		}
		if len(envs) == 0 {
			wait := time.Until(due(i))
			if wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			continue
		}
		if err := pub.Send(ctx, envs...); err != nil {
			return fmt.Errorf("publish events up to %d: %w", i, err)
		}
	}
	return nil
}

// percentile returns the q-quantile of sorted xs (nearest rank).
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
