package topology_test

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/memconn"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// taskDriver runs a topology without a broker and without an App, at the
// level of the engine, for tests of the executor (exec_test.go: Results,
// Task, DB) and the benchmarks. Events piped in are kept in the one
// in-memory connector (memconn, one topic per source, as topologytest's
// Driver keeps them); Step processes them through the very executor.Task a
// processor runtime uses, on a real Pebble store in a temporary directory,
// so tables, checkpoints, parked events and dead letters behave exactly as
// in production. The topology-level driver is topologytest.Driver.
//
//	d := newTaskDriver(t, topo)
//	tdPipe(d, Deposits, Deposited{Account: 42, Amount: 100})
//	d.Advance()
//	acct, ok, err := balances.Get(ctx, 42)
//
// Restart closes the store and reopens it from its directory, resuming from
// the committed checkpoints. The driver's clock starts at a fixed time and
// moves only with AdvanceClock, so retries are deterministic.
//
// A taskDriver is not safe for concurrent use. Keys still run concurrently
// inside each Step, as in production.
type taskDriver struct {
	tb         topologytest.TB
	built      *topology.Program
	prog       *executor.Program
	dir        string
	partitions uint32
	batchSize  func() int
	stateOpts  []state.Option
	taskOpts   []executor.TaskOption
	now        time.Time

	logs    *memconn.Broker // a topic per source, stamped by the driver's clock
	db      *state.DB
	tasks   map[string][]*executor.Task // source → partition → task
	results []executor.Result
}

// tdOption configures NewDriver.
type tdOption func(*taskDriver)

// Dir sets the store's directory (default: tb.TempDir()). Reusing a
// directory across drivers continues from its checkpoints.
func tdDir(dir string) tdOption { return func(d *taskDriver) { d.dir = dir } }

// Partitions sets how many partitions every source has (default 1). Piped
// events go to partition xxh32(key) % n, as Iggy's key partitioning does.
func tdPartitions(n uint32) tdOption { return func(d *taskDriver) { d.partitions = max(n, 1) } }

// BatchSize sets the most records one Step hands to a partition's task
// (default 100).
func tdBatchSize(n int) tdOption {
	return func(d *taskDriver) { d.batchSize = func() int { return n } }
}

// BatchSizes sets a function asked for the size of every batch, for tests
// that vary batch boundaries. Sizes below 1 count as 1.
func tdBatchSizes(fn func() int) tdOption { return func(d *taskDriver) { d.batchSize = fn } }

// StateOptions adds options for state.Open. The driver defaults to
// state.NoSync durability (a test process does not lose power); pass
// state.WithDurability(state.Sync) to measure or test sync commits.
func tdStateOptions(opts ...state.Option) tdOption {
	return func(d *taskDriver) { d.stateOpts = append(d.stateOpts, opts...) }
}

// TaskOptions adds options for every task (OnDeadLetter, WithLogger).
func tdTaskOptions(opts ...executor.TaskOption) tdOption {
	return func(d *taskDriver) { d.taskOpts = append(d.taskOpts, opts...) }
}

// NewDriver builds topo (failing tb if Build refuses it), opens its store
// and makes one task per source partition. The driver closes itself when
// the test ends.
func newTaskDriver(tb topologytest.TB, topo *topology.Topology, opts ...tdOption) *taskDriver {
	tb.Helper()
	built, err := topo.Build()
	if err != nil {
		tb.Fatalf("topology.NewDriver: %v", err)
	}
	d := &taskDriver{
		tb: tb, prog: topology.EngineProgram(built), built: built, partitions: 1,
		batchSize: func() int { return 100 },
		now:       time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, o := range opts {
		if o != nil {
			o(d)
		}
	}
	if d.dir == "" {
		d.dir = tb.TempDir()
	}
	topology.SetTablePartitions(built, d.partitions)
	logs, err := memconn.New(memconn.WithClock(func() time.Time { return d.now }))
	if err != nil {
		tb.Fatalf("topology.taskDriver: %v", err)
	}
	d.logs = logs
	for _, s := range d.prog.Sources() {
		if _, err := logs.CreateTopic(s, d.partitions); err != nil {
			tb.Fatalf("topology.taskDriver: %v", err)
		}
	}
	d.open()
	tb.Cleanup(d.Close)
	return d
}

func (d *taskDriver) open() {
	d.tb.Helper()
	n := d.partitions
	opts := append([]state.Option{state.WithDurability(state.NoSync)}, d.stateOpts...)
	db, err := state.Open(d.dir, opts...)
	if err != nil {
		d.tb.Fatalf("topology.taskDriver: open store: %v", err)
	}
	if err := d.prog.Attach(db); err != nil {
		_ = db.Close()
		d.tb.Fatalf("topology.taskDriver: %v", err)
	}
	d.db = db
	d.tasks = map[string][]*executor.Task{}
	topts := append([]executor.TaskOption{executor.WithClock(func() time.Time { return d.now })}, d.taskOpts...)
	for _, s := range d.prog.Sources() {
		for p := range n {
			task, err := d.prog.NewTask(context.Background(), db, s, p, topts...)
			if err != nil {
				d.tb.Fatalf("topology.taskDriver: %v", err)
			}
			d.tasks[s] = append(d.tasks[s], task)
		}
	}
}

// Program returns the compiled topology.
func (d *taskDriver) Program() *executor.Program { return d.prog }

// DB returns the open store.
func (d *taskDriver) DB() *state.DB { return d.db }

// Dir returns the store's directory.
func (d *taskDriver) Dir() string { return d.dir }

// Close closes the store. It is called when the test ends; calling it
// earlier (to reopen the directory elsewhere) is fine.
func (d *taskDriver) Close() {
	if d.db == nil {
		return
	}
	if err := d.db.Close(); err != nil {
		d.tb.Errorf("topology.taskDriver: close store: %v", err)
	}
	d.db = nil
}

// Restart closes the store and reopens it from its directory, with new
// tasks that resume from the committed checkpoints and parked events, as a
// processor does after a restart. Piped records stay in the in-memory log.
func (d *taskDriver) Restart() {
	d.tb.Helper()
	d.Close()
	d.open()
}

// Pipe appends events to the driver's only source, each in the partition
// of its key. It fails the test if the topology has several sources (use
// PipeTo) or an event does not encode.
func tdPipe[K, E any](d *taskDriver, decl *stream.Event[K, E], events ...E) {
	d.tb.Helper()
	srcs := d.prog.Sources()
	if len(srcs) != 1 {
		d.tb.Fatalf("topology.Pipe: topology has %d sources; use PipeTo", len(srcs))
	}
	tdPipeTo(d, srcs[0], decl, events...)
}

// PipeTo appends events to the named source, each in the partition of its
// key, encoded by decl exactly as a publisher would encode them.
func tdPipeTo[K, E any](d *taskDriver, source string, decl *stream.Event[K, E], events ...E) {
	d.tb.Helper()
	for _, e := range events {
		env, err := decl.Envelope(e)
		if err != nil {
			d.tb.Fatalf("topology.Pipe: %v", err)
		}
		p := xxh32.Partition(env.Headers.Key, d.partitions)
		d.PipeRecord(source, connector.Record{Partition: p, Headers: env.Headers, Payload: env.Payload})
	}
}

// PipeRecord appends a raw record to partition r.Partition of source, for
// tests of bad input (set HeaderErr, an unknown tag, a broken payload). The
// driver assigns the offset, which it returns, and a timestamp.
func (d *taskDriver) PipeRecord(source string, r connector.Record) uint64 {
	d.tb.Helper()
	l := d.logs.Topic(source)
	if l == nil {
		d.tb.Fatalf("topology.taskDriver: no source %q", source)
	}
	if r.Partition >= d.partitions {
		d.tb.Fatalf("topology.taskDriver: source %q has no partition %d", source, r.Partition)
	}
	r.Timestamp = uint64(d.now.UnixMicro())
	off, err := l.Append(r.Partition, r)
	if err != nil {
		d.tb.Fatalf("topology.taskDriver: %v", err)
	}
	return off
}

// bounds returns the offsets of the first record of a source partition
// that DropCommitted kept and of the record after its last.
func (d *taskDriver) bounds(source string, p uint32) (start, end uint64) {
	l := d.logs.Topic(source)
	starts, err := l.StartOffsets(context.Background())
	if err != nil {
		d.tb.Fatalf("topology.taskDriver: %v", err)
	}
	n, _ := l.Len(p)
	return starts[p], uint64(n)
}

// read returns up to n records of a source partition from offset from on.
func (d *taskDriver) read(source string, p uint32, from uint64, n int) []connector.Record {
	d.tb.Helper()
	ctx := context.Background()
	rd, err := d.logs.Topic(source).Open(ctx, p, from)
	if err != nil {
		d.tb.Fatalf("topology.taskDriver: %v", err)
	}
	defer rd.Close()
	recs, err := rd.Poll(ctx, n) // records are there: the poll does not wait
	if err != nil {
		d.tb.Fatalf("topology.taskDriver: %v", err)
	}
	return recs
}

// Step gives every partition of every source with unprocessed records, or
// with parked keys due for a retry, one batch, and commits it. Partitions
// run concurrently, each on its own goroutine, as a processor runs its
// partition pipelines; so with several partitions, sinks and OnDeadLetter
// callbacks of different partitions run at the same time. Step returns
// whether anything was processed. A store failure fails the test.
func (d *taskDriver) Step() bool {
	d.tb.Helper()
	if d.db == nil {
		d.tb.Fatalf("topology.taskDriver: Step after Close")
	}
	type job struct {
		source    string
		partition int
		task      *executor.Task
		records   []connector.Record // nil: retry parked keys
		res       executor.Result
		err       error
	}
	var jobs []*job
	for _, s := range d.prog.Sources() {
		for p, task := range d.tasks[s] {
			start, end := d.bounds(s, uint32(p))
			next := max(task.Next(), start)
			j := &job{source: s, partition: p, task: task}
			if next < end {
				j.records = d.read(s, uint32(p), next, max(d.batchSize(), 1))
			} else if at, ok := task.NextRetry(); !ok || at.After(d.now) {
				continue
			}
			jobs = append(jobs, j)
		}
	}
	run := func(j *job) {
		if j.records != nil {
			j.res, j.err = j.task.Process(context.Background(), j.records)
		} else {
			j.res, j.err = j.task.Retry(context.Background())
		}
	}
	if len(jobs) == 1 {
		run(jobs[0])
	} else {
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() { run(j) })
		}
		wg.Wait()
	}
	progress := false
	for _, j := range jobs {
		if j.err != nil {
			d.tb.Fatalf("topology.taskDriver: source %q partition %d: %v", j.source, j.partition, j.err)
		}
		if j.res.Records > 0 {
			progress = true
		}
		d.results = append(d.results, j.res)
	}
	return progress
}

// DropCommitted forgets the piped records that every partition's task has
// committed, like a broker's retention (memconn's Trim), so that long runs
// (benchmarks, soaks) keep bounded memory. Offsets are unchanged.
func (d *taskDriver) DropCommitted() {
	for _, s := range d.prog.Sources() {
		for p, task := range d.tasks[s] {
			d.logs.Topic(s).Trim(uint32(p), task.Next())
		}
	}
}

// Advance steps until every piped record is processed and no parked key is
// due at the driver's current time. It does not move the clock: keys parked
// with a backoff stay parked until AdvanceClock.
func (d *taskDriver) Advance() {
	d.tb.Helper()
	for d.Step() {
	}
}

// AdvanceClock moves the driver's clock forward by dt (retry backoffs are
// measured on it).
func (d *taskDriver) AdvanceClock(dt time.Duration) { d.now = d.now.Add(dt) }

// Now returns the driver's clock.
func (d *taskDriver) Now() time.Time { return d.now }

// Lag returns how many piped records are not yet committed, over all
// sources and partitions.
func (d *taskDriver) Lag() int {
	lag := 0
	for _, s := range d.prog.Sources() {
		for p, task := range d.tasks[s] {
			if start, end := d.bounds(s, uint32(p)); end > task.Next() {
				lag += int(end - max(task.Next(), start))
			}
		}
	}
	return lag
}

// Results returns the result of every batch processed so far (since the
// driver was made; restarts keep them).
func (d *taskDriver) Results() []executor.Result { return slices.Clone(d.results) }

// Task returns the task of one source partition, to inspect parked keys
// or Release one.
func (d *taskDriver) Task(source string, partition uint32) *executor.Task {
	ts := d.tasks[source]
	if int(partition) >= len(ts) {
		return nil
	}
	return ts[partition]
}

// DeadLetters returns the dead letters committed to the store and not yet
// removed, read back from their rows: what a runtime would publish. They
// are ordered by source, partition and offset.
func (d *taskDriver) DeadLetters() []deadletter.Letter {
	d.tb.Helper()
	var out []deadletter.Letter
	for p := range d.partitions {
		err := d.db.Rows(context.Background(), state.FamilyDeadLetters, p, func(_, value []byte) error {
			var dl deadletter.Letter
			if err := rows.DecodeLetter(value, &dl); err != nil {
				return err
			}
			out = append(out, dl)
			return nil
		})
		if err != nil {
			d.tb.Fatalf("topology.taskDriver: read dead letters of partition %d: %v", p, err)
		}
	}
	slices.SortFunc(out, func(a, b deadletter.Letter) int {
		switch {
		case a.Source != b.Source:
			if a.Source < b.Source {
				return -1
			}
			return 1
		case a.Partition != b.Partition:
			return int(a.Partition) - int(b.Partition)
		case a.Offset < b.Offset:
			return -1
		case a.Offset > b.Offset:
			return 1
		}
		return 0
	})
	return out
}
