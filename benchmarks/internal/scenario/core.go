// Package scenario runs the measurements of strand's benchmarks: the
// broker-free core (issue 5), the end-to-end run through the embedded broker,
// publish-to-queryable latency and restart time (issue 6), and the scaling
// of keys touched (issue 17, scale.go), each next to the naive baseline it
// is compared with. Every function measures one thing in
// the calling process and returns a Result; the runner (package main of
// benchmarks/) runs each in its own process to read its peak memory.
package scenario

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream/connector"

	"github.com/strand-io/strand/benchmarks/internal/naive"
	"github.com/strand-io/strand/benchmarks/internal/sysstat"
	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/internal/state"
)

// Result is one measurement.
type Result struct {
	Scenario string  `json:"scenario"` // core, e2e, latency, restart
	Variant  string  `json:"variant"`  // strand, naive, naive-8, ...
	Codec    string  `json:"codec"`
	Events   int     `json:"events"`
	Seconds  float64 `json:"seconds"`
	// Rate is events per second (0 where it does not apply).
	Rate float64 `json:"rate"`
	// PeakRSS is the process's peak resident set in bytes (VmHWM), read by
	// the process itself at the end; the runner replaces it with the
	// child's rusage maxrss when it ran the scenario in a subprocess.
	PeakRSS int64 `json:"peak_rss"`
	// ProcessPeakRSS is the peak resident set of the whole process, setup
	// (encoding the input) included: the child's rusage maxrss.
	ProcessPeakRSS int64 `json:"process_peak_rss"`
	// CPUSeconds is the CPU time (user + system, all threads) the process
	// used in the measured section; Rate × Seconds / CPUSeconds is the
	// rate per fully used core, less sensitive to other load.
	CPUSeconds float64 `json:"cpu_seconds"`
	// InputBytes is the memory the pre-encoded input takes (part of PeakRSS).
	InputBytes int64 `json:"input_bytes"`
	// Commits counts store commits.
	Commits int `json:"commits"`
	// Verified is true when the store was read back and equals the
	// sequential reference.
	Verified bool `json:"verified"`
	// Latency percentiles in milliseconds (latency scenario).
	P50, P99, P999, Max float64 `json:",omitempty"`
	// Extra figures, by name.
	Extra map[string]float64 `json:"extra,omitempty"`
	Note  string             `json:"note,omitempty"`
	// Load is the machine's load average (1, 5, 15 minutes) when the
	// measurement started, filled in by the runner.
	Load string `json:"load,omitempty"`
}

// CoreOptions configure the broker-free scenario.
type CoreOptions struct {
	Workload workload.Config
	Codec    workload.Codec
	// Batch is the records per partition per Task.Process call.
	Batch int
	// Dir is where the store goes (a fresh subdirectory is made).
	Dir string
	// CPUProfile, when set, receives a CPU profile of the timed section.
	CPUProfile string
	// Workers bounds keys run at once per partition (0: GOMAXPROCS).
	Workers int
	// Log is the pre-encoded log; nil makes one.
	Log *workload.Log
	// Serial makes each partition call Task.Process, batch after batch,
	// instead of Task.Submit, which lets a batch's commit overlap the
	// execution of the next one.
	Serial bool
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// PrepareLog encodes o's workload unless o.Log is set.
func (o *CoreOptions) PrepareLog() (*workload.Log, error) {
	return encodeLog(&o.Log, o.Workload, o.Codec)
}

// encodeLog returns *cached, first encoding cfg with codec into it if it
// is nil.
func encodeLog(cached **workload.Log, cfg workload.Config, codec workload.Codec) (*workload.Log, error) {
	if *cached != nil {
		return *cached, nil
	}
	l, err := workload.Encode(cfg, workload.NewDecls(codec))
	if err != nil {
		return nil, err
	}
	*cached = l
	return l, nil
}

// newRun makes the Result of scenario/variant over log and a fresh
// temporary directory under parent named after pattern; the caller removes
// the directory. The Result is returned even if the directory could not be
// made.
func newRun(scenario, variant string, codec workload.Codec, log *workload.Log, parent, pattern string) (Result, string, error) {
	res := Result{Scenario: scenario, Variant: variant, Codec: string(codec), Events: log.Len(), InputBytes: int64(log.Bytes())}
	dir, err := os.MkdirTemp(parent, pattern)
	return res, dir, err
}

func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// measure times a section: wall clock, CPU time, peak RSS (reset at the
// start after a GC, so setup garbage does not count) and an optional CPU
// profile.
type measure struct {
	start   time.Time
	cpu     time.Duration
	profile func()
}

func startMeasure(profile string) (*measure, error) {
	runtime.GC()
	debug.FreeOSMemory()
	sysstat.ResetPeakRSS()
	stop, err := startProfile(profile)
	if err != nil {
		return nil, err
	}
	return &measure{start: time.Now(), cpu: sysstat.CPUTime(), profile: stop}, nil
}

// stop fills res's Seconds, CPUSeconds, PeakRSS and Rate (from Events).
func (m *measure) stop(res *Result) {
	res.Seconds = time.Since(m.start).Seconds()
	res.CPUSeconds = (sysstat.CPUTime() - m.cpu).Seconds()
	m.profile()
	res.PeakRSS = sysstat.PeakRSS()
	if res.Seconds > 0 {
		res.Rate = float64(res.Events) / res.Seconds
	}
}

// CoreStrand runs the pre-encoded log through one executor.Task per partition,
// all partitions concurrently, batches of o.Batch records, sync commits, on
// a fresh store; then reads the table back and checks it against the
// sequential reference.
func CoreStrand(ctx context.Context, o CoreOptions) (Result, error) {
	log, err := o.PrepareLog()
	if err != nil {
		return Result{}, err
	}
	res, dir, err := newRun("core", "strand", o.Codec, log, o.Dir, "core-strand-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	topo, err := workload.NewTopology(log.Decls, o.Workers)
	if err != nil {
		return res, err
	}
	prog := topo.Program
	n := log.Partitions()
	topo.SetPartitions(n)
	db, err := state.Open(dir, state.WithDurability(state.Sync), state.WithLogger(quietLogger()))
	if err != nil {
		return res, err
	}
	defer db.Close()
	if err := prog.Attach(db); err != nil {
		return res, err
	}
	tasks := make([]*executor.Task, n)
	for p := range n {
		if tasks[p], err = prog.NewTask(ctx, db, workload.Source, p, executor.WithLogger(quietLogger())); err != nil {
			return res, err
		}
	}

	m, err := startMeasure(o.CPUProfile)
	if err != nil {
		return res, err
	}
	commits, err := runTasks(ctx, log, tasks, o.Batch, !o.Serial)
	m.stop(&res)
	if err != nil {
		return res, err
	}
	res.Commits = commits

	got, err := workload.ReadBalances(ctx, topo.Balances)
	if err != nil {
		return res, err
	}
	if err := log.Verify(got); err != nil {
		return res, err
	}
	res.Verified = true
	if o.Serial {
		res.Variant = "strand-serial"
	}
	return res, nil
}

// runTasks feeds every partition's records to its task, batch by batch,
// partitions concurrently, and returns the number of commits. With
// pipelined, batches go through Task.Submit, so that a batch's commit
// overlaps the execution of the next; else through Task.Process.
func runTasks(ctx context.Context, log *workload.Log, tasks []*executor.Task, batch int, pipelined bool) (int, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(tasks))
	commits := make([]int, len(tasks))
	for p, task := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if pipelined {
				commits[p], errs[p] = submitAll(ctx, log, task, uint32(p), batch)
			} else {
				commits[p], errs[p] = processAll(ctx, log, task, uint32(p), batch)
			}
		}()
	}
	wg.Wait()
	total := 0
	for p := range tasks {
		if errs[p] != nil {
			return 0, errs[p]
		}
		total += commits[p]
	}
	return total, nil
}

func processAll(ctx context.Context, log *workload.Log, task *executor.Task, p uint32, batch int) (int, error) {
	commits := 0
	recs := make([]connector.Record, 0, batch)
	for off := int(task.Next()); off < log.PartitionLen(p); {
		recs = log.Records(recs[:0], p, off, batch)
		r, err := task.Process(ctx, recs)
		if err == nil {
			err = checkResult(r)
		}
		if err != nil {
			return commits, fmt.Errorf("partition %d offset %d: %w", p, off, err)
		}
		commits++
		off = int(r.Next)
	}
	return commits, nil
}

func submitAll(ctx context.Context, log *workload.Log, task *executor.Task, p uint32, batch int) (int, error) {
	commits := 0
	// Two record buffers: a batch's records stay untouched while its
	// commit may be in flight.
	bufs := [2][]connector.Record{make([]connector.Record, 0, batch), make([]connector.Record, 0, batch)}
	var pending *executor.Pending
	wait := func(off int) error {
		if pending == nil {
			return nil
		}
		r, err := pending.Wait()
		pending = nil
		if err == nil {
			err = checkResult(r)
		}
		if err != nil {
			return fmt.Errorf("partition %d batch before offset %d: %w", p, off, err)
		}
		commits++
		return nil
	}
	for k, off := 0, int(task.Next()); off < log.PartitionLen(p); k ^= 1 {
		bufs[k] = log.Records(bufs[k][:0], p, off, batch)
		next, err := task.Submit(ctx, bufs[k])
		if err != nil {
			_ = wait(off)
			return commits, fmt.Errorf("partition %d offset %d: %w", p, off, err)
		}
		if err := wait(off); err != nil {
			return commits, err
		}
		pending = next
		off += len(bufs[k])
	}
	return commits, wait(log.PartitionLen(p))
}

func checkResult(r executor.Result) error {
	if err := r.Err(); err != nil {
		return err
	}
	if len(r.DeadLetters) > 0 {
		d := r.DeadLetters[0]
		return fmt.Errorf("%d dead letters, the first at offset %d: %s: %v", len(r.DeadLetters), d.Offset, d.Reason, d.Err)
	}
	if len(r.Held) > 0 {
		return fmt.Errorf("%d records held", len(r.Held))
	}
	return nil
}

// CoreNaive runs the same log through the naive consumer: with workers ==
// 1 sequentially (partition after partition, batch after batch), else one
// goroutine per partition, at most workers at once.
func CoreNaive(ctx context.Context, o CoreOptions, workers int) (Result, error) {
	log, err := o.PrepareLog()
	if err != nil {
		return Result{}, err
	}
	variant := "naive"
	if workers > 1 {
		variant = fmt.Sprintf("naive-%d", workers)
	}
	res, dir, err := newRun("core", variant, o.Codec, log, o.Dir, "core-naive-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	st, err := naive.Open(dir, log.Decls, true)
	if err != nil {
		return res, err
	}
	defer st.Close()

	m, err := startMeasure(o.CPUProfile)
	if err != nil {
		return res, err
	}
	n := log.Partitions()
	var commits int
	if workers <= 1 {
		recs := make([]connector.Record, 0, o.Batch)
		for p := range n {
			for off := 0; off < log.PartitionLen(p); off += o.Batch {
				if err := ctx.Err(); err != nil {
					return res, err
				}
				recs = log.Records(recs[:0], p, off, o.Batch)
				if err := st.ApplyBatch(p, recs); err != nil {
					return res, err
				}
				commits++
			}
		}
	} else {
		var mu sync.Mutex
		var firstErr error
		sem := make(chan struct{}, workers)
		var wg sync.WaitGroup
		for p := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				recs := make([]connector.Record, 0, o.Batch)
				c := 0
				var err error
				for off := 0; off < log.PartitionLen(p) && err == nil; off += o.Batch {
					recs = log.Records(recs[:0], p, off, o.Batch)
					err = st.ApplyBatch(p, recs)
					c++
				}
				mu.Lock()
				commits += c
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return res, firstErr
		}
	}
	m.stop(&res)
	res.Commits = commits

	got, err := st.Balances()
	if err != nil {
		return res, err
	}
	if err := log.Verify(got); err != nil {
		return res, err
	}
	res.Verified = true
	return res, nil
}
