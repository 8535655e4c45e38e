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

	"github.com/strand-io/strand/benchmarks/internal/naive"
	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// The Iggy names of the accounts log: workload.Source is "bank/accounts".
const (
	iggyStream = "bank"
	iggyTopic  = "accounts"
)

// E2EOptions configure the scenarios through the embedded broker.
type E2EOptions struct {
	Workload workload.Config
	Codec    workload.Codec
	// Batch is the most records one poll returns (the processor's poll
	// size, the naive consumer's poll).
	Batch int
	// Dir is where stores and the broker's data directory go.
	Dir string
	// Broker is "memory" (default), "disk" (iggytest.WithDataDir) or
	// "process" (in memory, in a process of its own: see ServeBrokerFlag).
	Broker string
	// CPUProfile, when set, receives a CPU profile of the timed section.
	CPUProfile string
	// PublisherConnections is the producer's connection count
	// (iggy.WithConnections; 0 means 1).
	PublisherConnections int
	// IdleMax is the longest the processor's readers wait before polling
	// an empty partition again (iggy.WithIdleBackoff from 1 ms; 0: the
	// connector's default, 50 ms).
	IdleMax time.Duration
	// Log is the pre-encoded log; nil makes one.
	Log *workload.Log
}

func (o *E2EOptions) prepareLog() (*workload.Log, error) {
	return encodeLog(&o.Log, o.Workload, o.Codec)
}

// e2eEnv is what a scenario through the embedded broker starts from: the
// log, a fresh temporary directory, the broker with the accounts topic and
// a publisher.
type e2eEnv struct {
	log *workload.Log
	dir string
	b   *broker
	pub *iggy.Publisher
}

// newEnv prepares the log, makes the Result of scenario/variant, a
// temporary directory under o.Dir named after pattern, the broker and the
// publisher. The Result is returned even on error (the zero Result if the
// log could not be prepared); on error nothing is left to close.
func (o *E2EOptions) newEnv(ctx context.Context, scenario, variant, pattern string) (*e2eEnv, Result, error) {
	log, err := o.prepareLog()
	if err != nil {
		return nil, Result{}, err
	}
	res, dir, err := newRun(scenario, variant, o.Codec, log, o.Dir, pattern)
	if err != nil {
		return nil, res, err
	}
	b, pub, err := startBrokerPublisher(ctx, dir, o.Broker, log.Partitions(), iggy.WithConnections(max(1, o.PublisherConnections)))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, res, err
	}
	return &e2eEnv{log: log, dir: dir, b: b, pub: pub}, res, nil
}

// close closes the publisher and the broker and removes the directory.
func (e *e2eEnv) close() {
	_ = e.pub.Close(context.Background())
	e.b.close()
	_ = os.RemoveAll(e.dir)
}

// drainVariant is base, with "-drain" appended when drain is set.
func drainVariant(base string, drain bool) string {
	if drain {
		return base + "-drain"
	}
	return base
}

// broker is an embedded Iggy broker with the accounts topic, and a client.
// With -broker process it runs in a process of its own (proc), else in
// this one (srv).
type broker struct {
	srv  *iggytest.Server
	proc *brokerProcess
	cl   *iggy.Client
}

func startBroker(ctx context.Context, dir, kind string, partitions uint32) (*broker, error) {
	if kind == "process" {
		proc, addr, err := startBrokerProcess(ctx)
		if err != nil {
			return nil, err
		}
		cl, err := iggy.Connect(ctx, addr, iggy.WithCredentials("iggy", "iggy"), iggy.WithLogger(quietLogger()), iggy.WithProtocol(benchProtocol()))
		if err != nil {
			proc.close()
			return nil, err
		}
		if err := cl.EnsureTopic(ctx, iggyStream, iggyTopic, partitions); err != nil {
			_ = cl.Close()
			proc.close()
			return nil, err
		}
		return &broker{proc: proc, cl: cl}, nil
	}
	opts := []iggytest.Option{iggytest.WithLogger(quietLogger())}
	if kind == "disk" {
		d := filepath.Join(dir, "broker")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		opts = append(opts, iggytest.WithDataDir(d))
	}
	srv, err := iggytest.NewServer(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded broker: %w", err)
	}
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"), iggy.WithLogger(quietLogger()), iggy.WithProtocol(benchProtocol()))
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	if err := cl.EnsureTopic(ctx, iggyStream, iggyTopic, partitions); err != nil {
		_ = cl.Close()
		_ = srv.Close()
		return nil, err
	}
	return &broker{srv: srv, cl: cl}, nil
}

// startBrokerPublisher is startBroker with a publisher on the accounts
// topic (opts are its options). On error nothing is left to close.
func startBrokerPublisher(ctx context.Context, dir, kind string, partitions uint32, opts ...iggy.PublisherOption) (*broker, *iggy.Publisher, error) {
	b, err := startBroker(ctx, dir, kind, partitions)
	if err != nil {
		return nil, nil, err
	}
	pub, err := iggy.NewPublisher(ctx, b.cl, iggyStream, iggyTopic, opts...)
	if err != nil {
		b.close()
		return nil, nil, err
	}
	return b, pub, nil
}

func (b *broker) close() {
	_ = b.cl.Close()
	if b.proc != nil {
		b.proc.close()
		return
	}
	_ = b.srv.Close()
}

// publishChunk is how many envelopes one Send carries: about a thousand
// per partition, the publisher's request size.
const publishChunk = 8192

// publish publishes events [from, to) of the log in order, in chunks,
// waiting for each chunk to be accepted (so per-partition order is the log
// order).
func publish(ctx context.Context, pub *iggy.Publisher, log *workload.Log, from, to int) error {
	envs := make([]stream.Envelope, 0, publishChunk)
	for i := from; i < to; {
		envs = envs[:0]
		for ; i < to && len(envs) < publishChunk; i++ {
			envs = append(envs, log.Envelope(i))
		}
		if err := pub.Send(ctx, envs...); err != nil {
			return fmt.Errorf("publish events up to %d: %w", i, err)
		}
	}
	return nil
}

// progress tracks the committed checkpoint of every partition and signals
// when all reached the end of the log.
type progress struct {
	log     *workload.Log
	next    []atomic.Uint64
	left    atomic.Int64
	done    chan struct{}
	commits atomic.Int64
}

func newProgress(log *workload.Log) *progress {
	pr := &progress{log: log, next: make([]atomic.Uint64, log.Partitions()), done: make(chan struct{})}
	left := int64(0)
	for p := range log.Partitions() {
		if log.PartitionLen(p) > 0 {
			left++
		}
	}
	pr.left.Store(left)
	if left == 0 {
		close(pr.done)
	}
	return pr
}

// committed records that partition p committed up to next; it returns the
// previous checkpoint.
func (pr *progress) committed(p uint32, next uint64) uint64 {
	pr.commits.Add(1)
	prev := pr.next[p].Swap(next)
	end := uint64(pr.log.PartitionLen(p))
	if prev < end && next >= end && pr.left.Add(-1) == 0 {
		close(pr.done)
	}
	return prev
}

// processor is a pipeline.Processor of the accounts topology on a fresh
// store, reading the broker.
type processor struct {
	db   *state.DB
	topo *workload.Topo
	proc *pipeline.Processor
}

func newProcessor(ctx context.Context, dir string, b *broker, log *workload.Log, batch int, idleMax time.Duration, hooks pipeline.Hooks) (*processor, error) {
	topo, err := workload.NewTopology(log.Decls, 0)
	if err != nil {
		return nil, err
	}
	prog := topo.Program
	topo.SetPartitions(log.Partitions())
	db, err := state.Open(dir, state.WithDurability(state.Sync), state.WithLogger(quietLogger()))
	if err != nil {
		return nil, err
	}
	srcOpts := []iggy.SourceOption{iggy.WithPollBatch(batch)}
	if idleMax > 0 {
		srcOpts = append(srcOpts, iggy.WithIdleBackoff(min(time.Millisecond, idleMax), idleMax))
	}
	src, err := iggy.NewSource(b.cl, iggyStream, iggyTopic, srcOpts...)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	proc, err := pipeline.NewProcessor(prog, db, src,
		pipeline.WithPollSize(batch),
		pipeline.WithProcessorLogger(quietLogger()),
		pipeline.WithTaskOptions(executor.WithLogger(quietLogger())),
		pipeline.WithHooks(hooks))
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &processor{db: db, topo: topo, proc: proc}, nil
}

// run runs the processor until done is closed, then stops it and returns
// Run's error.
func (p *processor) run(ctx context.Context, done <-chan struct{}) (stop func() error) {
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- p.proc.Run(runCtx) }()
	return func() error {
		select {
		case <-done:
		case <-ctx.Done():
		case err := <-errc:
			cancel()
			if err == nil {
				err = errors.New("processor stopped before the end of the log")
			}
			return err
		}
		cancel()
		return <-errc
	}
}

func checkCommit(res executor.Result) error {
	if err := checkResult(res); err != nil {
		return err
	}
	if res.Stale > 0 {
		return fmt.Errorf("%d stale records redelivered", res.Stale)
	}
	return nil
}

// E2EStrand runs the workload through the embedded broker into a
// pipeline.Processor: with drain false the producer publishes while the
// processor runs and the clock covers both (from the first publish to the
// last commit); with drain true the log is published first and the clock
// covers the processor alone. Tables are checked against the reference.
func E2EStrand(ctx context.Context, o E2EOptions, drain bool) (Result, error) {
	env, res, err := o.newEnv(ctx, "e2e", drainVariant("strand", drain), "e2e-strand-")
	if err != nil {
		return res, err
	}
	defer env.close()
	log, dir, b, pub := env.log, env.dir, env.b, env.pub

	pr := newProgress(log)
	var hookErr atomic.Pointer[error]
	hooks := pipeline.Hooks{AfterCommit: func(p uint32, r executor.Result) error {
		if err := checkCommit(r); err != nil {
			err = fmt.Errorf("partition %d: %w", p, err)
			hookErr.CompareAndSwap(nil, &err)
			return err
		}
		pr.committed(p, r.Next)
		return nil
	}}
	proc, err := newProcessor(ctx, filepath.Join(dir, "store"), b, log, o.Batch, o.IdleMax, hooks)
	if err != nil {
		return res, err
	}
	defer proc.db.Close()

	if drain {
		if err := publish(ctx, pub, log, 0, log.Len()); err != nil {
			return res, err
		}
	}
	m, err := startMeasure(o.CPUProfile)
	if err != nil {
		return res, err
	}
	var prodErr error
	var prodDone time.Duration
	var wg sync.WaitGroup
	if !drain {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			prodErr = publish(ctx, pub, log, 0, log.Len())
			prodDone = time.Since(t)
		}()
	}
	stop := proc.run(ctx, pr.done)
	runErr := stop()
	m.stop(&res)
	wg.Wait()
	if e := hookErr.Load(); e != nil {
		return res, *e
	}
	if err := errors.Join(prodErr, runErr, ctx.Err()); err != nil {
		return res, err
	}
	res.Commits = int(pr.commits.Load())
	if !drain && prodDone > 0 {
		res.Extra = map[string]float64{"producer_rate": float64(log.Len()) / prodDone.Seconds()}
	}
	got, err := workload.ReadBalances(ctx, proc.topo.Balances)
	if err != nil {
		return res, err
	}
	if err := log.Verify(got); err != nil {
		return res, err
	}
	res.Verified = true
	return res, nil
}

func brokerKind(k string) string {
	switch k {
	case "disk":
		return "with a data directory"
	case "process":
		return "in memory, in a process of its own"
	}
	return "in memory"
}

// E2ENaive runs the workload through the embedded broker into the naive
// consumer: one goroutine per partition polling through connectors/iggy,
// per-event Pebble Get+Set, one sync commit per poll. With drain false the
// producer publishes concurrently and the clock covers both; with drain
// true the log is published first and the clock covers the consumer alone.
func E2ENaive(ctx context.Context, o E2EOptions, drain bool) (Result, error) {
	env, res, err := o.newEnv(ctx, "e2e", drainVariant("naive", drain), "e2e-naive-")
	if err != nil {
		return res, err
	}
	defer env.close()
	log, dir, b, pub := env.log, env.dir, env.b, env.pub
	st, err := naive.Open(filepath.Join(dir, "store"), log.Decls, true)
	if err != nil {
		return res, err
	}
	defer st.Close()
	src, err := iggy.NewSource(b.cl, iggyStream, iggyTopic, iggy.WithPollBatch(o.Batch))
	if err != nil {
		return res, err
	}
	readers := make([]connector.PartitionReader, log.Partitions())
	for p := range log.Partitions() {
		if readers[p], err = src.Open(ctx, p, 0); err != nil {
			return res, err
		}
		defer readers[p].Close()
	}

	if drain {
		if err := publish(ctx, pub, log, 0, log.Len()); err != nil {
			return res, err
		}
	}
	m, err := startMeasure(o.CPUProfile)
	if err != nil {
		return res, err
	}
	var wg sync.WaitGroup
	errs := make([]error, log.Partitions()+1)
	var commits atomic.Int64
	var prodDone time.Duration
	if !drain {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			errs[len(errs)-1] = publish(ctx, pub, log, 0, log.Len())
			prodDone = time.Since(t)
		}()
	}
	for p := range log.Partitions() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := uint64(log.PartitionLen(p))
			for next := uint64(0); next < end; {
				recs, err := readers[p].Poll(ctx, o.Batch)
				if err == nil {
					err = st.ApplyBatch(p, recs)
				}
				if err != nil {
					errs[p] = fmt.Errorf("naive consumer partition %d offset %d: %w", p, next, err)
					return
				}
				commits.Add(1)
				next = recs[len(recs)-1].Offset + 1
			}
		}()
	}
	wg.Wait()
	m.stop(&res)
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.Commits = int(commits.Load())
	if prodDone > 0 {
		res.Extra = map[string]float64{"producer_rate": float64(log.Len()) / prodDone.Seconds()}
	}
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

// benchProtocol is the Iggy protocol the e2e and latency clients speak:
// STRAND_IGGY_PROTOCOL ("0.10", "0.8"; default auto, which is 0.10 on the
// embedded broker). An unknown value falls back to auto.
func benchProtocol() iggy.Protocol {
	p, err := iggy.ParseProtocol(os.Getenv("STRAND_IGGY_PROTOCOL"))
	if err != nil {
		return iggy.ProtocolAuto
	}
	return p
}
