package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
)

// run parses args and runs the program until it is done or ctx ends. extra
// options go to the processor (the crash test installs hooks with them).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, extra ...topology.OpenOption) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	a := newApp(cfg, stdout, stderr)
	a.echo = stderr
	a.openOpts = extra
	_, err = a.run(ctx)
	return err
}

// app is one run of the program in one role.
type app struct {
	cfg      config
	out      io.Writer
	log      *slog.Logger
	ev       *bank.Events
	openOpts []topology.OpenOption // crash tests: fault points (topology.WithFaults)
	// caughtUp, when set, is called once a bounded run has caught up, before
	// the check, while HTTP is still served (tests query it there).
	caughtUp func(a *app)
	// wrapDLQ, when set, wraps the dead-letter sink (a test hides its
	// SentChecker to show that the crash test catches duplicates).
	wrapDLQ func(connector.Sink) connector.Sink

	dir      string
	srv      *iggytest.Server
	addr     string
	cl       *iggy.Client
	app      *topology.App
	balances *topology.Table[bank.AccountID, bank.Account]
	tel      *telemetry   // metrics at /metrics, spans to stdout with -trace
	ln       net.Listener // of the query server, until it serves
	httpAddr string

	// launch starts the processes of -instances (default: this program's
	// executable again); echo gets their output, prefixed.
	launch launcher
	echo   io.Writer
	// dumpOnFailure: a failed -instances run ends its instances with
	// SIGQUIT, which prints their goroutines' stacks (tests).
	dumpOnFailure bool

	hcOnce sync.Once
	hc     *http.Client // httpClient
}

// report is what a bounded run measured and checked.
type report struct {
	Published, Poison int64
	PublishTime       time.Duration
	Records           uint64 // records committed by this run
	ProcessTime       time.Duration
	MaxLag            int64
	DeadLetters       int
	Check             bank.Check
	DLQErr            error
	// with -resequence: events the producer published late and twice;
	// what the re-sequencer counted; what the reference fold counted.
	Displaced, Duplicated  int64
	Reseq                  stream.Counters
	HeldNow                int
	RefDuplicates, RefHeld int
	// a group's run: the check through a query server, the changelog
	Query     *queryStats
	Changelog *clSummary
}

func newApp(cfg config, stdout, stderr io.Writer) *app {
	level := slog.LevelInfo
	if cfg.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ev := bank.Declarations(cfg.codec)
	if cfg.resequence {
		ev = bank.SequencedDeclarations(cfg.codec)
	}
	return &app{cfg: cfg, out: stdout, log: log, ev: ev}
}

func (a *app) printf(format string, args ...any) { fmt.Fprintf(a.out, format+"\n", args...) }

// run runs the configured role.
func (a *app) run(ctx context.Context) (rep report, err error) {
	if err := a.openDir(); err != nil {
		return rep, err
	}
	defer a.closeAll()
	// The SDK prints through the standard logger on every login: make
	// those lines debug records of ours.
	defer iggy.RouteStdLog(a.log)()
	switch a.cfg.role {
	case "broker":
		return rep, a.runBroker(ctx)
	case "producer":
		return rep, a.runProducer(ctx)
	case "processor":
		return rep, a.runProcessor(ctx)
	case "check":
		if a.cfg.query != "" {
			return a.runGroupCheck(ctx)
		}
		return a.runCheck(ctx)
	}
	if a.cfg.instances > 1 {
		return a.runInstances(ctx)
	}
	return a.runAll(ctx)
}

// openDir picks the data directory: -data, or a fresh one removed at the
// end unless -keep.
func (a *app) openDir() error {
	if a.cfg.data != "" {
		a.dir = a.cfg.data
		return os.MkdirAll(a.dir, 0o755)
	}
	dir, err := os.MkdirTemp("", "strand-accounts-")
	if err != nil {
		return fmt.Errorf("create a data directory: %w", err)
	}
	a.dir = dir
	return nil
}

// closeAll releases what run opened, in reverse order.
func (a *app) closeAll() {
	if a.hc != nil {
		a.hc.CloseIdleConnections()
	}
	if a.app != nil {
		if err := a.app.Close(); err != nil {
			a.log.Error("close the app", "err", err)
		}
	}
	if a.tel != nil {
		a.tel.shutdown()
	}
	if a.cl != nil {
		_ = a.cl.Close()
	}
	if a.srv != nil {
		if err := a.srv.Close(); err != nil {
			a.log.Error("close embedded broker", "err", err)
		}
	}
	if a.cfg.data == "" {
		if a.cfg.keep {
			a.printf("data kept in %s", a.dir)
		} else {
			_ = os.RemoveAll(a.dir)
		}
	}
}

// startBroker starts the embedded broker on addr with its log under the
// data directory.
func (a *app) startBroker(addr string) error {
	dir := filepath.Join(a.dir, "broker")
	srv, err := iggytest.NewServer(iggytest.WithAddr(addr), iggytest.WithDataDir(dir),
		iggytest.WithCredentials(a.cfg.user, a.cfg.password))
	if err != nil {
		return fmt.Errorf("start the embedded broker: %w", err)
	}
	a.srv, a.addr = srv, srv.Addr()
	a.log.Info("embedded Iggy broker started", "addr", a.addr, "data", dir)
	return nil
}

func (a *app) runBroker(ctx context.Context) error {
	if err := a.startBroker(a.cfg.listen); err != nil {
		return err
	}
	a.printf("embedded Iggy broker listening on %s (data in %s); interrupt to stop", a.addr, filepath.Join(a.dir, "broker"))
	<-ctx.Done()
	return nil
}

// connect connects to the broker (-iggy, or the embedded one) and makes
// sure both topics exist.
func (a *app) connect(ctx context.Context) error {
	if a.addr == "" {
		a.addr = a.cfg.iggy
	}
	proto, err := iggy.ParseProtocol(a.cfg.protocol)
	if err != nil {
		return err
	}
	opts := []iggy.Option{iggy.WithCredentials(a.cfg.user, a.cfg.password), iggy.WithLogger(a.log), iggy.WithProtocol(proto)}
	if a.cfg.role == "processor" || a.cfg.role == "" {
		// Its sinks' sessions, kept next to its store: after a kill the
		// next run waits for them to be gone before it checks what was
		// sent (protocol 0.8's window, docs/design.md §2).
		opts = append(opts, iggy.WithSessionLogDir(filepath.Join(a.dir, a.cfg.stateDir()+"-sessions")))
	}
	cl, err := iggy.Connect(ctx, a.addr, opts...)
	if err != nil {
		return err
	}
	a.log.Info("connected to Iggy", "addr", a.addr, "protocol", cl.Protocol())
	a.cl = cl
	if err := cl.EnsureTopic(ctx, a.cfg.stream, a.cfg.topic, a.cfg.partitions); err != nil {
		return err
	}
	return cl.EnsureTopic(ctx, a.cfg.stream, a.cfg.dlq, a.cfg.dlqPartitions)
}

// openApp opens the App of the accounts topology over the Iggy client,
// with its state under the data directory and dead letters published to
// the dead-letter topic.
func (a *app) openApp(ctx context.Context) error {
	dur := topology.Sync
	if a.cfg.nosync {
		dur = topology.NoSync
	}
	topo, balances := bank.NewTopology(a.ev, a.cfg.source())
	a.balances = balances
	var conn connector.Connector = a.cl
	if a.wrapDLQ != nil {
		conn = wrappedConnector{a.cl, a.wrapDLQ}
	}
	tel, err := a.telemetry()
	if err != nil {
		return err
	}
	opts := append(tel.options(), topology.WithDurability(dur), topology.WithLogger(a.log),
		topology.WithDeadLetterTopic(a.cfg.stream+"/"+a.cfg.dlq))
	if a.cfg.group {
		opts = append(opts, a.groupOptions()...)
	}
	opts = append(opts, a.openOpts...)
	app, err := topology.Open(ctx, topo, conn, filepath.Join(a.dir, a.cfg.stateDir()), opts...)
	if err != nil {
		return err
	}
	a.app = app
	return nil
}

// wrappedConnector wraps the sinks it opens (a test hides the SentChecker
// of the dead-letter sink to show that the crash test catches duplicates).
type wrappedConnector struct {
	connector.Connector
	wrap func(connector.Sink) connector.Sink
}

func (c wrappedConnector) OpenSink(ctx context.Context, topic string, partitions uint32) (connector.Sink, error) {
	s, err := c.Connector.OpenSink(ctx, topic, partitions)
	if err != nil {
		return nil, err
	}
	return c.wrap(s), nil
}

// startProcessor runs the processor until stop is called; done yields
// Run's result once. stop returns that result too, whether or not done was
// read: it waits for Run's end, not for the channel (reading both would
// hang, issue 27).
func (a *app) startProcessor(ctx context.Context) (stop func() error, done <-chan error) {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ch := make(chan error, 1)
	fin := make(chan struct{})
	var result error
	go func() {
		result = a.app.Run(pctx)
		ch <- result
		close(fin)
	}()
	return func() error {
		cancel()
		<-fin
		return result
	}, ch
}

// endOffsets returns, per partition of the events topic, the offset after
// its last record.
func (a *app) endOffsets(ctx context.Context) ([]uint64, error) {
	return a.cl.EndOffsets(ctx, a.cfg.stream, a.cfg.topic)
}

// committed returns the committed checkpoints of all partitions, and their
// sum.
func (a *app) committed() ([]uint64, uint64, error) {
	next := make([]uint64, a.cfg.partitions)
	var sum uint64
	for p := range next {
		n, _, err := a.app.Checkpoint(a.cfg.source(), uint32(p))
		if err != nil {
			return nil, 0, err
		}
		next[p] = n
		sum += n
	}
	return next, sum, nil
}

// waitCaughtUp waits until the App has caught up with the log as it is
// now (App.WaitCaughtUp: every partition committed up to its end, no dead
// letter waiting for publication), the processor fails, or ctx ends.
func (a *app) waitCaughtUp(ctx context.Context, procDone <-chan error) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	caught := make(chan error, 1)
	go func() { caught <- a.app.WaitCaughtUp(wctx) }()
	select {
	case err := <-caught:
		if err == nil {
			return nil
		}
		// The wait can fail because the processor did (its partition's
		// failure ends the App): report that failure, as below, when the
		// processor has stopped.
		// A loaded machine may take seconds to stop it: the bound is
		// for a wait that failed on its own, not a race.
		select {
		case perr := <-procDone:
			return fmt.Errorf("processor stopped before it caught up: %w", perr)
		case <-ctx.Done():
			return err
		case <-time.After(30 * time.Second):
			return err
		}
	case err := <-procDone:
		cancel()
		<-caught
		return fmt.Errorf("processor stopped before it caught up: %w", err)
	}
}

// progress reports published, processed, lag and rate every interval until
// ctx ends. published returns the records accepted by the broker, or -1
// when this process does not publish (then the broker's end offsets, as
// the App last saw them, stand for it). The lag is the App's own figure
// (stream.Stats.Lag: end offset minus checkpoint, summed over the
// partitions), the same one its strand.lag metric exports. It tracks the
// largest lag seen.
// maxLag is written by the reporting goroutine and read by the run after
// it cancelled that goroutine, possibly before it returned: hence atomic.
type progress struct {
	maxLag atomic.Int64
}

func (a *app) reportProgress(ctx context.Context, pr *progress, published func() int64) {
	if a.cfg.progress <= 0 {
		return
	}
	t := time.NewTicker(a.cfg.progress)
	defer t.Stop()
	_, last, _ := a.committed()
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, sum, err := a.committed()
		if err != nil {
			return
		}
		now := time.Now()
		rate := float64(sum-last) / now.Sub(lastAt).Seconds()
		last, lastAt = sum, now
		st := a.app.Stats()[0]
		pub := published()
		if pub < 0 {
			pub = 0
			for _, ps := range st.Partitions {
				pub += int64(ps.End)
			}
		}
		lag := int64(st.Lag())
		if lag > pr.maxLag.Load() {
			pr.maxLag.Store(lag)
		}
		a.log.Info("progress",
			"published", pub, "processed", sum, "lag", lag, "rate", fmt.Sprintf("%.0f/s", rate),
			"dead_letters", st.Total.DeadLettered, "parked_keys", st.ParkedKeys)
	}
}

func (a *app) newProducer(ctx context.Context) (*producer, error) {
	pub, err := iggy.NewPublisher(ctx, a.cl, a.cfg.stream, a.cfg.topic)
	if err != nil {
		return nil, err
	}
	raw, err := iggy.NewSink(ctx, a.cl, a.cfg.stream, a.cfg.topic)
	if err != nil {
		_ = pub.Close(ctx)
		return nil, err
	}
	p := &producer{pub: pub, raw: raw, ev: a.ev, w: a.cfg.workload(), poison: a.cfg.poison, rate: a.cfg.rate,
		disorder: a.cfg.disorder, duplicates: a.cfg.duplicates, seed: a.cfg.seed}
	if a.cfg.trace {
		tel, err := a.telemetry()
		if err != nil {
			_ = pub.Close(ctx)
			_ = raw.Close(ctx)
			return nil, err
		}
		p.tracer = tel.tp.Tracer("github.com/strand-io/strand/examples/accounts")
	}
	return p, nil
}

func (p *producer) close(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = p.pub.Close(cctx)
	_ = p.raw.Close(cctx)
}

func (a *app) runProducer(ctx context.Context) error {
	if err := a.connect(ctx); err != nil {
		return err
	}
	p, err := a.newProducer(ctx)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	start := time.Now()
	err = p.run(ctx)
	d := time.Since(start)
	a.printf("published %s events and %s poison records to %s in %v (%s events/s)",
		commas(p.published.Load()), commas(p.poisoned.Load()), a.cfg.source(), d.Round(time.Millisecond), commas(int64(perSecond(p.published.Load(), d))))
	return err
}

func (a *app) runProcessor(ctx context.Context) error {
	if err := a.connect(ctx); err != nil {
		return err
	}
	if err := a.listenHTTP(); err != nil {
		return err
	}
	defer a.closeListener()
	if err := a.openApp(ctx); err != nil {
		return err
	}
	var ends []uint64
	var err error
	if a.cfg.drain {
		if ends, err = a.endOffsets(ctx); err != nil {
			return err
		}
	}
	stopHTTP, err := a.serveHTTP()
	if err != nil {
		return err
	}
	defer stopHTTP()
	stop, done := a.startProcessor(ctx)
	if a.cfg.group {
		a.log.Info(readyLine, "source", a.cfg.source(), "store", filepath.Join(a.dir, a.cfg.stateDir()),
			"instance", a.cfg.instance, "query_addr", a.httpAddr, "session_timeout", a.cfg.sessionTimeout)
	} else {
		a.log.Info(readyLine, "source", a.cfg.source(), "store", filepath.Join(a.dir, a.cfg.stateDir()))
	}
	pctx, cancelProgress := context.WithCancel(ctx)
	if a.cfg.group {
		go a.reportGroupProgress(pctx)
	} else {
		go a.reportProgress(pctx, &progress{}, func() int64 { return -1 })
	}
	defer cancelProgress()
	if a.cfg.drain {
		if err := a.waitCaughtUp(ctx, done); err != nil {
			_ = stop()
			return err
		}
		a.log.Info("caught up", "records", sum(ends))
		return stop()
	}
	select {
	case <-ctx.Done():
	case err := <-done:
		return err
	}
	return stop()
}

func (a *app) runCheck(ctx context.Context) (report, error) {
	var rep report
	if err := a.connect(ctx); err != nil {
		return rep, err
	}
	if err := a.openApp(ctx); err != nil {
		return rep, err
	}
	ends, err := a.endOffsets(ctx)
	if err != nil {
		return rep, err
	}
	next, _, err := a.committed()
	if err != nil {
		return rep, err
	}
	for p := range ends {
		if next[p] != ends[p] {
			return rep, fmt.Errorf("the store is not caught up: partition %d is committed up to offset %d, the log ends at %d; run the processor with -drain first", p, next[p], ends[p])
		}
	}
	if err := a.check(ctx, ends, &rep); err != nil {
		return rep, err
	}
	a.printCheck(rep)
	return rep, a.verdict(rep)
}

func (a *app) runAll(ctx context.Context) (rep report, err error) {
	if a.cfg.iggy == "" {
		if err := a.startBroker("127.0.0.1:0"); err != nil {
			return rep, err
		}
	}
	if err := a.connect(ctx); err != nil {
		return rep, err
	}
	if err := a.listenHTTP(); err != nil {
		return rep, err
	}
	defer a.closeListener()
	if err := a.openApp(ctx); err != nil {
		return rep, err
	}
	ends0, err := a.endOffsets(ctx)
	if err != nil {
		return rep, err
	}
	base := int64(sum(ends0)) // records already in the topic (a reused -data)
	_, committed0, err := a.committed()
	if err != nil {
		return rep, err
	}
	prod, err := a.newProducer(ctx)
	if err != nil {
		return rep, err
	}
	defer prod.close(ctx)
	stopHTTP, err := a.serveHTTP()
	if err != nil {
		return rep, err
	}
	defer stopHTTP()

	if a.cfg.events > 0 {
		def := ""
		if a.cfg.events == bank.DefaultWorkload.Events {
			def = " (the default; -events N for more or fewer)"
		}
		a.printf("publishing %s events%s of %s accounts (Zipf skew %g, seed %d, %s codec) and %d poison records to %s on %s, %d partitions",
			commas(int64(a.cfg.events)), def, commas(int64(a.cfg.accounts)), a.cfg.skew, a.cfg.seed, a.cfg.codec, a.cfg.poison, a.cfg.source(), a.addr, a.cfg.partitions)
	} else {
		a.printf("publishing events until interrupted to %s on %s", a.cfg.source(), a.addr)
	}
	start := time.Now()
	pctx, cancelProgress := context.WithCancel(ctx)
	defer cancelProgress()
	pr := &progress{}
	go a.reportProgress(pctx, pr, func() int64 { return base + prod.sent() })
	prodCtx, cancelProd := context.WithCancel(ctx)
	prodDone := make(chan error, 1)
	go func() { prodDone <- prod.run(prodCtx) }()
	prodRunning := true
	defer func() {
		cancelProd()
		if prodRunning {
			<-prodDone
		}
	}()

	// The processor runs while the producer publishes, or, with -backlog,
	// starts once everything is published (to measure it alone).
	procStart := start
	stop, procDone := func() error { return nil }, (<-chan error)(nil)
	if !a.cfg.backlog {
		stop, procDone = a.startProcessor(ctx)
	}
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	select {
	case err := <-prodDone:
		prodRunning = false
		if err != nil {
			return rep, err
		}
	case err := <-procDone:
		return rep, fmt.Errorf("processor stopped: %w", err)
	}
	rep.Published, rep.Poison, rep.PublishTime = prod.published.Load(), prod.poisoned.Load(), time.Since(start)
	rep.Displaced, rep.Duplicated = prod.displaced.Load(), prod.duplicated.Load()
	if ctx.Err() != nil {
		// Interrupted: the processor stops gracefully (deferred stop).
		_, done, _ := a.committed()
		a.printf("interrupted: published %s events and %s poison records; %s records committed (no check: the run was not finished)",
			commas(rep.Published), commas(rep.Poison), commas(int64(done-committed0)))
		return rep, nil
	}
	if a.cfg.backlog {
		a.printf("published %s events; now processing the backlog", commas(rep.Published))
		procStart = time.Now()
		stop, procDone = a.startProcessor(ctx)
	}
	ends, err := a.endOffsets(ctx)
	if err != nil {
		return rep, err
	}
	if err := a.waitCaughtUp(ctx, procDone); err != nil {
		return rep, err
	}
	rep.ProcessTime = time.Since(procStart)
	rep.Records = sum(ends) - committed0
	cancelProgress()
	rep.MaxLag = pr.maxLag.Load()
	if a.caughtUp != nil {
		a.caughtUp(a)
	}
	if a.cfg.resequence {
		st := a.app.Stats()[0]
		rep.Reseq = st.Total
		for _, ps := range st.Partitions {
			rep.HeldNow += ps.HeldRecords
		}
	}
	if err := a.check(ctx, ends, &rep); err != nil {
		return rep, err
	}
	a.summary(rep)
	if err := a.verdict(rep); err != nil {
		return rep, err
	}
	if a.cfg.serve && a.httpAddr != "" {
		a.printf("serving http://%s until interrupted", a.httpAddr)
		<-ctx.Done()
	}
	return rep, nil
}

// reference reads the events topic back from the broker up to ends and
// folds it sequentially.
func (a *app) reference(ctx context.Context, ends []uint64) (*bank.Reference, error) {
	src, err := iggy.NewSource(a.cl, a.cfg.stream, a.cfg.topic, iggy.WithConsumer("strand-accounts-check"))
	if err != nil {
		return nil, err
	}
	ref := bank.NewReference(a.ev)
	for p, end := range ends {
		err := bank.ReadLog(ctx, src, uint32(p), end, func(rec connector.Record) error {
			_ = ref.ApplyRecord(rec)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("check: read the log back: %w", err)
		}
	}
	return ref, nil
}

// check reads the events topic back from the broker, folds it
// sequentially, compares every balance, and compares the dead-letter topic
// with the poison records found in the log.
func (a *app) check(ctx context.Context, ends []uint64, rep *report) error {
	ref, err := a.reference(ctx, ends)
	if err != nil {
		return err
	}
	if rep.Check, err = ref.Compare(ctx, a.balances); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	rep.RefDuplicates, rep.RefHeld = ref.Duplicates(), ref.Held()
	dls, err := a.deadLetters(ctx)
	if err != nil {
		return fmt.Errorf("check: read the dead-letter topic back: %w", err)
	}
	rep.DeadLetters = len(dls.origins)
	rep.DLQErr = errors.Join(bank.CheckDeadLetters(ref.Poison(), dls.origins), dls.repeatedIDs())
	return nil
}

// deadLetters reads the whole dead-letter topic and returns the origins
// and message ids of the dead letters of this program's source.
func (a *app) deadLetters(ctx context.Context) (deadLetterSet, error) {
	var out deadLetterSet
	for p := range a.cfg.dlqPartitions {
		msgs, err := a.cl.Tail(ctx, a.cfg.stream, a.cfg.dlq, p, math.MaxInt32)
		if err != nil {
			return out, err
		}
		for _, m := range msgs {
			var src, part, off string
			for _, h := range m.Headers {
				switch h.Name {
				case deadletter.HeaderSource:
					src = string(h.Value)
				case deadletter.HeaderPartition:
					part = string(h.Value)
				case deadletter.HeaderOffset:
					off = string(h.Value)
				}
			}
			if src != a.cfg.source() {
				continue
			}
			pn, err1 := strconv.ParseUint(part, 10, 32)
			on, err2 := strconv.ParseUint(off, 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return out, fmt.Errorf("dead letter at %s/%s partition %d offset %d has bad origin headers: %w", a.cfg.stream, a.cfg.dlq, p, m.Offset, err)
			}
			out.origins = append(out.origins, bank.Origin{Partition: uint32(pn), Offset: on})
			out.ids = append(out.ids, m.ID)
		}
	}
	return out, nil
}

func (a *app) summary(rep report) {
	a.printf("published %s events and %s poison records in %v: %s events/s",
		commas(rep.Published), commas(rep.Poison), rep.PublishTime.Round(time.Millisecond), commas(int64(perSecond(rep.Published, rep.PublishTime))))
	lag := "lag now 0"
	if a.cfg.progress > 0 {
		lag += fmt.Sprintf(", at most %s when sampled every %v", commas(rep.MaxLag), a.cfg.progress)
	}
	how := "end to end, publishing and processing at once"
	switch {
	case a.cfg.backlog:
		how = "the processor alone, on a backlog"
	case a.cfg.instances > 1:
		how = fmt.Sprintf("end to end, by a group of %d instances", a.cfg.instances)
		if a.cfg.killAfter > 0 {
			how += " (one killed on the way)"
		}
	}
	a.printf("processed %s records in %v, %s: %s records/s (exactly-once, %s commits, %s codec, %d partitions); %s",
		commas(int64(rep.Records)), rep.ProcessTime.Round(time.Millisecond), how, commas(int64(perSecond(int64(rep.Records), rep.ProcessTime))),
		map[bool]string{true: "unsynced", false: "synced"}[a.cfg.nosync], a.cfg.codec, a.cfg.partitions, lag)
	if a.cfg.resequence {
		a.printf("re-sequencer: %s events published up to %d late and %s duplicate copies; %s held and released in sequence order, %s duplicates never applied (reference: %s), %d still held (reference: %d)",
			commas(rep.Displaced), maxDisplace, commas(rep.Duplicated), commas(int64(rep.Reseq.Resequenced)), commas(int64(rep.Reseq.Duplicates)),
			commas(int64(rep.RefDuplicates)), rep.HeldNow, rep.RefHeld)
	}
	a.printCheck(rep)
}

func (a *app) printCheck(rep report) {
	if cl := rep.Changelog; cl != nil {
		verdict := "valid commits contiguous across owners, epochs rising: ok"
		if err := cl.err(); err != nil {
			verdict = "WRONG: " + err.Error()
		}
		a.printf("changelog: %d partitions, %s commits (%s fenced, %s duplicates), %d snapshot records, %d ownership changes among %d members: %s",
			cl.Partitions, commas(int64(cl.Commits)), commas(int64(cl.Fenced)), commas(int64(cl.Duplicates)), cl.Snapshots, cl.OwnershipChanges, cl.Members, verdict)
	}
	if q := rep.Query; q != nil {
		a.printf("queries: %s accounts asked of the query server at %s, %s answered by their owners (forwarded), %s retried (partition restoring or changing hands)",
			commas(q.Gets), q.Via, commas(q.Forwarded), commas(q.Retried))
	}
	if rep.DLQErr == nil {
		a.printf("dead letters: %d in %s/%s, every poison record exactly once: ok", rep.DeadLetters, a.cfg.stream, a.cfg.dlq)
	} else {
		a.printf("dead letters: %d in %s/%s: WRONG: %v", rep.DeadLetters, a.cfg.stream, a.cfg.dlq, rep.DLQErr)
	}
	if rep.Check.OK() {
		a.printf("check: %s accounts, %s events read back from the log: every balance equals the sequential reference: ok",
			commas(int64(rep.Check.Accounts)), commas(int64(rep.Check.Events)))
	} else {
		a.printf("check: WRONG: %v", rep.Check.Err())
	}
}

// verdict returns an error when the check or the dead letters are wrong.
func (a *app) verdict(rep report) error {
	return errors.Join(rep.Check.Err(), rep.DLQErr, rep.Changelog.err())
}

func sum(xs []uint64) uint64 {
	var s uint64
	for _, x := range xs {
		s += x
	}
	return s
}

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// telemetry returns the run's telemetry, set up on first use.
func (a *app) telemetry() (*telemetry, error) {
	if a.tel == nil {
		tel, err := newTelemetry(a.out, a.cfg.trace)
		if err != nil {
			return nil, err
		}
		a.tel = tel
	}
	return a.tel, nil
}
