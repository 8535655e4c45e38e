// Package topologytest runs a topology without a broker, for tests: the
// broker-free driver (Kafka Streams' TopologyTestDriver, Goka's tester).
//
// A Driver opens the topology's real App — the same pipelines, commits,
// retries, parking, dead-letter publication and restarts as in production
// — over an in-memory connector (package memconn, Broker) whose logs the
// test fills with Pipe and hands out batch by batch with Step, on a clock
// that moves only when the test calls AdvanceClock. Dead letters are published to an in-memory
// dead-letter topic that DeadLetters reads; the Driver logs nothing unless
// given a logger.
//
//	d := topologytest.NewDriver(t, topo)
//	topologytest.Pipe(d, Deposits, Deposited{Account: 42, Amount: 100})
//	d.Advance()
//	acct, ok, err := balances.Get(ctx, 42)
//
// Option is an opaque interface made only by this package's With…
// functions (WithDir, WithPartitions, WithBatchSize, WithOpenOptions, …).
package topologytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/memconn"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
)

// TB is the part of testing.TB the Driver uses: a *testing.T or
// *testing.B, or anything else that can fail and clean up (an Example's
// stand-in).
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

var _ TB = testing.TB(nil)

// Driver runs one topology in memory. Its methods must be called from the
// test's goroutine.
type Driver struct {
	tb        TB
	prog      *topology.Program
	dir       string
	parts     uint32
	batchSize func() int
	log       *slog.Logger
	opts      []topology.OpenOption
	conn      *memconn.Broker
	clock     *clock
	timeout   time.Duration
	errs      []error // options that refused their value

	app    *topology.App
	cancel context.CancelFunc
	runErr chan error
}

// Option configures NewDriver.
type Option interface {
	apply(*Driver)
}

// optionFunc adapts a function to Option.
type optionFunc func(*Driver)

func (f optionFunc) apply(c *Driver) { f(c) }

// WithDir sets the state directory (default: a new temporary directory), so a
// test can reopen a store another Driver or a child process wrote. Its
// in-memory topics then stand for the log that store was built from, which
// the test pipes again: until they hold the records before the store's
// checkpoints, they report those checkpoints as their ends, so that the App
// does not take them for a log that ends before its checkpoints
// (topology.ErrSourceChanged).
//
// An empty dir is refused (leave the option out for a temporary one).
func WithDir(dir string) Option {
	return optionFunc(func(d *Driver) {
		if dir == "" {
			d.refuse("WithDir", "an empty directory: leave the option out for a temporary one")
			return
		}
		d.dir = dir
	})
}

// WithPartitions sets the partition count of every source (default 1); 0
// is refused.
func WithPartitions(n uint32) Option {
	return optionFunc(func(d *Driver) {
		if n == 0 {
			d.refuse("WithPartitions", "0 partitions: give 1 or more")
			return
		}
		d.parts = n
	})
}

// WithBatchSize sets how many records of each partition one Step hands out
// (default 1,000); a size below 1 is refused.
func WithBatchSize(n int) Option {
	return optionFunc(func(d *Driver) {
		if n < 1 {
			d.refuse("WithBatchSize", fmt.Sprintf("batch size %d: give 1 or more", n))
			return
		}
		d.batchSize = func() int { return n }
	})
}

// WithBatchSizes sets a function that gives each Step's batch size, for tests
// of random batch boundaries; nil is refused.
func WithBatchSizes(fn func() int) Option {
	return optionFunc(func(d *Driver) {
		if fn == nil {
			d.refuse("WithBatchSizes", "a nil function")
			return
		}
		d.batchSize = fn
	})
}

// WithLogger sets the logger of the App (default: none, so a test's output
// shows only what the test reports); nil is refused.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(d *Driver) {
		if l == nil {
			d.refuse("WithLogger", "a nil logger: leave the option out for none")
			return
		}
		d.log = l
	})
}

// refuse records that option name refused its value: NewDriver fails the
// test with it.
func (d *Driver) refuse(name, what string) {
	d.errs = append(d.errs, fmt.Errorf("strand: topologytest.%s: %s", name, what))
}

// WithOpenOptions adds options of topology.Open (durability, poll size ...).
func WithOpenOptions(opts ...topology.OpenOption) Option {
	return optionFunc(func(d *Driver) { d.opts = append(d.opts, opts...) })
}

// NewDriver builds topo, opens its App over in-memory topics and starts
// it. A topology that does not build, or a store that cannot open, fails
// the test. The Driver is closed by tb's cleanup.
func NewDriver(tb TB, topo *topology.Topology, opts ...Option) *Driver {
	tb.Helper()
	d := &Driver{tb: tb, parts: 1, batchSize: func() int { return 1000 }, timeout: 20 * time.Second,
		log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o != nil {
			o.apply(d)
		}
	}
	if err := errors.Join(d.errs...); err != nil {
		tb.Fatalf("topologytest: NewDriver: %v", err)
		return nil
	}
	prog, err := topo.Build()
	if err != nil {
		tb.Fatalf("topologytest: %v", err)
	}
	d.prog = prog
	if d.dir == "" {
		d.dir = tb.TempDir()
	}
	d.clock = newClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if d.conn, err = newBroker(d.parts, prog.Sources(), d.clock); err != nil {
		tb.Fatalf("topologytest: %v", err)
	}
	resume(d.conn, d.dir)
	d.open()
	tb.Cleanup(d.Close)
	return d
}

func (d *Driver) open() {
	d.tb.Helper()
	// The in-memory sinks have no send in flight across a restart: no
	// grace for one is needed.
	opts := append([]topology.OpenOption{topology.WithLogger(d.log), topology.WithClock(d.clock),
		topology.WithDurability(topology.NoSync), topology.WithPrefetch(0), topology.WithOutboxGrace(0)}, d.opts...)
	app, err := d.prog.Open(context.Background(), d.conn, d.dir, opts...)
	if err != nil {
		d.tb.Fatalf("topologytest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.app, d.cancel, d.runErr = app, cancel, make(chan error, 1)
	go func() { d.runErr <- app.Run(ctx) }()
	// Wait until every partition's pipeline runs, so that Stats (parked
	// keys, retries) describe the reopened store.
	deadline := time.Now().Add(d.timeout)
	for !d.started() {
		select {
		case err := <-d.runErr:
			d.runErr <- err
			d.tb.Fatalf("topologytest: the app stopped at start: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			d.tb.Fatalf("topologytest: the app did not start within %v", d.timeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (d *Driver) started() bool {
	// The partitions the App processes (topology.WithPartitions may give it
	// some; a global source has all of them).
	want := 0
	for p := range d.parts {
		if d.app.Processes(p) {
			want++
		}
	}
	for _, st := range d.app.Stats() {
		if len(st.Partitions) < want {
			return false
		}
	}
	return true
}

// App returns the running App (for Stats, Checkpoint, Unblock).
func (d *Driver) App() *topology.App { return d.app }

// Broker returns the in-memory broker the App runs over (package memconn):
// for tests that inject faults (a sink whose sends fail, a source whose
// polls fail) or read a topic directly. Records appended to a source
// through it are handed out by Step, as Pipe's are.
func (d *Driver) Broker() *memconn.Broker { return d.conn }

// Dir returns the state directory.
func (d *Driver) Dir() string { return d.dir }

// Now returns the driver's clock.
func (d *Driver) Now() time.Time { return d.clock.Now() }

// AdvanceClock moves the driver's clock: parked keys whose backoff has
// passed become due, and the next Step retries them; so do the
// re-sequencer's gaps whose timeout has passed, which the next Step gives
// up (topology.WithGapPolicy), with no new input needed.
func (d *Driver) AdvanceClock(dt time.Duration) { d.clock.advance(dt) }

// Close stops the App (committing what is in flight) and closes its store.
// It is safe to call more than once.
func (d *Driver) Close() {
	if d.app == nil {
		return
	}
	d.cancel()
	err := <-d.runErr
	cerr := d.app.Close()
	d.app = nil
	if err = errors.Join(err, cerr); err != nil {
		d.tb.Errorf("topologytest: closing the app: %v", err)
	}
}

// Restart closes the App and opens it again on the same state directory
// and topics, as a process restart would: it resumes from the committed
// checkpoints with its parked keys.
func (d *Driver) Restart() {
	d.tb.Helper()
	d.Close()
	d.open()
}

// Evolve closes the App and opens topo, a changed version of its
// topology, on the same state directory and topics, as a deployment of
// new code would: the changes are made in place where they can be
// (topology.Open: tables added or with a new version are built in the
// background, and Step and Advance wait for those builds), or the open
// fails the test. topo's sources must be topics of the Driver; a new
// one is created empty.
func (d *Driver) Evolve(topo *topology.Topology) {
	d.tb.Helper()
	prog, err := topo.Build()
	if err != nil {
		d.tb.Fatalf("topologytest: %v", err)
	}
	d.Close()
	for _, n := range prog.Sources() {
		if d.conn.Topic(n) == nil {
			if _, err := d.conn.CreateTopic(n, d.parts); err != nil {
				d.tb.Fatalf("topologytest: %v", err)
			}
		}
	}
	d.prog = prog
	d.open()
}

// Reset closes the App, resets its state directory with topology.Reset
// (every table is rebuilt from the topics when it opens again, and nothing
// published before is published again) and opens it again. A reset that
// is refused (records parked or held) fails the test.
func (d *Driver) Reset() {
	d.tb.Helper()
	d.Close()
	if _, err := topology.Reset(context.Background(), d.dir, topology.WithResetLogger(d.log)); err != nil {
		d.tb.Fatalf("topologytest: %v", err)
	}
	d.open()
}

// Pipe appends events to the topology's only source (repartition topics
// of KeyBy steps aside), each in the partition
// of its key, encoded by decl exactly as a publisher encodes them. It fails
// the test if the topology has several sources (use PipeTo) or an event
// does not encode.
func Pipe[K, E any](d *Driver, decl *stream.Event[K, E], events ...E) {
	d.tb.Helper()
	var srcs []string // the sources the topology does not feed itself
	for _, sn := range d.prog.Sources() {
		if !slices.Contains(d.prog.Repartitions(), sn) {
			srcs = append(srcs, sn)
		}
	}
	if len(srcs) != 1 {
		d.tb.Fatalf("topologytest.Pipe: the topology has %d sources; use PipeTo", len(srcs))
	}
	PipeTo(d, srcs[0], decl, events...)
}

// PipeTo appends events to the named source, each in the partition of its
// key.
func PipeTo[K, E any](d *Driver, source string, decl *stream.Event[K, E], events ...E) {
	d.tb.Helper()
	for _, e := range events {
		env, err := decl.Envelope(e)
		if err != nil {
			d.tb.Fatalf("topologytest.Pipe: %v", err)
		}
		p := xxh32.Partition(env.Headers.Key, d.parts)
		d.PipeRecord(source, connector.Record{Partition: p, Headers: env.Headers, Payload: env.Payload})
	}
}

// PipeRecord appends a raw record to partition r.Partition of source, for
// tests of bad input (set HeaderErr, an unknown tag, a broken payload). The
// driver assigns the offset, which it returns, and a timestamp.
func (d *Driver) PipeRecord(source string, r connector.Record) uint64 {
	d.tb.Helper()
	s := d.source(source)
	if r.Partition >= d.parts {
		d.tb.Fatalf("topologytest: source %q has no partition %d", source, r.Partition)
	}
	r.Timestamp = uint64(d.clock.Now().UnixMicro())
	off, err := s.Append(r.Partition, r)
	if err != nil {
		d.tb.Fatalf("topologytest: %v", err)
	}
	return off
}

// source returns the in-memory topic of a source of the topology, failing
// the test for a name that is none.
func (d *Driver) source(name string) *memconn.Topic {
	d.tb.Helper()
	if !slices.Contains(d.prog.Sources(), name) {
		d.tb.Fatalf("topologytest: no source %q", name)
	}
	return d.conn.Topic(name)
}

// Step hands every partition with records not yet handed out one more
// batch, and waits until the App has committed everything handed out and
// retried every parked key that is due. It reports whether there was
// anything to do. A partition that fails (a store failure) fails the test.
func (d *Driver) Step() bool {
	d.tb.Helper()
	did := false
	for _, name := range d.prog.Sources() {
		s := d.source(name)
		for p := range d.parts {
			if s.Deliver(p, d.batchSize()) > 0 {
				did = true
			}
		}
	}
	if d.retryDue() {
		did = true
	}
	d.settle()
	return did
}

// Advance steps until every record is committed and no parked key is due.
func (d *Driver) Advance() {
	d.tb.Helper()
	for d.Step() {
	}
}

// retryDue reports whether a parked key is due on the driver's clock.
func (d *Driver) retryDue() bool {
	now := d.clock.Now()
	for _, st := range d.app.Stats() {
		for _, ps := range st.Partitions {
			if (ps.ParkedKeys > 0 || ps.HeldRecords > 0) && !ps.NextRetry.IsZero() && !ps.NextRetry.After(now) {
				return true
			}
			if !ps.NextDeadline.IsZero() && !ps.NextDeadline.After(now) {
				return true // a row expires or a timer fires
			}
		}
	}
	return false
}

// settle waits until every handed-out record is committed and nothing is
// due.
func (d *Driver) settle() {
	d.tb.Helper()
	deadline := time.Now().Add(d.timeout)
	for {
		select {
		case err := <-d.runErr:
			d.runErr <- err // Close reads it again
			d.tb.Fatalf("topologytest: the app stopped: %v", err)
		default:
		}
		if d.caughtUp() && !d.retryDue() && d.outboxEmpty() {
			return
		}
		if time.Now().After(deadline) {
			d.tb.Fatalf("topologytest: the app did not commit what it was given within %v: %s", d.timeout, d.describe())
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// outboxEmpty reports whether every committed To and KeyBy message has
// been published (to a topic of the driver; a repartition topic's records
// are handed out by the next Step).
func (d *Driver) outboxEmpty() bool {
	for _, st := range d.app.Stats() {
		for _, ps := range st.Partitions {
			if ps.OutboxPending > 0 {
				return false
			}
		}
	}
	return true
}

func (d *Driver) caughtUp() bool {
	if keys, _ := d.Parked(); keys == 0 && d.allReleased() {
		// A table built in the background (topology.App.Builds) is handed
		// over to a partition's pipeline when it has no parked key; its
		// build reads the records from the first one on, which a Driver
		// reopened on a store hands out again step by step.
		for _, bp := range d.app.Builds() {
			if !bp.Done {
				return false
			}
		}
	}
	for _, name := range d.prog.Sources() {
		s := d.source(name)
		for p := range d.parts {
			if _, released := s.Len(p); d.next(name, p) < uint64(released) {
				return false
			}
		}
	}
	return true
}

// allReleased reports whether every record piped was handed out.
func (d *Driver) allReleased() bool {
	for _, name := range d.prog.Sources() {
		s := d.source(name)
		for p := range d.parts {
			if appended, released := s.Len(p); released < appended {
				return false
			}
		}
	}
	return true
}

// next returns the checkpoint of a partition as its pipeline last
// accounted for it: its stats (parked keys, next retry) describe the same
// commit.
func (d *Driver) next(source string, partition uint32) uint64 {
	for _, st := range d.app.Stats() {
		if st.Source != source {
			continue
		}
		for _, ps := range st.Partitions {
			if ps.Partition == partition {
				return ps.Next
			}
		}
	}
	return 0
}

// describe tells, for a failure message, what each partition was given and
// where its pipeline stands.
func (d *Driver) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clock %s", d.clock.Now().Format(time.RFC3339Nano))
	for _, st := range d.app.Stats() {
		for _, ps := range st.Partitions {
			end, granted := d.conn.Topic(st.Source).Len(ps.Partition)
			fmt.Fprintf(&b, "; %s/%d: %d records, %d handed out, committed up to %d, %d keys parked (next retry %s)",
				st.Source, ps.Partition, end, granted, ps.Next, ps.ParkedKeys, ps.NextRetry.Format(time.RFC3339Nano))
		}
	}
	if os.Getenv("STRAND_DEBUG_STACKS") != "" {
		buf := make([]byte, 1<<20)
		b.Write(buf[:runtime.Stack(buf, true)])
	}
	return b.String()
}

// Lag returns how many records are not committed yet, over every source
// and partition, plus the records tables built in the background still
// have to build (at least 1 per build not finished).
func (d *Driver) Lag() int {
	d.tb.Helper()
	lag := 0
	for _, name := range d.prog.Sources() {
		s := d.source(name)
		for p := range d.parts {
			end, _ := s.Len(p)
			lag += end - int(d.next(name, p))
		}
	}
	for _, bp := range d.app.Builds() {
		if !bp.Done {
			lag += max(int(bp.Target-bp.Built), 1) // still being built
		}
	}
	return lag
}

// Parked returns how many keys wait for a retry (or an Unblock) and how many
// records they hold, over every source and partition.
func (d *Driver) Parked() (keys, records int) {
	for _, st := range d.app.Stats() {
		keys += st.ParkedKeys
		records += st.ParkedRecords
	}
	return keys, records
}

// Held returns how many keys the re-sequencer holds records of and how
// many records, over every source and partition.
func (d *Driver) Held() (keys, records int) {
	for _, st := range d.app.Stats() {
		for _, ps := range st.Partitions {
			keys += ps.HeldKeys
			records += ps.HeldRecords
		}
	}
	return keys, records
}

// DeadLetters waits until the App has published every committed dead
// letter and returns what the dead-letter topic holds, read back as a
// consumer of it would, in publication order.
func (d *Driver) DeadLetters() []deadletter.Letter {
	d.tb.Helper()
	deadline := time.Now().Add(d.timeout)
	for {
		pending, err := d.app.PendingDeadLetters(context.Background())
		if err != nil {
			d.tb.Fatalf("topologytest: %v", err)
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			d.tb.Fatalf("topologytest: %d dead letters not published within %v", len(pending), d.timeout)
		}
		time.Sleep(200 * time.Microsecond)
	}
	var out []deadletter.Letter
	outputs := d.prog.Outputs()
	for _, name := range d.conn.Topics() {
		if slices.Contains(outputs, name) {
			continue
		}
		for _, m := range d.conn.Topic(name).Messages() {
			dl, err := deadletter.Parse(m)
			if err != nil {
				d.tb.Fatalf("topologytest: dead-letter message: %v", err)
			}
			out = append(out, dl)
		}
	}
	slices.SortStableFunc(out, func(a, b deadletter.Letter) int {
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

// Output returns what the topology published to topic with To or KeyBy,
// in publication order, once every committed message is published (call
// Advance first to have everything committed). A message published twice
// by the outbox (it is not, in the driver) would be there twice. An
// unknown topic fails the test.
func (d *Driver) Output(topic string) []connector.Message {
	d.tb.Helper()
	if !slices.Contains(d.prog.Outputs(), topic) {
		d.tb.Fatalf("topologytest: the topology does not publish to %q (it publishes to %q)", topic, d.prog.Outputs())
	}
	deadline := time.Now().Add(d.timeout)
	for !d.outboxEmpty() {
		if time.Now().After(deadline) {
			d.tb.Fatalf("topologytest: outbox messages not published within %v", d.timeout)
		}
		time.Sleep(200 * time.Microsecond)
	}
	s := d.conn.Topic(topic)
	if s == nil {
		return nil
	}
	return s.Messages()
}

// Outputs decodes what the topology published to topic (Output) as events
// of decl, in publication order. A message that is not an event of decl
// fails the test.
func Outputs[K, E any](d *Driver, topic string, decl *stream.Event[K, E]) []E {
	d.tb.Helper()
	var out []E
	for _, m := range d.Output(topic) {
		r := memconn.RecordOf(m)
		if r.HeaderErr != nil {
			d.tb.Fatalf("topologytest: a message of %q: %v", topic, r.HeaderErr)
		}
		if r.Headers.Tag != decl.Tag() {
			d.tb.Fatalf("topologytest: a message of %q has type tag %d, not %d (%s)", topic, r.Headers.Tag, decl.Tag(), decl.Name())
		}
		e, err := decl.Decode(r.Payload)
		if err != nil {
			d.tb.Fatalf("topologytest: a message of %q: %v", topic, err)
		}
		out = append(out, e)
	}
	return out
}

// clock is the driver's clock: time moves only when the test says so.
type clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	c  chan time.Time
}

func newClock(t time.Time) *clock { return &clock{now: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) At(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !t.After(c.now) {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: t, c: ch})
	return ch
}

func (c *clock) advance(dt time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(dt)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.c <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
}
