package pipeline

import (
	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/memconn"
	"github.com/strand-io/strand/stream/deadletter"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/planner"
)

// ---- the topology under test ----

// procDeposit adds Amount to its account's balance (Relaxed, folded by sum).
type procDeposit struct {
	Acct   string `json:"a"`
	Amount int64  `json:"n"`
}

func (e procDeposit) Key() string { return e.Acct }

// procReset sets its account's balance to zero (Acquire: deposits before it
// and after it never mix).
type procReset struct {
	Acct string `json:"a"`
}

func (e procReset) Key() string { return e.Acct }

const (
	procSource     = "mem/accounts"
	procTagDeposit = planner.Tag(1)
	procTagReset   = planner.Tag(2)
	procTagPoison  = planner.Tag(99) // no handler: dead-lettered
)

// procFixture is a program over one in-memory source with a balance table,
// plus the knobs tests turn: a handler that can fail or be slow.
type procFixture struct {
	deposit *stream.Event[string, procDeposit]
	reset   *stream.Event[string, procReset]
	bal     *state.Table[string, int64]
	prog    *executor.Program
	src     *memSource
	dir     string

	fail func(key string) error // called per deposit run by a Handle handler
	slow atomic.Int64           // nanoseconds each deposit run sleeps
}

func newProcFixture(t testing.TB, partitions uint32, mod func(*executor.Spec)) *procFixture {
	t.Helper()
	fx := &procFixture{
		deposit: stream.Declare[string, procDeposit](procTagDeposit,
			stream.WithReduce(algebra.Sum(func(e procDeposit) int64 { return e.Amount }, func(e procDeposit, n int64) procDeposit { e.Amount = n; return e }))),
		reset: stream.Declare[string, procReset](procTagReset, stream.WithFence(planner.Acquire)),
		bal:   state.NewTable[string, int64]("balances", stream.StringKey[string](), state.JSON[int64]()),
		src:   newMemSource(procSource, partitions),
		dir:   t.TempDir(),
	}
	spec := executor.Spec{
		Name: "proc-test",
		Sources: []executor.SourceSpec{{Name: procSource, Handlers: []executor.Handler{
			executor.Project(fx.deposit, fx.bal, func(v *int64, e procDeposit) error { *v += e.Amount; return nil }),
			executor.Project(fx.reset, fx.bal, func(v *int64, e procReset) error { *v = 0; return nil }),
			executor.Handle(fx.deposit, "gate", 0, func(ctx context.Context, key string, es []procDeposit) error {
				if d := fx.slow.Load(); d > 0 {
					time.Sleep(time.Duration(d)) // paces: a slow handler
				}
				if fx.fail != nil {
					return fx.fail(key)
				}
				return nil
			}),
		}}},
		Workers:     4,
		MaxAttempts: 4,
		Backoff:     5 * time.Millisecond,
		MaxBackoff:  20 * time.Millisecond,
	}
	if mod != nil {
		mod(&spec)
	}
	prog, err := executor.NewProgram(spec)
	if err != nil {
		t.Fatal(err)
	}
	fx.prog = prog
	return fx
}

func (fx *procFixture) openDB(t testing.TB) *state.DB {
	t.Helper()
	db, err := state.Open(fx.dir, state.WithDurability(state.NoSync))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// pipeDeposit appends a deposit to its key's partition.
func (fx *procFixture) pipeDeposit(t testing.TB, acct string, amount int64) {
	t.Helper()
	env, err := fx.deposit.Envelope(procDeposit{Acct: acct, Amount: amount})
	if err != nil {
		t.Fatal(err)
	}
	fx.src.appendEnv(env)
}

func (fx *procFixture) pipeReset(t testing.TB, acct string) {
	t.Helper()
	env, err := fx.reset.Envelope(procReset{Acct: acct})
	if err != nil {
		t.Fatal(err)
	}
	fx.src.appendEnv(env)
}

// pipePoison appends a record with a type tag no handler takes; it returns
// its partition and offset.
func (fx *procFixture) pipePoison(acct string) (uint32, uint64) {
	env := stream.Envelope{
		Headers: connector.Headers{Key: []byte(acct), Tag: procTagPoison, Ordering: planner.Relaxed, Algebra: algebra.NonAssociative},
		Payload: []byte(`{"poison":true}`),
	}
	return fx.src.appendEnv(env)
}

// reference folds every partition's log up to its committed checkpoint,
// sequentially, as the one-event-at-a-time definition of the table.
func (fx *procFixture) reference(t testing.TB, db *state.DB) map[string]int64 {
	t.Helper()
	want := map[string]int64{}
	for pt := range fx.src.partitions() {
		next, _, err := db.Checkpoint(procSource, pt)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range fx.src.log(pt)[:next] {
			if r.HeaderErr != nil {
				continue
			}
			key := string(r.Headers.Key)
			switch r.Headers.Tag {
			case procTagDeposit:
				e, err := fx.deposit.Decode(r.Payload)
				if err != nil {
					t.Fatal(err)
				}
				want[key] += e.Amount
			case procTagReset:
				want[key] = 0
			}
		}
	}
	return want
}

func (fx *procFixture) table(t testing.TB) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	if err := fx.bal.Scan(context.Background(), func(k string, v int64) bool { got[k] = v; return true }); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkExact asserts that the table equals the sequential fold of the
// committed prefix of every partition.
func (fx *procFixture) checkExact(t testing.TB, db *state.DB) {
	t.Helper()
	want, got := fx.reference(t, db), fx.table(t)
	if len(want) != len(got) {
		t.Errorf("table has %d keys, the reference %d", len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("key %q: table %d (present %v), reference %d", k, g, ok, w)
		}
	}
}

// ---- in-memory source and sinks: memconn ----

// memSource is an in-memory topic (package memconn, the one in-memory
// connector) that tests append to while a processor runs; its readers wait
// for new records, count what the processor does and fail on demand.
type memSource struct {
	*memconn.Topic
	parts uint32
}

func newMemSource(name string, partitions uint32) *memSource {
	return &memSource{Topic: memconn.NewTopic(name, partitions), parts: partitions}
}

// partitions iterates over the source's partitions.
func (s *memSource) partitions() func(func(uint32) bool) {
	return func(yield func(uint32) bool) {
		for p := range s.parts {
			if !yield(p) {
				return
			}
		}
	}
}

// appendEnv appends an envelope to its key's partition.
func (s *memSource) appendEnv(env stream.Envelope) (uint32, uint64) {
	pt := xxh32.Partition(env.Headers.Key, s.parts)
	return pt, s.append(pt, connector.Record{Headers: env.Headers, Payload: env.Payload})
}

func (s *memSource) append(pt uint32, r connector.Record) uint64 {
	off, err := s.Append(pt, r)
	if err != nil {
		panic(err) // a test appending to a partition the source does not have
	}
	return off
}

func (s *memSource) log(pt uint32) []connector.Record { return s.Records(pt) }

func (s *memSource) total() uint64 {
	n := 0
	for p := range s.parts {
		appended, _ := s.Len(p)
		n += appended
	}
	return uint64(n)
}

// newMemSink returns an in-memory sink (a memconn topic of one partition)
// that answers Sent by message id.
func newMemSink() *memconn.Topic { return memconn.NewTopic("sink", 1) }

// failingSink is a memSink whose next n Sends fail after accepting the
// first prefix messages of each.
func failingSink(n, prefix int) *memconn.Topic {
	s := newMemSink()
	s.FailSends(n, prefix)
	return s
}

// byID counts a sink's messages per id.
func byID(s *memconn.Topic) map[[16]byte]int {
	out := map[[16]byte]int{}
	for _, m := range s.Messages() {
		out[m.ID]++
	}
	return out
}

// plainSink hides a sink's Sent: a sink without SentChecker.
type plainSink struct{ s connector.Sink }

func (p plainSink) Send(ctx context.Context, msgs []connector.Message) error {
	return p.s.Send(ctx, msgs)
}

// ---- helpers ----

// running is a processor's Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func startProcessor(p *Processor) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	return r
}

// stop cancels Run and returns its error.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of cancel")
		return nil
	}
}

// wait returns Run's error once it stopped by itself.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	defer r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop by itself within 20s")
		return nil
	}
}

// waitFor waits for cond, which the processor has no event to tell: 20 s
// is a hang guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testrun.WaitFor(t, 20*time.Second, testrun.Until(what, cond))
}

// sized returns normal in the default run and soak with STRAND_SOAK=1: a
// test's size where the default run is shortened (issue 33 item 7).
func sized(normal, soak int) int {
	if crashtest.Soak() {
		return soak
	}
	return normal
}

// caughtUp reports whether every partition's checkpoint is at the end of
// its log.
func caughtUp(p *Processor, src *memSource) bool {
	st := p.Stats()
	if len(st.Partitions) != int(src.parts) {
		return false
	}
	for _, ps := range st.Partitions {
		if ps.Next != uint64(len(src.log(ps.Partition))) {
			return false
		}
	}
	return true
}

func quiet() ProcessorOption { return WithProcessorLogger(slog.New(slog.DiscardHandler)) }

func newProc(t *testing.T, fx *procFixture, db *state.DB, opts ...ProcessorOption) *Processor {
	t.Helper()
	p, err := NewProcessor(fx.prog, db, fx.src, append([]ProcessorOption{quiet()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func closeDB(t *testing.T, db *state.DB) {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// ---- tests ----

func TestProcessorProcessesManyPartitionsExactlyOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 8, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	pipe := func(n int) {
		for range n {
			acct := "acct-" + strconv.Itoa(rng.IntN(64))
			if rng.IntN(20) == 0 {
				fx.pipeReset(t, acct)
			} else {
				fx.pipeDeposit(t, acct, int64(rng.IntN(100)+1))
			}
		}
	}
	// 2000 records before Run and 2000 while it runs by default (4000
	// each until issue 33 item 7, and with STRAND_SOAK=1).
	n := sized(2000, 4000)
	pipe(n)
	db := fx.openDB(t)
	defer closeDB(t, db)
	p := newProc(t, fx, db, WithPollSize(97))
	r := startProcessor(p)
	pipe(n) // while it runs
	waitFor(t, "all records committed", func() bool { return caughtUp(p, fx.src) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	fx.checkExact(t, db)

	st := p.Stats()
	if st.Total.Records != fx.src.total() || st.Total.Applied != fx.src.total() || st.Total.Polled != fx.src.total() {
		t.Errorf("stats: polled %d, records %d, applied %d; want %d each", st.Total.Polled, st.Total.Records, st.Total.Applied, fx.src.total())
	}
	if st.Total.Batches == 0 || st.Total.DeadLettered != 0 {
		t.Errorf("stats: %+v", st.Total)
	}
	for pt := range fx.src.partitions() {
		if got, want := fx.src.Advised(pt), uint64(len(fx.src.log(pt))); got != want {
			t.Errorf("partition %d: advised %d, want %d", pt, got, want)
		}
	}
	if opened, closed := fx.src.Readers(); opened != 8 || closed != 8 {
		t.Errorf("readers opened %d, closed %d; want 8 and 8", opened, closed)
	}

	// A restart resumes from the checkpoints: nothing is applied twice.
	pipe(500)
	r = startProcessor(p)
	waitFor(t, "restart caught up", func() bool { return caughtUp(p, fx.src) })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run again: %v", err)
	}
	fx.checkExact(t, db)
}

func TestProcessorOverlapsPollsAndBoundsReadAhead(t *testing.T) {
	for _, prefetch := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("prefetch %d", prefetch), func(t *testing.T) {
			defer goleak.VerifyNone(t)
			const pollSize = 10
			fx := newProcFixture(t, 1, func(s *executor.Spec) { s.Workers = 1 })
			for i := range 300 {
				fx.pipeDeposit(t, "k"+strconv.Itoa(i%7), 1)
			}
			fx.slow.Store(int64(time.Millisecond))
			var (
				committed  atomic.Uint64
				processing atomic.Int64 // batches between BeforeProcess and their AfterCommit
				overlapped atomic.Int64
				maxAhead   atomic.Uint64
			)
			fx.src.OnPoll(func(pt uint32, from uint64) {
				if processing.Load() > 0 {
					overlapped.Add(1)
				}
				ahead := from - committed.Load()
				for {
					m := maxAhead.Load()
					if ahead <= m || maxAhead.CompareAndSwap(m, ahead) {
						break
					}
				}
			})
			db := fx.openDB(t)
			defer closeDB(t, db)
			p := newProc(t, fx, db, WithPollSize(pollSize), WithPrefetch(prefetch), WithHooks(Hooks{
				// A batch's commit is accounted for (AfterCommit) after the
				// next batch started (BeforeProcess): count, not a flag.
				BeforeProcess: func(pt uint32, recs []connector.Record) error { processing.Add(1); return nil },
				AfterCommit: func(pt uint32, res executor.Result) error {
					committed.Store(res.Next)
					processing.Add(-1)
					return nil
				},
			}))
			r := startProcessor(p)
			waitFor(t, "caught up", func() bool { return caughtUp(p, fx.src) })
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			fx.checkExact(t, db)
			// Before each poll, the records polled and not yet committed
			// are at most prefetch batches.
			if got, limit := maxAhead.Load(), uint64(prefetch*pollSize); got > limit {
				t.Errorf("reader ran %d records ahead of the checkpoint, limit %d", got, limit)
			}
			if prefetch > 0 && overlapped.Load() == 0 {
				t.Error("no poll overlapped a batch being processed")
			}
			if prefetch == 0 && overlapped.Load() != 0 {
				t.Errorf("%d polls overlapped processing with prefetch 0", overlapped.Load())
			}
		})
	}
}

func TestProcessorStopsGracefullyOnCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 4, nil)
	for i := range 2000 {
		fx.pipeDeposit(t, "k"+strconv.Itoa(i%50), int64(i))
	}
	fx.slow.Store(int64(200 * time.Microsecond))
	var started, finished atomic.Int64
	db := fx.openDB(t)
	defer func() { closeDB(t, db) }()
	p := newProc(t, fx, db, WithPollSize(50), WithHooks(Hooks{
		BeforeProcess: func(uint32, []connector.Record) error { started.Add(1); return nil },
		AfterCommit:   func(uint32, executor.Result) error { finished.Add(1); return nil },
	}))
	r := startProcessor(p)
	waitFor(t, "some commits", func() bool { return finished.Load() >= 8 })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if s, f := started.Load(), finished.Load(); s != f {
		t.Errorf("%d batches started, %d committed: an in-flight batch was not finished", s, f)
	}
	if caughtUp(p, fx.src) {
		t.Log("processor finished everything before the cancel; the test proves less")
	}
	fx.checkExact(t, db) // no half-applied batch

	// Reopen as after a restart and finish.
	closeDB(t, db)
	db = fx.openDB(t)
	fx.slow.Store(0)
	p = newProc(t, fx, db)
	r = startProcessor(p)
	waitFor(t, "caught up after restart", func() bool { return caughtUp(p, fx.src) })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	fx.checkExact(t, db)
}

func TestProcessorStoreFailureStopsRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 3, nil)
	db := fx.openDB(t)
	p := newProc(t, fx, db, WithPollSize(20))
	r := startProcessor(p)
	for i := range 200 {
		fx.pipeDeposit(t, "k"+strconv.Itoa(i%9), 1)
	}
	waitFor(t, "first commits", func() bool { return p.Stats().Total.Batches > 0 })
	closeDB(t, db) // every later commit fails
	for i := range 50 {
		fx.pipeDeposit(t, "k"+strconv.Itoa(i%9), 1)
	}
	err := r.wait(t)
	var pe *PartitionError
	if !errors.As(err, &pe) || !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Run = %v, want a *PartitionError wrapping state.ErrClosed", err)
	}
	if pe.Source != procSource || !strings.Contains(err.Error(), "partition") || !strings.Contains(err.Error(), "offset") {
		t.Errorf("error does not name source, partition and offset: %v", err)
	}
}

func TestProcessorHookFailureSettlesTheCommitInFlight(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 1, nil)
	for i := range 400 {
		fx.pipeDeposit(t, "k"+strconv.Itoa(i%13), 1)
	}
	db := fx.openDB(t)
	defer func() { closeDB(t, db) }()
	boom := errors.New("boom")
	var commits atomic.Int64
	// The hook of a batch runs after the next batch's commit started; when
	// it fails, that commit must still be finished before Run returns.
	p := newProc(t, fx, db, WithPollSize(10), WithHooks(Hooks{
		AfterCommit: func(uint32, executor.Result) error {
			if commits.Add(1) == 5 {
				return boom
			}
			return nil
		},
	}))
	err := startProcessor(p).wait(t)
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the hook's error", err)
	}
	next, _, err := db.Checkpoint(procSource, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // gives a commit that outlived Run time to land: there is nothing to wait for
	if again, _, _ := db.Checkpoint(procSource, 0); again != next {
		t.Fatalf("checkpoint moved from %d to %d after Run returned: a commit outlived Run", next, again)
	}
	if next < 50 {
		t.Fatalf("checkpoint %d: want the failing hook's batch and the one in flight behind it committed (>= 50)", next)
	}
	fx.checkExact(t, db)
}

func TestProcessorSourceFailures(t *testing.T) {
	t.Run("permanent poll error", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		fx := newProcFixture(t, 2, nil)
		boom := errors.New("topic deleted")
		fx.src.FailPolls(func(pt uint32, from uint64) error {
			if pt == 1 && from >= 5 {
				return boom
			}
			return nil
		})
		for i := range 40 {
			fx.pipeDeposit(t, "k"+strconv.Itoa(i), 1)
		}
		db := fx.openDB(t)
		defer closeDB(t, db)
		err := startProcessor(newProc(t, fx, db, WithPollSize(5))).wait(t)
		var pe *PartitionError
		if !errors.Is(err, boom) || !errors.As(err, &pe) || pe.Partition != 1 || pe.Offset != 5 || pe.Op != stream.OpPoll {
			t.Fatalf("Run = %v (%+v), want poll error of partition 1 at offset 5", err, pe)
		}
		fx.checkExact(t, db)
	})
	t.Run("records not contiguous", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		fx := gapFixture(t, 4)
		db := fx.openDB(t)
		defer closeDB(t, db)
		err := startProcessor(newProc(t, fx, db, WithPollSize(3))).wait(t)
		if !errors.Is(err, ErrNotContiguous) {
			t.Fatalf("Run = %v, want ErrNotContiguous", err)
		}
		if next, _, _ := db.Checkpoint(procSource, 0); next != 3 {
			t.Errorf("checkpoint %d, want 3 (the batch with the gap is refused)", next)
		}
	})
	t.Run("records not contiguous behind queued batches", func(t *testing.T) {
		// The reader finds the gap while batches polled before it still
		// wait in the queue: they are committed before Run ends with the
		// error (a select that took the error first dropped them at random).
		defer goleak.VerifyNone(t)
		fx := gapFixture(t, 7)
		gapPolled := make(chan struct{})
		var once sync.Once
		fx.src.OnPoll(func(_ uint32, from uint64) {
			if from == 6 {
				once.Do(func() { close(gapPolled) })
			}
		})
		db := fx.openDB(t)
		defer closeDB(t, db)
		// The first batch waits until the reader polled the batch with
		// the gap (slots for it: prefetch 2), so that the loop finds the
		// batch [3, 6) and, very likely, the reader's error both ready.
		p := newProc(t, fx, db, WithPollSize(3), WithPrefetch(2), WithHooks(Hooks{
			BeforeProcess: func(_ uint32, recs []connector.Record) error {
				if len(recs) > 0 && recs[0].Offset == 0 {
					select {
					case <-gapPolled:
					case <-time.After(time.Minute): // hang guard only
					}
				}
				return nil
			},
		}))
		err := startProcessor(p).wait(t)
		if !errors.Is(err, ErrNotContiguous) {
			t.Fatalf("Run = %v, want ErrNotContiguous", err)
		}
		if next, _, _ := db.Checkpoint(procSource, 0); next != 6 {
			t.Errorf("checkpoint %d, want 6 (the two batches before the gap committed, the batch with it refused)", next)
		}
	})
}

// gapFixture is one partition of 10 deposits whose record at offset gap
// is missing from the log.
func gapFixture(t *testing.T, gap uint64) *procFixture {
	t.Helper()
	fx := newProcFixture(t, 1, nil)
	for i := range 10 {
		fx.pipeDeposit(t, "k"+strconv.Itoa(i), 1)
	}
	fx.src.Hide(0, gap)
	return fx
}

func TestProcessorRetriesParkedKeys(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 2, nil)
	var mu sync.Mutex
	tries := map[string]int{}
	fx.fail = func(key string) error {
		mu.Lock()
		defer mu.Unlock()
		tries[key]++
		switch {
		case key == "flaky" && tries[key] <= 2:
			return errors.New("flaky: try again")
		case key == "broken":
			return errors.New("broken for good")
		}
		return nil
	}
	fx.pipeDeposit(t, "flaky", 5)
	fx.pipeDeposit(t, "flaky", 7)
	fx.pipeDeposit(t, "steady", 1)
	fx.pipeDeposit(t, "broken", 3)
	sink := newMemSink()
	db := fx.openDB(t)
	defer closeDB(t, db)
	p := newProc(t, fx, db, WithDeadLetterSink(sink))
	r := startProcessor(p)
	// No more records arrive: only the retry schedule can finish the job.
	waitFor(t, "parked keys retried", func() bool {
		st := p.Stats()
		return st.ParkedKeys == 0 && st.Total.Published == 1
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	got := fx.table(t)
	if got["flaky"] != 12 || got["steady"] != 1 {
		t.Errorf("balances %v; want flaky 12, steady 1", got)
	}
	if _, ok := got["broken"]; ok {
		t.Errorf("broken key was applied: %v", got)
	}
	st := p.Stats()
	if st.Total.Retries == 0 || st.Total.DeadLettered != 1 {
		t.Errorf("stats %+v: want retries and 1 dead letter (broken after its attempts)", st.Total)
	}
	for _, m := range sink.Messages() {
		if h := header(m, deadletter.HeaderReason); h != deadletter.ReasonExhausted.String() {
			t.Errorf("dead letter reason %q, want %q", h, deadletter.ReasonExhausted)
		}
	}
}

func header(m connector.Message, name string) string {
	for _, f := range m.Headers {
		if f.Name == name {
			return string(f.Value)
		}
	}
	return ""
}

// errCrash is returned by a hook to stop Run as a crash would at that point.
var errCrash = errors.New("simulated crash")

func TestProcessorPublishesDeadLettersExactlyOnceAcrossCrashes(t *testing.T) {
	crashAt := map[string]func(h *Hooks, crash func() error){
		"after commit, before publish": func(h *Hooks, crash func() error) {
			h.AfterCommit = func(_ uint32, res executor.Result) error {
				if len(res.DeadLetters) > 0 {
					return crash()
				}
				return nil
			}
		},
		"before send": func(h *Hooks, crash func() error) {
			h.BeforeDeadLetterSend = func(uint32, []deadletter.Letter) error { return crash() }
		},
		"after send, before row deletion": func(h *Hooks, crash func() error) {
			h.AfterDeadLetterSend = func(uint32, []deadletter.Letter) error { return crash() }
		},
		"after row deletion": func(h *Hooks, crash func() error) {
			h.AfterDeadLetterDelete = func(uint32, []deadletter.Letter) error { return crash() }
		},
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range crashAt {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, checked := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, sink with SentChecker %v", name, checked), func(t *testing.T) {
				defer goleak.VerifyNone(t)
				fx := newProcFixture(t, 4, nil)
				type origin struct {
					pt  uint32
					off uint64
				}
				var poison []origin
				for i := range 400 {
					acct := "a" + strconv.Itoa(i%40)
					if i%13 == 0 {
						pt, off := fx.pipePoison(acct)
						poison = append(poison, origin{pt, off})
					} else {
						fx.pipeDeposit(t, acct, 1)
					}
				}
				mem := newMemSink()
				var sink connector.Sink = mem
				if !checked {
					sink = plainSink{mem}
				}
				var crashed atomic.Bool
				crash := func() error {
					if crashed.CompareAndSwap(false, true) {
						return errCrash
					}
					return nil
				}
				var hooks Hooks
				crashAt[name](&hooks, crash)

				db := fx.openDB(t)
				p := newProc(t, fx, db, WithPollSize(25), WithDeadLetterSink(sink), WithHooks(hooks))
				err := startProcessor(p).wait(t)
				if !errors.Is(err, errCrash) {
					t.Fatalf("first Run = %v, want the simulated crash", err)
				}
				closeDB(t, db)

				// Restart: everything gets processed and every dead letter
				// published.
				db = fx.openDB(t)
				defer closeDB(t, db)
				p = newProc(t, fx, db, WithPollSize(25), WithDeadLetterSink(sink))
				r := startProcessor(p)
				waitFor(t, "caught up and dead letters published", func() bool {
					if !caughtUp(p, fx.src) {
						return false
					}
					pending, err := p.PendingDeadLetters(context.Background())
					return err == nil && len(pending) == 0
				})
				if err := r.stop(t); err != nil {
					t.Fatal(err)
				}
				fx.checkExact(t, db)

				counts := byID(mem)
				for _, o := range poison {
					id := deadletter.Letter{Source: procSource, Partition: o.pt, Offset: o.off}.ID()
					switch n := counts[id]; {
					case n == 1:
					case n > 1 && !checked:
						// A plain sink gives at least once.
					default:
						t.Errorf("dead letter of partition %d offset %d published %d times", o.pt, o.off, n)
					}
				}
				if checked && len(mem.Messages()) != len(poison) {
					t.Errorf("sink holds %d messages, want %d", len(mem.Messages()), len(poison))
				}
				m := mem.Messages()[0]
				if header(m, deadletter.HeaderReason) != deadletter.ReasonUnknownType.String() || header(m, deadletter.HeaderSource) != procSource ||
					header(m, deadletter.HeaderOffset) == "" || header(m, deadletter.HeaderPartition) == "" || string(m.Payload) != `{"poison":true}` ||
					header(m, connector.HeaderKey) == "" {
					t.Errorf("dead-letter message lacks its origin: %+v", m)
				}
			})
		}
	}
}

func TestProcessorRetriesFailedDeadLetterSends(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 2, nil)
	var poison int
	for i := range 200 {
		if i%10 == 0 {
			fx.pipePoison("p" + strconv.Itoa(i))
			poison++
		} else {
			fx.pipeDeposit(t, "d"+strconv.Itoa(i%17), 2)
		}
	}
	// Two failed sends, each after half their messages went through.
	sink := failingSink(2, 3)
	db := fx.openDB(t)
	defer closeDB(t, db)
	p := newProc(t, fx, db, WithDeadLetterSink(sink), WithDeadLetterBackoff(time.Millisecond, 5*time.Millisecond))
	r := startProcessor(p)
	waitFor(t, "dead letters published", func() bool { return p.Stats().Total.Published == uint64(poison) })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for id, n := range byID(sink) {
		if n != 1 {
			t.Errorf("message %x published %d times", id, n)
		}
	}
	if len(sink.Messages()) != poison {
		t.Errorf("sink holds %d messages, want %d", len(sink.Messages()), poison)
	}
	if st := p.Stats(); st.Total.PublishErrors != 2 || sink.SentChecks() == 0 {
		t.Errorf("publish errors %d (want 2), Sent checks %d (want > 0)", st.Total.PublishErrors, sink.SentChecks())
	}
}

func TestProcessorWithoutSinkKeepsDeadLetters(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 1, nil)
	fx.pipeDeposit(t, "a", 1)
	_, off := fx.pipePoison("a")
	fx.src.append(0, connector.Record{HeaderErr: errors.New("garbled headers"), Payload: []byte("x")})
	db := fx.openDB(t)
	defer closeDB(t, db)
	p := newProc(t, fx, db)
	r := startProcessor(p)
	waitFor(t, "caught up", func() bool { return caughtUp(p, fx.src) })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	pending, err := p.PendingDeadLetters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 2 || pending[0].Offset != off || pending[0].Reason != deadletter.ReasonUnknownType || pending[1].Reason != deadletter.ReasonBadHeaders {
		t.Fatalf("pending dead letters %v", pending)
	}
	if st := p.Stats(); st.Total.DeadLettered != 2 || st.Total.Published != 0 {
		t.Errorf("stats %+v", st.Total)
	}
}

func TestProcessorReleasesHeldKey(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 1, func(s *executor.Spec) { s.Poison = stream.BlockPoisonedKey })
	fx.pipeDeposit(t, "held", 1)
	fx.pipePoison("held")
	fx.pipeDeposit(t, "held", 10)
	fx.pipeDeposit(t, "free", 4)
	db := fx.openDB(t)
	defer closeDB(t, db)
	p := newProc(t, fx, db, WithDeadLetterSink(newMemSink()))
	if err := p.Unblock(context.Background(), 0, []byte("held")); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Unblock before Run = %v, want ErrNotRunning", err)
	}
	r := startProcessor(p)
	waitFor(t, "caught up", func() bool { return caughtUp(p, fx.src) && p.Stats().ParkedKeys == 1 })
	if got := fx.table(t); got["held"] != 1 || got["free"] != 4 {
		t.Fatalf("balances %v before Unblock", got)
	}
	if err := p.Unblock(context.Background(), 0, []byte("held")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "unblocked key applied", func() bool { return p.Stats().ParkedKeys == 0 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := fx.table(t); got["held"] != 11 {
		t.Errorf("balances %v after Release, want held 11", got)
	}
}

func TestNewProcessorRefuses(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 2, nil)
	db := fx.openDB(t)
	defer closeDB(t, db)
	cases := []struct {
		name string
		src  connector.Source
		opts []ProcessorOption
		is   error
	}{
		{"a source the topology does not read", newMemSource("mem/other", 1), nil, nil},
		{"a poll size below 1", fx.src, []ProcessorOption{WithPollSize(0)}, nil},
		{"a negative prefetch", fx.src, []ProcessorOption{WithPrefetch(-1)}, nil},
		{"a partition given twice", fx.src, []ProcessorOption{WithPartitions(1, 1)}, nil},
		{"a zero drain timeout", fx.src, []ProcessorOption{WithDrainTimeout(0)}, nil},
		{"an inverted dead-letter backoff", fx.src, []ProcessorOption{WithDeadLetterBackoff(time.Second, time.Millisecond)}, nil},
	}
	for _, c := range cases {
		if _, err := NewProcessor(fx.prog, db, c.src, c.opts...); err == nil {
			t.Errorf("NewProcessor accepted %s", c.name)
		}
	}
	if _, err := NewProcessor(nil, db, fx.src); err == nil {
		t.Error("NewProcessor accepted a nil program")
	}

	// A store written by another topology is refused.
	if _, err := NewProcessor(fx.prog, db, fx.src); err != nil {
		t.Fatal(err)
	}
	other := newProcFixture(t, 2, func(s *executor.Spec) { s.Name = "another" })
	if _, err := NewProcessor(other.prog, db, fx.src); !errors.Is(err, state.ErrIncompatibleTopology) {
		t.Errorf("NewProcessor on another topology's store = %v, want ErrIncompatibleTopology", err)
	}

	// A partition the source lacks is refused by Run.
	p := newProc(t, fx, db, WithPartitions(0, 5))
	if err := p.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "partition 5") {
		t.Errorf("Run with partition 5 of 2 = %v", err)
	}

	// Run is not reentrant.
	p = newProc(t, fx, db, WithPartitions(1))
	r := startProcessor(p)
	waitFor(t, "running", func() bool { return len(p.Stats().Partitions) == 1 })
	if err := p.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run = %v, want ErrRunning", err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
