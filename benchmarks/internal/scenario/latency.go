package scenario

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/stream/connector"

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
	// Tick is the producer's batching interval: it sends what has come
	// due at most once per Tick (0: as soon as the previous send returned),
	// like a publisher's linger time.
	Tick time.Duration
	// Trace, when set, names a CSV file that receives one line per
	// commit: milliseconds since the start, partition, events committed,
	// their largest latency from the schedule, how long the batch waited
	// between its poll and the start of its processing, and how long
	// processing and commit took (all in milliseconds).
	Trace string
}

// Latency runs a paced producer and a stream.Processor through the
// embedded broker and measures, for every event, the time from the moment
// it was due to be published (its slot in the producer's schedule, so a
// producer that falls behind counts against the latency rather than
// hiding it) to the end of the commit that made it queryable (the
// processor's AfterCommit hook: the table and checkpoint are committed and
// Table.Get returns the new state). It reports percentiles over all events
// (P50, P99, ...), and in Extra the same from the moment the event was
// handed to Publisher.Send (sent_p50, sent_p99, sent_max), which leaves out
// how far the producer fell behind its schedule.
func Latency(ctx context.Context, o LatencyOptions) (Result, error) {
	if o.Rate <= 0 || o.Duration <= 0 {
		return Result{}, fmt.Errorf("latency: rate %v and duration %v must be positive", o.Rate, o.Duration)
	}
	o.Workload.Events = max(1, int(o.Rate*o.Duration.Seconds()))
	o.Log = nil
	env, res, err := o.newEnv(ctx, "latency", "strand", "latency-")
	if err != nil {
		return res, err
	}
	defer env.close()
	log, dir, b, pub := env.log, env.dir, env.b, env.pub

	// due(i) is start + i/rate; start is set just before the producer
	// begins, after the processor is running.
	var startNanos atomic.Int64
	interval := float64(time.Second) / o.Rate
	due := func(i int) time.Time {
		return time.Unix(0, startNanos.Load()+int64(float64(i)*interval))
	}
	pr := newProgress(log)
	sent := &sendLog{}
	// The hooks only note each commit (on the partition's pipeline
	// goroutine, so they cost the pipeline next to nothing); latencies are
	// worked out from the notes after the run.
	marks := make([][]commitMark, log.Partitions())
	var hookErr atomic.Pointer[error]
	// Per partition, when the batch being processed was polled and when
	// its processing began (for the trace).
	pollQueue := make([]chan int64, log.Partitions())
	for p := range pollQueue {
		pollQueue[p] = make(chan int64, 64)
	}
	polledAt := make([]int64, log.Partitions())
	beganAt := make([]int64, log.Partitions())
	hooks := pipeline.Hooks{}
	if o.Trace != "" {
		hooks.AfterPoll = func(p uint32, _ []connector.Record) error {
			select {
			case pollQueue[p] <- time.Now().UnixNano():
			default:
			}
			return nil
		}
		hooks.BeforeProcess = func(p uint32, recs []connector.Record) error {
			if recs != nil {
				select {
				case t := <-pollQueue[p]:
					polledAt[p] = t
				default:
				}
			}
			beganAt[p] = time.Now().UnixNano()
			return nil
		}
	}
	hooks.AfterCommit = func(p uint32, r executor.Result) error {
		now := time.Now().UnixNano()
		if err := checkCommit(r); err != nil {
			err = fmt.Errorf("partition %d: %w", p, err)
			hookErr.CompareAndSwap(nil, &err)
			return err
		}
		prev := pr.committed(p, r.Next)
		marks[p] = append(marks[p], commitMark{from: prev, to: r.Next, at: now, polled: polledAt[p], began: beganAt[p]})
		return nil
	}
	proc, err := newProcessor(ctx, filepath.Join(dir, "store"), b, log, o.Batch, o.IdleMax, hooks)
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
	prodErr := pace(ctx, pub, log, due, sent, o.Tick)
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
	var all, allSent []float64
	for p, ms := range marks {
		for _, m := range ms {
			for off := m.from; off < m.to; off++ {
				i := log.Index(uint32(p), int(off))
				all = append(all, float64(m.at-due(i).UnixNano())/1e6)
				allSent = append(allSent, float64(m.at-sent.at(i).UnixNano())/1e6)
			}
		}
	}
	slices.Sort(all)
	slices.Sort(allSent)
	if o.Trace != "" {
		if err := writeTrace(o.Trace, marks, startNanos.Load(), func(p uint32, off uint64) time.Time { return due(log.Index(p, int(off))) }); err != nil {
			return res, err
		}
	}
	res.P50, res.P99, res.P999 = percentile(all, 0.50), percentile(all, 0.99), percentile(all, 0.999)
	if len(all) > 0 {
		res.Max = all[len(all)-1]
	}
	res.Rate = 0 // not a throughput figure
	res.Extra = map[string]float64{
		"target_rate":   o.Rate,
		"achieved_rate": float64(log.Len()) / published.Seconds(),
		"duration_s":    published.Seconds(),
		"sent_p50":      percentile(allSent, 0.50),
		"sent_p99":      percentile(allSent, 0.99),
		"sent_max":      percentile(allSent, 1),
	}
	got, err := workload.ReadBalances(ctx, proc.topo.Balances)
	if err != nil {
		return res, err
	}
	if err := log.Verify(got); err != nil {
		return res, err
	}
	res.Verified = true
	idle := "50ms (default)"
	if o.IdleMax > 0 {
		idle = o.IdleMax.String()
	}
	res.Note = fmt.Sprintf("broker %s; %.0f events per commit on average; readers' idle backoff up to %s", brokerKind(o.Broker), float64(log.Len())/math.Max(1, float64(res.Commits)), idle)
	return res, nil
}

// sendLog records when each chunk of events was handed to Send.
type sendLog struct {
	mu     sync.Mutex
	starts []int   // first event index of each chunk, ascending
	times  []int64 // when its Send began, Unix nanoseconds
}

func (s *sendLog) add(first int, t time.Time) {
	s.mu.Lock()
	s.starts = append(s.starts, first)
	s.times = append(s.times, t.UnixNano())
	s.mu.Unlock()
}

// at returns when event i was handed to Send.
func (s *sendLog) at(i int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, found := slices.BinarySearch(s.starts, i)
	if !found {
		k--
	}
	if k < 0 {
		return time.Time{}
	}
	return time.Unix(0, s.times[k])
}

// commitMark is one commit of one partition: records [from, to) became
// queryable at at; polled and began say when the batch was polled and
// when its processing started (trace only), all in Unix nanoseconds.
type commitMark struct {
	from, to          uint64
	at, polled, began int64
}

// writeTrace writes one CSV line per commit, in time order.
func writeTrace(path string, marks [][]commitMark, start int64, due func(p uint32, off uint64) time.Time) error {
	type line struct {
		p uint32
		m commitMark
	}
	var lines []line
	for p, ms := range marks {
		for _, m := range ms {
			lines = append(lines, line{uint32(p), m})
		}
	}
	slices.SortFunc(lines, func(a, b line) int { return cmp.Compare(a.m.at, b.m.at) })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "ms,partition,events,max_latency_ms,queued_ms,process_commit_ms")
	for _, l := range lines {
		m := l.m
		worst := 0.0
		if m.to > m.from {
			worst = float64(m.at-due(l.p, m.from).UnixNano()) / 1e6 // the oldest record waited longest
		}
		fmt.Fprintf(w, "%.1f,%d,%d,%.1f,%.2f,%.2f\n", float64(m.at-start)/1e6, l.p, m.to-m.from, worst,
			float64(m.began-m.polled)/1e6, float64(m.at-m.began)/1e6)
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// pace publishes the log in order, each event not before due(i): at most
// once per tick it sends, in one call, every event that has come due.
func pace(ctx context.Context, pub *iggy.Publisher, log *workload.Log, due func(int) time.Time, sent *sendLog, tick time.Duration) error {
	envs := make([]stream.Envelope, 0, publishChunk)
	var last time.Time
	for i := 0; i < log.Len(); {
		if wait := tick - time.Since(last); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		now := time.Now()
		if due(i).After(now) {
			select {
			case <-time.After(due(i).Sub(now)):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		last = now
		// Everything due now, in chunks of at most publishChunk.
		for i < log.Len() && !due(i).After(now) {
			envs = envs[:0]
			for i < log.Len() && len(envs) < publishChunk && !due(i).After(now) {
				envs = append(envs, log.Envelope(i))
				i++
			}
			sent.add(i-len(envs), time.Now())
			if err := pub.Send(ctx, envs...); err != nil {
				return fmt.Errorf("publish events up to %d: %w", i, err)
			}
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
