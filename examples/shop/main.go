// Command shop is strand's two-stage example: order lines keyed by order
// are projected into an "orders" read model, re-keyed by customer with
// topology.KeyBy into a "customers" read model, joined there with the
// customers' profiles (shop/customer-profiles) and sent on with
// topology.ToJoin into an "enriched-orders" read model (a foreign-key
// join), and turned into receipts that topology.To publishes to a topic,
// all exactly once. With no flags it needs nothing installed:
//
//	go run ./examples/shop
//
// starts an embedded Iggy broker (connectors/iggy/iggytest) in a fresh
// temporary directory, publishes 100,000 order lines of 5,000 orders and
// 500 customers to shop/orders (4 partitions), runs the topology until it
// has caught up (KeyBy's repartition topic shop/shop-by-customer-repartition
// included), and checks both tables, the receipts topic and the
// repartition topic against a sequential fold of the workload: every row
// exact, every receipt and every forwarded line exactly once. It exits with
// status 1 if anything is wrong.
//
// Roles (-role) split the program over processes, as its crash test does:
//
//	all        broker (unless -iggy), producer, processor, check (default)
//	producer   publish the workload to -iggy, then exit
//	processor  process -iggy into the store under -data; with -drain, exit
//	           once caught up, else run until interrupted
//	check      compare the store under -data and the topics of -iggy with
//	           the workload
//
// The domain (events, topology, workload, reference) is package orders,
// next to this file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/examples/shop/orders"
	"github.com/strand-io/strand/stream/topology"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

type config struct {
	extra                    []topology.OpenOption // not a flag: options run gives the processor
	role                     string
	iggy, user, password     string
	protocol                 string
	data                     string
	events, orders, customer int
	partitions               uint32
	seed                     uint64
	drain                    bool
	single, noReceipts       bool
	cpuprofile, memprofile   string
	trace                    string
	progress                 time.Duration
	pollLinger               time.Duration
	verbose                  bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("shop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.role, "role", "all", "all, producer, processor or check")
	fs.StringVar(&c.iggy, "iggy", "", "Iggy server address (host:port); empty: an embedded broker (role all only)")
	fs.StringVar(&c.protocol, "protocol", os.Getenv("STRAND_IGGY_PROTOCOL"), "Iggy protocol: 0.10, 0.8 or auto (detect; default $STRAND_IGGY_PROTOCOL, else auto)")
	fs.StringVar(&c.user, "user", "iggy", "Iggy user")
	fs.StringVar(&c.password, "password", "iggy", "Iggy password")
	fs.StringVar(&c.data, "data", "", "state directory of the processor; empty: a temporary one (role all only)")
	fs.IntVar(&c.events, "events", 100_000, "order lines to publish")
	fs.IntVar(&c.orders, "orders", 5_000, "orders")
	fs.IntVar(&c.customer, "customers", 500, "customers")
	var parts uint
	fs.UintVar(&parts, "partitions", 4, "partitions of shop/orders")
	fs.Uint64Var(&c.seed, "seed", 1, "workload seed")
	fs.BoolVar(&c.drain, "drain", false, "processor: exit once caught up")
	fs.BoolVar(&c.verbose, "v", false, "log strand's info lines")
	fs.DurationVar(&c.pollLinger, "poll-linger", 5*time.Millisecond, "processor: how long a reader that reached the end of a partition may wait for a fuller batch (iggy.WithPollLinger; 0..1s)")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile to this file: of the processing span (Run to caught up) with -drain or role all, else of the run")
	fs.StringVar(&c.memprofile, "memprofile", "", "write an allocation profile of the run to this file")
	fs.StringVar(&c.trace, "trace", "", "write an execution trace of the run to this file (go tool trace)")
	fs.DurationVar(&c.progress, "progress", 0, "print the processor's progress at this interval (0: never)")
	fs.BoolVar(&c.single, "single-stage", false, "run the orders table alone (no KeyBy, no To): the benchmark's baseline; skips the check")
	fs.BoolVar(&c.noReceipts, "no-receipts", false, "run the two stages without the receipts (no To): orders, and customers through KeyBy")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.partitions = uint32(parts)
	switch {
	case !slices.Contains([]string{"all", "producer", "processor", "check"}, c.role):
		return c, fmt.Errorf("-role %q: want all, producer, processor or check", c.role)
	case c.role != "all" && c.iggy == "":
		return c, fmt.Errorf("-role %s needs -iggy", c.role)
	case (c.role == "processor" || c.role == "check") && c.data == "":
		return c, fmt.Errorf("-role %s needs -data", c.role)
	case c.single && c.noReceipts:
		return c, errors.New("-single-stage and -no-receipts exclude each other")
	case c.events < 1 || c.orders < 1 || c.customer < 1 || c.partitions < 1:
		return c, errors.New("-events, -orders, -customers and -partitions must be at least 1")
	}
	return c, nil
}

// run runs the example with args; extra are further options of the
// processor's App (the crash tests' fault points, topology.WithFaults).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, extra ...topology.OpenOption) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg.extra = extra
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	defer iggy.RouteStdLog(log)()
	if cfg.cpuprofile != "" && !cfg.drain && cfg.role != "all" {
		stopProfile, err := startCPUProfile(cfg.cpuprofile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if cfg.memprofile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			f, err := os.Create(cfg.memprofile)
			if err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	if cfg.trace != "" {
		f, err := os.Create(cfg.trace)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if cfg.role == "all" {
		return runAll(ctx, cfg, log, stdout)
	}
	cl, err := connect(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cl.Close()
	switch cfg.role {
	case "producer":
		return produce(ctx, cfg, cl, stdout)
	case "processor":
		return process(ctx, cfg, cl, log, stdout)
	default:
		return check(ctx, cfg, cl, log, stdout)
	}
}

func runAll(ctx context.Context, cfg config, log *slog.Logger, stdout io.Writer) error {
	tmp, err := os.MkdirTemp("", "strand-shop-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if cfg.data == "" {
		cfg.data = tmp + "/state"
	}
	if cfg.iggy == "" {
		srv, err := iggytest.NewServer(iggytest.WithDataDir(tmp+"/broker"), iggytest.WithCredentials(cfg.user, cfg.password))
		if err != nil {
			return fmt.Errorf("start the embedded broker: %w", err)
		}
		defer srv.Close()
		cfg.iggy = srv.Addr()
		fmt.Fprintf(stdout, "embedded Iggy broker on %s\n", cfg.iggy)
	}
	cl, err := connect(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := produce(ctx, cfg, cl, stdout); err != nil {
		return err
	}
	cfg.drain = true
	if err := process(ctx, cfg, cl, log, stdout); err != nil {
		return err
	}
	if cfg.single {
		return nil
	}
	return check(ctx, cfg, cl, log, stdout)
}

// connect connects to the broker with the flags' settings.
func connect(ctx context.Context, cfg config, log *slog.Logger) (*iggy.Client, error) {
	proto, err := iggy.ParseProtocol(cfg.protocol)
	if err != nil {
		return nil, err
	}
	return iggy.Connect(ctx, cfg.iggy, iggy.WithCredentials(cfg.user, cfg.password), iggy.WithLogger(log),
		iggy.WithSourceOptions(iggy.WithPollLinger(cfg.pollLinger)), iggy.WithProtocol(proto))
}

// produce publishes the workload.
func produce(ctx context.Context, cfg config, cl *iggy.Client, stdout io.Writer) error {
	if err := ensureTopics(ctx, cfg, cl); err != nil {
		return err
	}
	// The customers' profiles first: a line whose customer has no profile
	// yet waits for it (orders.ErrNoProfile), and this keeps that rare.
	ppub, err := iggy.NewPublisher(ctx, cl, orders.Stream, orders.ProfilesTopic)
	if err != nil {
		return err
	}
	if err := iggy.PublishBatch(ctx, ppub, orders.Profiles, orders.CustomerProfiles(cfg.customer, cfg.seed)); err != nil {
		_ = ppub.Close(ctx)
		return err
	}
	if err := ppub.Close(ctx); err != nil {
		return err
	}
	pub, err := iggy.NewPublisher(ctx, cl, orders.Stream, orders.Topic)
	if err != nil {
		return err
	}
	lines := orders.Workload(cfg.events, cfg.orders, cfg.customer, cfg.seed)
	start := time.Now()
	if err := iggy.PublishBatch(ctx, pub, orders.Lines, lines); err != nil {
		_ = pub.Close(ctx)
		return err
	}
	if err := pub.Close(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published %d order lines in %v\n", len(lines), time.Since(start).Round(time.Millisecond))
	return nil
}

// ensureTopics creates the topics the producer writes and the processor
// reads (the orders, the customers' profiles, and the enriched lines the
// topology publishes and reads back), if missing.
func ensureTopics(ctx context.Context, cfg config, cl *iggy.Client) error {
	for _, topic := range []string{orders.Topic, orders.ProfilesTopic, orders.EnrichedTopic} {
		if err := cl.EnsureTopic(ctx, orders.Stream, topic, cfg.partitions); err != nil {
			return err
		}
	}
	return nil
}

// readyLine is printed once the processor runs (the crash test waits for
// it).
const readyLine = "processor running"

// process runs the topology until ctx is done or, with -drain, until it has
// caught up.
func process(ctx context.Context, cfg config, cl *iggy.Client, log *slog.Logger, stdout io.Writer) error {
	shop := shopTopology(cfg)
	if err := ensureTopics(ctx, cfg, cl); err != nil {
		return err
	}
	app, err := topology.Open(ctx, shop.Topology, cl, cfg.data, append([]topology.OpenOption{topology.WithLogger(log),
		topology.WithDeadLetterTopic(orders.Stream + "/" + orders.DLQTopic)}, cfg.extra...)...)
	if err != nil {
		return err
	}
	defer app.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	if cfg.cpuprofile != "" && cfg.drain {
		stopProfile, err := startCPUProfile(cfg.cpuprofile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	start, cpu0 := time.Now(), cpuTime()
	go func() { done <- app.Run(runCtx) }()
	fmt.Fprintln(stdout, readyLine)
	if cfg.progress > 0 {
		go func() {
			tick := time.NewTicker(cfg.progress)
			defer tick.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
				}
				line := fmt.Sprintf("%6.1fs", time.Since(start).Seconds())
				for _, st := range app.Stats() {
					pending := 0
					for _, ps := range st.Partitions {
						pending += ps.OutboxPending
					}
					line += fmt.Sprintf("  %s: %d applied, lag %d, outbox %d", st.Source, st.Total.Applied, st.Lag(), pending)
				}
				fmt.Fprintln(stdout, line)
			}
		}()
	}
	if cfg.drain {
		select {
		case err := <-done:
			return fmt.Errorf("processor stopped: %w", err)
		case <-ctx.Done():
		default:
			if err := app.WaitCaughtUp(ctx); err != nil {
				return err
			}
			var applied uint64
			batches := ""
			for _, st := range app.Stats() {
				applied += st.Total.Applied
				batches += fmt.Sprintf(" %s %d,", st.Source, st.Total.Batches)
			}
			el := time.Since(start)
			if cfg.cpuprofile != "" {
				pprof.StopCPUProfile()
			}
			fmt.Fprintf(stdout, "caught up in %v: %d records applied over both stages (%.0f/s), %v of CPU\n",
				el.Round(time.Millisecond), applied, float64(applied)/el.Seconds(), (cpuTime() - cpu0).Round(time.Millisecond))
			fmt.Fprintf(stdout, "batches:%s\n", strings.TrimSuffix(batches, ","))
		}
		stop()
	}
	if err := <-done; err != nil {
		return err
	}
	return app.Close()
}

// shopTopology returns the topology the flags ask for.
func shopTopology(cfg config) *orders.Shop {
	switch {
	case cfg.single:
		return orders.NewSingleStage(orders.Stream)
	case cfg.noReceipts:
		return orders.NewWithoutReceipts(orders.Stream)
	}
	return orders.NewTopology(orders.Stream)
}

// startCPUProfile starts a CPU profile written to path; the returned func
// stops it and closes the file (calling it after pprof.StopCPUProfile is
// harmless).
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
