// Command benchmarks runs strand's benchmark scenarios and prints each
// figure next to the naive baseline measured in the same run:
//
//	go run ./benchmarks -scenario core|e2e|latency|restart|scale|scaleout|all [-events N] [-quick]
//
// core runs the accounts workload (issue 5) through stream.Task per
// partition without a broker, and through a naive consumer (per-event
// Pebble Get+Set, commit per batch), with the binary and the JSON codec. e2e
// runs it through the embedded Iggy broker with producer and processor in
// one process, against a naive consumer polling the broker (issue 6).
// latency paces the producer at a share of the measured e2e peak and
// reports publish-to-queryable percentiles. restart reopens a store holding
// 1,000,000 keys and times the first committed batch. scale (issue 17, not
// part of all) runs the core workload with 10k, 100k and 1M keys touched
// (-scale-keys, -scale-10m) at two skews, with the input held off the Go
// heap so that the processing's own memory can be told apart. scaleout
// (issue 14, not part of all; benchmarks/scaleout-bench.sh runs it in full)
// measures a group of instances: restore time of a partition by a new owner
// against state size and history, the rebalance pause after a SIGKILL, the
// throughput of 1, 2 and 3 instance processes and the query server's
// latency for local and forwarded gets.
//
// Each measurement runs in its own child process (this binary, re-executed),
// so its peak resident memory (rusage maxrss) is its own. benchmarks/run.sh
// runs everything at the issues' sizes; RESULTS.md holds the current figures,
// HISTORY.md every round measured, README.md the scenarios (the registry
// in registry.go).
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/scenario"
	"github.com/strand-io/strand/benchmarks/internal/sysstat"
	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
)

// config is the command line.
type config struct {
	scenario      string
	list          bool
	record        string
	events        int
	accounts      int
	skew          float64
	partitions    int
	batch         int
	codecs        string
	quick         bool
	dir           string
	cpuprofile    string
	inProcess     bool
	serveBroker   bool
	child         string
	broker        string
	latencyShares string
	latencyRate   float64
	latencyFor    time.Duration
	restartKeys   int
	naiveWorkers  int
	jsonOut       string
	reps          int
	workers       int
	pubConns      int
	latencyTrace  string
	latencyTick   time.Duration
	idleMax       time.Duration
	scaleKeys     string
	scaleSkews    string
	scalePerKey   int
	scale10M      bool
	scaleVariants string
	memprofile    string
	scaleTimeline string
	valueCacheMiB int64

	scaleoutParts     string
	scaleoutKeys      string
	scaleoutHistory   string
	scaleoutSnapEvery int
	scaleoutSessions  string
	scaleoutPauseN    int
	scaleoutRate      float64
	scaleoutBase      int
	scaleoutInstances string
	scaleoutQueries   int
	scaleoutClients   string
	scaleoutRouter    string
	scaleoutLogs      string
	scaleoutInstance  string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("benchmarks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.scenario, "scenario", "all", "scenarios to run, comma-separated ("+scenarioNames()+"), or all (-list says what each measures)")
	fs.BoolVar(&c.list, "list", false, "list the scenarios, what each measures and against what, and exit")
	fs.StringVar(&c.record, "record", "", "also write each scenario's results as JSON to this directory (benchmarks/results: one file per scenario and run)")
	fs.IntVar(&c.events, "events", 1_000_000, "events per run")
	fs.IntVar(&c.accounts, "accounts", 10_000, "accounts (keys)")
	fs.Float64Var(&c.skew, "skew", 1.1, "Zipf exponent of the account chosen per event (> 1)")
	fs.IntVar(&c.partitions, "partitions", 8, "partitions")
	fs.IntVar(&c.batch, "batch", 5000, "records per partition batch (core) and per poll (e2e)")
	fs.StringVar(&c.codecs, "codecs", "binary,json", "payload codecs for the core scenario (e2e and latency use the first)")
	fs.BoolVar(&c.quick, "quick", false, "small sizes (100,000 events, 100,000 restart keys, 5 s latency run) for a smoke run")
	fs.StringVar(&c.dir, "dir", "", "parent directory for stores and broker data (default: the system temp dir)")
	fs.StringVar(&c.memprofile, "memprofile", "", "scale scenario: write a heap profile after each measured section to PREFIX-<scenario>-<variant>-<codec>.pprof")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of each measured section to PREFIX-<scenario>-<variant>-<codec>.pprof")
	fs.BoolVar(&c.inProcess, "inprocess", false, "run every measurement in this process (peak RSS is then cumulative)")
	fs.StringVar(&c.child, "child", "", "internal: run one measurement (scenario/variant/codec) and print it as JSON")
	fs.StringVar(&c.broker, "broker", "memory", "embedded broker for e2e and latency: memory or disk (in this process), or process (in memory, in a process of its own)")
	fs.BoolVar(&c.serveBroker, scenario.ServeBrokerFlag, false, "internal: serve the embedded broker for -broker process (prints its address, stops when stdin closes)")
	fs.StringVar(&c.latencyShares, "latency-share", "0.5", "latency scenario: producer rate(s) as share(s) of the e2e peak, comma-separated (e.g. 0.25,0.5)")
	fs.Float64Var(&c.latencyRate, "latency-rate", 0, "latency scenario: producer rate in events/s (default: latency-share × the e2e peak, measured first if needed)")
	fs.DurationVar(&c.latencyFor, "latency-duration", 20*time.Second, "latency scenario: how long the paced producer runs")
	fs.IntVar(&c.restartKeys, "restart-keys", 1_000_000, "restart scenario: keys of state in the reopened store")
	fs.IntVar(&c.naiveWorkers, "naive-workers", 8, "core scenario: also run the naive consumer with this many partition goroutines (0 or 1: only the sequential one)")
	fs.StringVar(&c.jsonOut, "json", "", "also write all results as JSON lines to this file")
	fs.IntVar(&c.workers, "workers", 0, "keys run at once per partition (topology.WithWorkers; 0: GOMAXPROCS)")
	fs.IntVar(&c.pubConns, "pub-conns", 1, "e2e and latency: the producer's connections to the broker")
	fs.StringVar(&c.latencyTrace, "latency-trace", "", "latency scenario: write one CSV line per commit (time, partition, events, worst latency) to PREFIX-<rate>.csv")
	fs.DurationVar(&c.idleMax, "poll-idle-max", 0, "e2e and latency: the processor's readers wait at most this long before polling an empty partition again (iggy.WithIdleBackoff from 1ms; 0: the connector's default, 50ms)")
	fs.DurationVar(&c.latencyTick, "latency-tick", 5*time.Millisecond, "latency scenario: the producer sends what came due at most once per tick (its linger time)")
	fs.StringVar(&c.scaleKeys, "scale-keys", "10000,100000,1000000", "scale scenario: keys touched per run, comma-separated")
	fs.StringVar(&c.scaleSkews, "scale-skews", "1.1,1.01", "scale scenario: Zipf exponents (> 1; 1.01 stands for ~1.0), comma-separated")
	fs.IntVar(&c.scalePerKey, "scale-per-key", 3, "scale scenario: events per key touched (a run has max(-events, this × keys) events)")
	fs.BoolVar(&c.scale10M, "scale-10m", false, "scale scenario: also run 10,000,000 keys (30M events by default: minutes, several GiB)")
	fs.StringVar(&c.scaleVariants, "scale-variants", "naive,strand,input", "scale scenario: which of naive, strand, input to run (e.g. strand alone to profile it)")
	fs.StringVar(&c.scaleTimeline, "scale-timeline", "", "scale scenario: write the strand run's samples (one a second: events, RSS, Go heap, store size, compaction debt, stalls) to PREFIX-<size>-<codec>.csv")
	fs.Int64Var(&c.valueCacheMiB, "scale-value-cache", 0, "scale scenario: strand's value cache budget in MiB (0: the default, 64)")
	fs.IntVar(&c.reps, "reps", 1, "run every measurement this many times (interleaved with its baseline) and report the median")
	fs.StringVar(&c.scaleoutParts, "scaleout-parts", strings.Join(scenario.ScaleoutParts, ","), "scaleout scenario: which of restore, pause, throughput, query to run")
	fs.StringVar(&c.scaleoutKeys, "scaleout-keys", "100000,1000000", "scaleout restore: keys (accounts) of the one partition, comma-separated")
	fs.StringVar(&c.scaleoutHistory, "scaleout-history", "1,2,4", "scaleout restore: events per key (1: one open each; h: h-1 updates per key more), comma-separated")
	fs.IntVar(&c.scaleoutSnapEvery, "scaleout-snapshot-every", 20, "scaleout restore: commits between snapshots (topology.WithSnapshotEvery) of the snapshot variant")
	fs.StringVar(&c.scaleoutSessions, "scaleout-sessions", "2s", "scaleout pause: session timeouts of the group (iggy.WithSessionTimeout), comma-separated")
	fs.IntVar(&c.scaleoutPauseN, "scaleout-pause-instances", 3, "scaleout pause: instance processes (one is killed)")
	fs.Float64Var(&c.scaleoutRate, "scaleout-rate", 20000, "scaleout pause: producer rate in events/s while an instance is killed")
	fs.IntVar(&c.scaleoutBase, "scaleout-base", 100000, "scaleout pause and query: events published and processed before the measurement (over -accounts, -partitions)")
	fs.StringVar(&c.scaleoutInstances, "scaleout-instances", "1,2,3", "scaleout throughput: instance counts, comma-separated (-events events; one instance outside any group is the extra baseline)")
	fs.IntVar(&c.scaleoutQueries, "scaleout-queries", 20000, "scaleout query: gets of each kind (local, forwarded)")
	fs.StringVar(&c.scaleoutClients, "scaleout-clients", "1,4", "scaleout query: concurrent clients, comma-separated")
	fs.StringVar(&c.scaleoutRouter, "scaleout-router", "own", "scaleout: the instances' query router: own (over the group's membership) or default (the query server's)")
	fs.StringVar(&c.scaleoutLogs, "scaleout-logs", "", "scaleout: write every instance's log to this directory")
	fs.StringVar(&c.scaleoutInstance, scenario.InstanceFlag, "", "internal: run one instance process of the scaleout scenario (JSON config)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["events"] {
			c.events = 100_000
		}
		if !set["restart-keys"] {
			c.restartKeys = 100_000
		}
		if !set["latency-duration"] {
			c.latencyFor = 5 * time.Second
		}
		if !set["scale-keys"] {
			c.scaleKeys = "10000,100000"
		}
		if !set["scaleout-keys"] {
			c.scaleoutKeys = "20000"
		}
		if !set["scaleout-history"] {
			c.scaleoutHistory = "1,4"
		}
		if !set["scaleout-sessions"] {
			c.scaleoutSessions = "1s"
		}
		if !set["scaleout-instances"] {
			c.scaleoutInstances = "1,2"
		}
		if !set["scaleout-queries"] {
			c.scaleoutQueries = 2000
		}
		if !set["scaleout-base"] {
			c.scaleoutBase = 20000
		}
		if !set["scaleout-snapshot-every"] {
			c.scaleoutSnapEvery = 4
		}
	}
	if _, err := c.scaleoutPlan(); err != nil {
		return c, err
	}
	if c.scaleoutRouter != "own" && c.scaleoutRouter != "default" {
		return c, fmt.Errorf("benchmarks: -scaleout-router %q: want own or default", c.scaleoutRouter)
	}
	if c.scaleoutSnapEvery < 1 || c.scaleoutPauseN < 2 || c.scaleoutRate <= 0 || c.scaleoutBase < 1 || c.scaleoutQueries < 1 {
		return c, errors.New("benchmarks: -scaleout-snapshot-every, -scaleout-rate, -scaleout-base and -scaleout-queries must be positive and -scaleout-pause-instances at least 2")
	}
	if _, err := c.scaleSizes(); err != nil {
		return c, err
	}
	for _, v := range strings.Split(c.scaleVariants, ",") {
		if v != "naive" && v != "strand" && v != "input" {
			return c, fmt.Errorf("benchmarks: -scale-variants %q: want naive, strand or input", c.scaleVariants)
		}
	}
	if c.events < 1 || c.accounts < 1 || c.partitions < 1 || c.batch < 1 || c.skew <= 1 || c.reps < 1 {
		return c, errors.New("benchmarks: -events, -accounts, -partitions, -batch and -reps must be positive and -skew > 1")
	}
	for _, s := range strings.Split(c.codecs, ",") {
		if _, err := workload.ParseCodec(s); err != nil {
			return c, err
		}
	}
	if _, err := c.shares(); err != nil {
		return c, err
	}
	if c.broker != "memory" && c.broker != "disk" && c.broker != "process" {
		return c, fmt.Errorf("benchmarks: -broker %q: want memory, disk or process", c.broker)
	}
	return c, nil
}

func (c config) workload() workload.Config {
	w := workload.Default()
	w.Events, w.Accounts, w.Skew, w.Partitions = c.events, c.accounts, c.skew, uint32(c.partitions)
	return w
}

// scaleSize is one run of the scale scenario.
type scaleSize struct {
	keys, events int
	skew         float64
}

// name is the scenario name of a scale run's jobs, from which a child
// reads its size back.
func (z scaleSize) name() string { return fmt.Sprintf("scale:%d:%g:%d", z.keys, z.skew, z.events) }

func parseScaleName(s string) (scaleSize, error) {
	var z scaleSize
	if _, err := fmt.Sscanf(strings.ReplaceAll(s, ":", " "), "scale %d %g %d", &z.keys, &z.skew, &z.events); err != nil {
		return z, fmt.Errorf("benchmarks: scale measurement %q: %w", s, err)
	}
	return z, nil
}

// scaleSizes lists the scale runs: every key count with every skew.
func (c config) scaleSizes() ([]scaleSize, error) {
	var keys []int
	for _, f := range strings.Split(c.scaleKeys, ",") {
		var k int
		if _, err := fmt.Sscan(f, &k); err != nil || k < 1 {
			return nil, fmt.Errorf("benchmarks: -scale-keys %q: want positive integers", c.scaleKeys)
		}
		keys = append(keys, k)
	}
	if c.scale10M && !slices.Contains(keys, 10_000_000) {
		keys = append(keys, 10_000_000)
	}
	if c.scalePerKey < 1 {
		return nil, errors.New("benchmarks: -scale-per-key must be at least 1")
	}
	var out []scaleSize
	for _, k := range keys {
		for _, f := range strings.Split(c.scaleSkews, ",") {
			var x float64
			if _, err := fmt.Sscan(f, &x); err != nil || x <= 1 {
				return nil, fmt.Errorf("benchmarks: -scale-skews %q: want numbers > 1", c.scaleSkews)
			}
			out = append(out, scaleSize{keys: k, skew: x, events: max(c.events, c.scalePerKey*k)})
		}
	}
	return out, nil
}

// scaleoutPlan is what the scaleout scenario measures.
func (c config) scaleoutPlan() (scenario.ScaleoutPlan, error) {
	var p scenario.ScaleoutPlan
	ints := func(flag, list string) ([]int, error) {
		var out []int
		for _, f := range strings.Split(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("benchmarks: -%s %q: want positive integers", flag, list)
			}
			out = append(out, n)
		}
		return out, nil
	}
	var err error
	for _, part := range strings.Split(c.scaleoutParts, ",") {
		if !slices.Contains(scenario.ScaleoutParts, part) {
			return p, fmt.Errorf("benchmarks: -scaleout-parts %q: want some of %s", c.scaleoutParts, strings.Join(scenario.ScaleoutParts, ","))
		}
		p.Parts = append(p.Parts, part)
	}
	if p.Keys, err = ints("scaleout-keys", c.scaleoutKeys); err != nil {
		return p, err
	}
	if p.History, err = ints("scaleout-history", c.scaleoutHistory); err != nil {
		return p, err
	}
	if p.Instances, err = ints("scaleout-instances", c.scaleoutInstances); err != nil {
		return p, err
	}
	if p.Clients, err = ints("scaleout-clients", c.scaleoutClients); err != nil {
		return p, err
	}
	for _, f := range strings.Split(c.scaleoutSessions, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 100*time.Millisecond {
			return p, fmt.Errorf("benchmarks: -scaleout-sessions %q: want durations of at least 100ms", c.scaleoutSessions)
		}
		p.Sessions = append(p.Sessions, d)
	}
	return p, nil
}

// scaleoutOptions are the options of a scaleout measurement in a child.
func (c config) scaleoutOptions(cd workload.Codec) (scenario.ScaleoutOptions, error) {
	exe, err := os.Executable()
	if err != nil {
		return scenario.ScaleoutOptions{}, err
	}
	w := c.workload()
	return scenario.ScaleoutOptions{
		Codec: cd, Dir: c.dir, Exe: exe, Env: append(os.Environ(), childEnv+"=1"), Logs: c.scaleoutLogs,
		SnapshotEvery: c.scaleoutSnapEvery, Workload: w, Base: c.scaleoutBase, Instances: c.scaleoutPauseN,
		Rate: c.scaleoutRate, Queries: c.scaleoutQueries, Router: c.scaleoutRouter,
	}, nil
}

func (c config) shares() ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(c.latencyShares, ",") {
		var x float64
		if _, err := fmt.Sscan(f, &x); err != nil || x <= 0 {
			return nil, fmt.Errorf("benchmarks: -latency-share %q: want positive numbers", c.latencyShares)
		}
		out = append(out, x)
	}
	return out, nil
}

func (c config) codecList() []workload.Codec {
	var out []workload.Codec
	for _, s := range strings.Split(c.codecs, ",") {
		cd, _ := workload.ParseCodec(s)
		out = append(out, cd)
	}
	return out
}

func main() { os.Exit(realMain()) }

func realMain() int {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The Iggy SDK prints through the standard logger on every login.
	restore := iggy.RouteStdLog(slog.New(slog.DiscardHandler))
	defer restore()
	switch {
	case cfg.list:
		listScenarios(os.Stdout)
	case cfg.serveBroker:
		err = scenario.ServeBroker(ctx, os.Stdin, os.Stdout)
	case cfg.scaleoutInstance != "":
		err = scenario.ServeInstance(ctx, cfg.scaleoutInstance, os.Stdin, os.Stdout)
	case cfg.child != "":
		err = runChild(ctx, cfg, os.Stdout)
	default:
		err = run(ctx, cfg, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// job is one measurement: scenario/variant/codec.
type job struct{ scenario, variant, codec string }

func (j job) String() string { return j.scenario + "/" + j.variant + "/" + j.codec }

func parseJob(s string) (job, error) {
	p := strings.Split(s, "/")
	if len(p) != 3 {
		return job{}, fmt.Errorf("benchmarks: -child %q: want scenario/variant/codec", s)
	}
	return job{p[0], p[1], p[2]}, nil
}

// run runs the selected scenarios, each measurement in a child process
// unless -inprocess, and prints the table.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	scs, err := scenarios(cfg.scenario)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "strand benchmarks — %s\n", sysstat.Machine())
	fmt.Fprintf(stdout, "workload: %d events, %d accounts, Zipf s=%.2f, %d partitions, batch %d, sync commits; load average at start: %s\n",
		cfg.events, cfg.accounts, cfg.skew, cfg.partitions, cfg.batch, sysstat.Load())
	if g, err := workload.NewGenerator(cfg.workload()); err == nil {
		for range cfg.events {
			g.Next()
		}
		fmt.Fprintf(stdout, "mix: %s; %d accounts touched\n", g.Mix(), g.Accounts())
	}
	fmt.Fprintf(stdout, "embedded broker (e2e, latency): %s\n\n", map[string]string{"memory": "in memory", "disk": "with a data directory", "process": "in memory, in a process of its own"}[cfg.broker])
	codecs := cfg.codecList()
	shares, err := cfg.shares()
	if err != nil {
		return err
	}
	var jsonOut io.Writer
	if cfg.jsonOut != "" {
		f, err := os.Create(cfg.jsonOut)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = f
	}
	sess := &session{ctx: ctx, cfg: cfg, codecs: codecs, shares: shares, stderr: stderr, jsonOut: jsonOut, runs: map[job][]scenario.Result{}}
	for _, d := range scs {
		if err := d.plan(sess); err != nil {
			return err
		}
	}
	if cfg.record != "" {
		files, err := sess.record(cfg.record, os.Args[1:], scs)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintf(stderr, "recorded %s\n", f)
		}
	}
	runs, order := sess.runs, sess.order
	var results []scenario.Result
	var scaleout [][]scenario.Result
	for _, j := range order {
		if scenario.IsScaleout(j.scenario) {
			scaleout = append(scaleout, runs[j])
			continue
		}
		results = append(results, median(runs[j]))
	}
	roundRatios(results, runs)
	fmt.Fprintln(stdout)
	if len(results) > 0 {
		printTable(stdout, results)
	}
	if len(scaleout) > 0 {
		if len(results) > 0 {
			fmt.Fprintln(stdout)
		}
		scenario.PrintScaleout(stdout, scaleout)
	}
	fmt.Fprintf(stdout, "\nload average at end: %s\n", sysstat.Load())
	return nil
}

// median returns the median of several runs of one measurement (by rate,
// by p99 for latency, by time for restarts), with the range of all runs in
// its Extra figures.
func median(rs []scenario.Result) scenario.Result {
	if len(rs) == 0 {
		return scenario.Result{}
	}
	key := func(r scenario.Result) float64 {
		switch r.Scenario {
		case "latency":
			return r.P99
		case "restart":
			return r.Seconds
		}
		return r.Rate
	}
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b scenario.Result) int { return cmp.Compare(key(a), key(b)) })
	m := sorted[len(sorted)/2]
	extra := map[string]float64{}
	for k, v := range m.Extra {
		extra[k] = v
	}
	extra["runs"] = float64(len(rs))
	extra["min"], extra["max"] = key(sorted[0]), key(sorted[len(sorted)-1])
	m.Extra = extra
	for _, r := range rs {
		m.Verified = m.Verified && r.Verified
	}
	return m
}

// roundRatios adds to every median result with a baseline the median and
// range of its per-round ratios: round i of a measurement against round i
// of its baseline, which ran right before it under about the same load.
func roundRatios(results []scenario.Result, runs map[job][]scenario.Result) {
	byVariant := map[string][]scenario.Result{}
	var variants []string
	for _, rs := range runs {
		if len(rs) > 0 {
			k := rs[0].Scenario + "/" + rs[0].Variant + "/" + rs[0].Codec
			byVariant[k] = rs
			variants = append(variants, rs[0].Scenario+"/"+rs[0].Variant)
		}
	}
	for i := range results {
		r := &results[i]
		naive, par := baselines(*r, variants)
		own := byVariant[r.Scenario+"/"+r.Variant+"/"+r.Codec]
		for name, base := range map[string]string{"x_naive": naive, "x_par": par} {
			bs := byVariant[r.Scenario+"/"+base+"/"+r.Codec]
			n := min(len(own), len(bs))
			if base == "" || n < 2 {
				continue
			}
			var xs []float64
			for k := range n {
				if bs[k].Rate > 0 {
					xs = append(xs, own[k].Rate/bs[k].Rate)
				}
			}
			if len(xs) < 2 {
				continue
			}
			slices.Sort(xs)
			r.Extra[name], r.Extra[name+"_min"], r.Extra[name+"_max"] = xs[len(xs)/2], xs[0], xs[len(xs)-1]
		}
	}
}

// runJob runs one measurement, in a child process unless -inprocess.
func runJob(ctx context.Context, cfg config, j job, extra []string) (scenario.Result, error) {
	if cfg.inProcess {
		c := cfg
		c.child = j.String()
		for i := 0; i+1 < len(extra); i += 2 {
			if extra[i] == "-latency-rate" {
				fmt.Sscan(extra[i+1], &c.latencyRate)
			}
		}
		return measureOne(ctx, c, j)
	}
	exe, err := os.Executable()
	if err != nil {
		return scenario.Result{}, err
	}
	args := append(childArgs(cfg), "-child", j.String())
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1") // lets a test binary act as the runner
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return scenario.Result{}, fmt.Errorf("child %s: %w", j, err)
	}
	var r scenario.Result
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte("RESULT ")) {
			if err := json.Unmarshal(line[len("RESULT "):], &r); err != nil {
				return r, fmt.Errorf("child %s: bad result line: %w", j, err)
			}
			found = true
		}
	}
	if !found {
		return r, fmt.Errorf("child %s printed no result", j)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > 0 {
		r.ProcessPeakRSS = ru.Maxrss * 1024 // KiB on Linux
	}
	return r, nil
}

// childEnv is set in the environment of every child process; a test binary
// (whose os.Executable is not this command) checks it in TestMain.
const childEnv = "STRAND_BENCHMARKS_CHILD"

// childArgs repeats the command line's settings for a child.
func childArgs(c config) []string {
	return []string{
		"-events", fmt.Sprint(c.events), "-accounts", fmt.Sprint(c.accounts), "-skew", fmt.Sprint(c.skew),
		"-partitions", fmt.Sprint(c.partitions), "-batch", fmt.Sprint(c.batch), "-codecs", c.codecs,
		"-dir", c.dir, "-cpuprofile", c.cpuprofile, "-memprofile", c.memprofile, "-broker", c.broker,
		"-latency-share", c.latencyShares, "-latency-rate", fmt.Sprint(c.latencyRate),
		"-latency-duration", c.latencyFor.String(), "-restart-keys", fmt.Sprint(c.restartKeys),
		"-naive-workers", fmt.Sprint(c.naiveWorkers), "-reps", "1",
		"-scaleout-parts", c.scaleoutParts, "-scaleout-keys", c.scaleoutKeys, "-scaleout-history", c.scaleoutHistory,
		"-scaleout-snapshot-every", fmt.Sprint(c.scaleoutSnapEvery), "-scaleout-sessions", c.scaleoutSessions,
		"-scaleout-pause-instances", fmt.Sprint(c.scaleoutPauseN), "-scaleout-rate", fmt.Sprint(c.scaleoutRate),
		"-scaleout-base", fmt.Sprint(c.scaleoutBase), "-scaleout-instances", c.scaleoutInstances,
		"-scaleout-queries", fmt.Sprint(c.scaleoutQueries), "-scaleout-clients", c.scaleoutClients,
		"-scaleout-router", c.scaleoutRouter, "-scaleout-logs", c.scaleoutLogs, "-scale-keys", c.scaleKeys, "-scale-skews", c.scaleSkews, "-scale-per-key", fmt.Sprint(c.scalePerKey), "-scale-timeline", c.scaleTimeline, "-scale-value-cache", fmt.Sprint(c.valueCacheMiB), "-workers", fmt.Sprint(c.workers), "-pub-conns", fmt.Sprint(c.pubConns), "-latency-trace", c.latencyTrace, "-latency-tick", c.latencyTick.String(), "-poll-idle-max", c.idleMax.String(),
	}
}

// runChild runs the measurement named by -child and prints it as a RESULT
// line.
func runChild(ctx context.Context, cfg config, stdout io.Writer) error {
	j, err := parseJob(cfg.child)
	if err != nil {
		return err
	}
	r, err := measureOne(ctx, cfg, j)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "RESULT %s\n", b)
	return nil
}

func (c config) profilePath(j job) string {
	if c.cpuprofile == "" {
		return ""
	}
	return fmt.Sprintf("%s-%s-%s-%s.pprof", c.cpuprofile, j.scenario, j.variant, j.codec)
}
