package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/stream/connector"

	"github.com/strand-io/strand/benchmarks/internal/sysstat"
	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// RestartOptions configure the restart scenario.
type RestartOptions struct {
	// Keys is how many accounts the store holds (one Opened event each).
	Keys int
	// Partitions of the log.
	Partitions uint32
	Codec      workload.Codec
	// Batch is the size of the new batch per partition processed after the
	// restart.
	Batch int
	// Dir is where the store goes.
	Dir string
}

// RestartStore is a store holding Keys accounts of committed state, built
// once, that Resume reopens again and again, each time processing one new
// batch per partition (deposits to existing accounts) from the
// checkpoints: the restart of a processor without replay.
type RestartStore struct {
	o       RestartOptions
	dir     string
	log     *workload.Log // the Opened events that built the state
	next    []uint64      // per partition: the next offset of the log
	round   int
	byPart  [][]workload.AccountID
	expects map[workload.AccountID]int64 // deposits made by Resume
	Build   time.Duration                // how long building the state took
}

// NewRestartStore builds the store: Keys Opened events, processed with one
// Task per partition in batches of 50,000 records, then closed.
func NewRestartStore(ctx context.Context, o RestartOptions) (*RestartStore, error) {
	if o.Keys < 1 || o.Partitions < 1 || o.Batch < 1 {
		return nil, fmt.Errorf("restart: bad options %+v", o)
	}
	dir, err := os.MkdirTemp(o.Dir, "restart-")
	if err != nil {
		return nil, err
	}
	cfg := workload.Config{Events: o.Keys, Accounts: o.Keys, Partitions: o.Partitions}
	log, err := workload.EncodeEvents(cfg, workload.NewDecls(o.Codec), func(i int) workload.Event {
		return workload.Event{Kind: workload.KindOpened, Account: workload.AccountID(i + 1)}
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &RestartStore{o: o, dir: dir, log: log, next: make([]uint64, o.Partitions), expects: map[workload.AccountID]int64{}}
	s.byPart = make([][]workload.AccountID, o.Partitions)
	for p := range o.Partitions {
		for off := range log.PartitionLen(p) {
			s.byPart[p] = append(s.byPart[p], workload.AccountID(log.Index(p, off)+1))
		}
	}
	start := time.Now()
	sess, err := s.open(ctx)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	_, err = runTasks(ctx, log, sess.tasks, 50_000, true)
	err = errors.Join(err, sess.db.Close())
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	for p := range o.Partitions {
		s.next[p] = uint64(log.PartitionLen(p))
	}
	s.Build = time.Since(start)
	return s, nil
}

// Remove deletes the store.
func (s *RestartStore) Remove() error { return os.RemoveAll(s.dir) }

// Dir returns the store's directory.
func (s *RestartStore) Dir() string { return s.dir }

// walBytes returns the size of the store's write-ahead logs: what Pebble
// replays when it opens (Close does not flush the memtable).
func walBytes(dir string) int64 {
	var n int64
	matches, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil {
			n += fi.Size()
		}
	}
	return n
}

type session struct {
	db    *state.DB
	topo  *workload.Topo
	tasks []*executor.Task
	open  time.Duration // state.Open
	ocpu  time.Duration // CPU time the process spent during state.Open
	setup time.Duration // Build + Attach + NewTask ×n
}

func (s *RestartStore) open(ctx context.Context) (*session, error) {
	t0, c0 := time.Now(), sysstat.CPUTime()
	db, err := state.Open(filepath.Join(s.dir, "store"), state.WithDurability(state.Sync), state.WithLogger(quietLogger()))
	if err != nil {
		return nil, err
	}
	t1, c1 := time.Now(), sysstat.CPUTime()
	topo, err := workload.NewTopology(s.log.Decls, 0)
	var prog *executor.Program
	if err == nil {
		prog = topo.Program
		topo.SetPartitions(s.o.Partitions)
		err = prog.Attach(db)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	tasks := make([]*executor.Task, s.o.Partitions)
	for p := range s.o.Partitions {
		if tasks[p], err = prog.NewTask(ctx, db, workload.Source, p, executor.WithLogger(quietLogger())); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	return &session{db: db, topo: topo, tasks: tasks, open: t1.Sub(t0), ocpu: c1 - c0, setup: time.Since(t1)}, nil
}

// Timing is what one Resume measured.
type Timing struct {
	// Total is from the start of state.Open to the end of the first
	// commit of every partition.
	Total time.Duration
	// Open is state.Open (Pebble opening its files and replaying its WAL).
	Open time.Duration
	// OpenCPU is the CPU time the process used meanwhile.
	OpenCPU time.Duration
	// Setup is building the program, attaching it and making the tasks
	// (each reads its checkpoint and parked events).
	Setup time.Duration
	// FirstBatch is processing and committing one new batch per partition.
	FirstBatch time.Duration
	// Close is closing the store afterwards (not part of Total).
	Close time.Duration
	// WAL is the size of the write-ahead logs Open found.
	WAL int64
}

// pick returns the account of the i-th deposit of this round in
// partition p: spread over the partition's accounts, so the first batch
// after a restart reads cold rows from all over the store.
func (s *RestartStore) pick(p uint32, i int) workload.AccountID {
	accts := s.byPart[p]
	return accts[(s.round*7919+i*104729)%len(accts)]
}

// Resume reopens the store, processes one new batch of Batch deposits per
// partition from the checkpoints (checking that nothing before them is
// replayed and that the deposits landed), and closes it.
func (s *RestartStore) Resume(ctx context.Context) (Timing, error) {
	s.round++
	batches := make([][]connector.Record, s.o.Partitions)
	d := s.log.Decls
	for p := range s.o.Partitions {
		accts := s.byPart[p]
		for i := range s.o.Batch {
			if len(accts) == 0 {
				break
			}
			a := s.pick(p, i)
			r, err := d.Events.Deposits.Record(p, s.next[p]+uint64(len(batches[p])), bank.Deposited{Account: a, Amount: 1})
			if err != nil {
				return Timing{}, err
			}
			batches[p] = append(batches[p], r)
		}
	}

	var tm Timing
	tm.WAL = walBytes(filepath.Join(s.dir, "store"))
	start := time.Now()
	sess, err := s.open(ctx)
	if err != nil {
		return tm, err
	}
	tm.Open, tm.OpenCPU, tm.Setup = sess.open, sess.ocpu, sess.setup
	t1 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, s.o.Partitions)
	for p, task := range sess.tasks {
		if task.Next() != s.next[p] {
			errs[p] = fmt.Errorf("partition %d resumes at %d, want the checkpoint %d", p, task.Next(), s.next[p])
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := task.Process(ctx, batches[p])
			if err == nil {
				err = checkCommit(r)
			}
			if err == nil && r.Records != len(batches[p]) {
				err = fmt.Errorf("processed %d records, want %d (replay?)", r.Records, len(batches[p]))
			}
			if err != nil {
				errs[p] = fmt.Errorf("partition %d: %w", p, err)
			}
		}()
	}
	wg.Wait()
	tm.FirstBatch = time.Since(t1)
	tm.Total = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		_ = sess.db.Close()
		return tm, err
	}
	for p := range s.o.Partitions {
		s.next[p] += uint64(len(batches[p]))
		for _, r := range batches[p] {
			e, _ := d.Events.Deposits.Decode(r.Payload)
			s.expects[e.Account] += e.Amount
		}
	}
	// Check the deposits of this round (and all earlier ones to those
	// accounts) through the committed state.
	for p := range s.o.Partitions {
		for _, r := range batches[p] {
			e, _ := d.Events.Deposits.Decode(r.Payload)
			a, ok, err := sess.topo.Balances.Get(ctx, e.Account)
			if err != nil || !ok || a.Status != bank.StatusOpen || a.Balance != s.expects[e.Account] {
				_ = sess.db.Close()
				return tm, fmt.Errorf("account %d after restart %d: got %+v (found %v, err %v), want open with balance %d",
					e.Account, s.round, a, ok, err, s.expects[e.Account])
			}
		}
	}
	t2 := time.Now()
	err = sess.db.Close()
	tm.Close = time.Since(t2)
	return tm, err
}

// Restart builds a store of o.Keys accounts, then measures one Resume.
func Restart(ctx context.Context, o RestartOptions) (Result, error) {
	res := Result{Scenario: "restart", Variant: "task", Codec: string(o.Codec)}
	s, err := NewRestartStore(ctx, o)
	if err != nil {
		return res, err
	}
	defer s.Remove()
	m, err := startMeasure("")
	if err != nil {
		return res, err
	}
	tm, err := s.Resume(ctx)
	if err != nil {
		return res, err
	}
	m.stop(&res)
	res.Rate = 0
	res.Seconds = tm.Total.Seconds()
	res.Events = o.Batch * int(o.Partitions)
	res.Verified = true
	res.Extra = map[string]float64{
		"keys": float64(o.Keys), "1_open_s": tm.Open.Seconds(), "2_attach_s": tm.Setup.Seconds(),
		"3_first_batch_s": tm.FirstBatch.Seconds(), "build_s": s.Build.Seconds(), "wal_mib": float64(tm.WAL) / (1 << 20),
		"open_cpu_ms": float64(tm.OpenCPU) / 1e6,
	}
	res.Note = fmt.Sprintf("state.Open + Attach + NewTask per partition + one batch of %d new records per partition from the checkpoints (none replayed)", o.Batch)
	return res, nil
}

// RestartProcessor is the restart through the embedded broker: the broker
// holds the log that built the state plus a new batch per partition; a
// pipeline.Processor is started on the reopened store and the clock stops at
// its first commit in every partition. It includes connecting to the
// broker and opening one reader per partition.
func RestartProcessor(ctx context.Context, o RestartOptions) (Result, error) {
	res := Result{Scenario: "restart", Variant: "processor", Codec: string(o.Codec)}
	s, err := NewRestartStore(ctx, o)
	if err != nil {
		return res, err
	}
	defer s.Remove()
	b, pub, err := startBrokerPublisher(ctx, s.dir, "memory", o.Partitions)
	if err != nil {
		return res, err
	}
	defer b.close()
	defer pub.Close(context.Background()) // on the errors before the Close below
	// The log that built the state, then Batch deposits per partition.
	if err := publish(ctx, pub, s.log, 0, s.log.Len()); err != nil {
		return res, err
	}
	var envs []stream.Envelope
	d := s.log.Decls
	s.round++
	deposits := map[workload.AccountID]int64{}
	for p := range o.Partitions {
		if len(s.byPart[p]) == 0 {
			continue
		}
		for i := range o.Batch {
			a := s.pick(p, i)
			env, err := d.Events.Deposits.Envelope(bank.Deposited{Account: a, Amount: 1})
			if err != nil {
				return res, err
			}
			envs = append(envs, env)
			deposits[a]++
		}
	}
	if err := pub.Send(ctx, envs...); err != nil {
		return res, err
	}
	if err := pub.Close(ctx); err != nil {
		return res, err
	}

	wal := walBytes(filepath.Join(s.dir, "store"))
	m, err := startMeasure("")
	if err != nil {
		return res, err
	}
	start := time.Now()
	var left atomic.Int64
	for p := range o.Partitions {
		if len(s.byPart[p]) > 0 {
			left.Add(1)
		}
	}
	done := make(chan struct{})
	var firstErr atomic.Pointer[error]
	seen := make([]atomic.Bool, o.Partitions)
	hooks := pipeline.Hooks{AfterCommit: func(p uint32, r executor.Result) error {
		err := checkCommit(r)
		first := r.Records > 0 && !seen[p].Swap(true)
		if err == nil && first && r.Next-uint64(r.Records) != s.next[p] {
			err = fmt.Errorf("partition %d: first batch after the restart starts at %d, want the checkpoint %d", p, r.Next-uint64(r.Records), s.next[p])
		}
		if err != nil {
			firstErr.CompareAndSwap(nil, &err)
			return err
		}
		if first && left.Add(-1) == 0 {
			close(done)
		}
		return nil
	}}
	db, err := state.Open(filepath.Join(s.dir, "store"), state.WithDurability(state.Sync), state.WithLogger(quietLogger()))
	if err != nil {
		return res, err
	}
	defer db.Close()
	tOpen := time.Since(start)
	topo, err := workload.NewTopology(d, 0)
	if err != nil {
		return res, err
	}
	prog := topo.Program
	topo.SetPartitions(o.Partitions)
	src, err := iggy.NewSource(b.cl, iggyStream, iggyTopic, iggy.WithPollBatch(o.Batch))
	if err != nil {
		return res, err
	}
	proc, err := pipeline.NewProcessor(prog, db, src, pipeline.WithPollSize(o.Batch), pipeline.WithProcessorLogger(quietLogger()),
		pipeline.WithTaskOptions(executor.WithLogger(quietLogger())), pipeline.WithHooks(hooks))
	if err != nil {
		return res, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- proc.Run(runCtx) }()
	var runErr error
	select {
	case <-done:
	case runErr = <-errc:
		if runErr == nil {
			runErr = errors.New("processor stopped before its first commits")
		}
	case <-time.After(60 * time.Second):
		runErr = errors.New("no commit within 60 s of the restart")
	}
	total := time.Since(start)
	m.stop(&res)
	cancel()
	if runErr == nil {
		runErr = <-errc
	}
	if e := firstErr.Load(); e != nil {
		return res, *e
	}
	if runErr != nil {
		return res, runErr
	}
	// The first batches may not have held every new deposit: check the
	// ones that are committed, by checkpoint, against what was sent.
	for a, n := range deposits {
		got, ok, err := topo.Balances.Get(ctx, a)
		if err != nil || !ok || got.Status != bank.StatusOpen || got.Balance > n || got.Balance < 0 {
			return res, fmt.Errorf("account %d after the restart: got %+v (found %v, err %v), want open with a balance of at most %d", a, got, ok, err, n)
		}
	}
	res.Rate = 0
	res.Seconds = total.Seconds()
	res.Events = len(envs)
	res.Verified = true
	res.Extra = map[string]float64{"keys": float64(o.Keys), "1_open_s": tOpen.Seconds(), "build_s": s.Build.Seconds(), "wal_mib": float64(wal) / (1 << 20)}
	res.Note = fmt.Sprintf("state.Open + NewProcessor + Run (connect, one reader per partition) until the first commit of all %d partitions, each starting at its checkpoint; broker in memory", o.Partitions)
	return res, nil
}
