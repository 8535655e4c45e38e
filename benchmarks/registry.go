package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/scenario"
	"github.com/strand-io/strand/benchmarks/internal/sysstat"
	"github.com/strand-io/strand/benchmarks/internal/workload"
)

// measureFunc makes one measurement of a scenario in this process.
type measureFunc func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error)

// scenarioDef is one scenario of the runner: what it measures, against
// what, how the runner plans its measurements (in the parent) and how one
// measurement is made (in a child). The registry lists them all; the
// command line, the help, -list, the README and the dispatch come from it.
type scenarioDef struct {
	name string
	// measures and baseline say what the scenario measures and what it is
	// compared with, in the same run (benchmarks/README.md repeats them).
	measures, baseline string
	// inAll: -scenario all runs it.
	inAll bool
	// plan runs the scenario's measurements, in rounds against their
	// baselines (session.rounds).
	plan func(s *session) error
	// owns reports whether a job's scenario name is this scenario's (nil:
	// the name itself): scale and scaleout name their jobs by size or part.
	owns func(jobScenario string) bool
	// variants measure each variant of a job; measure measures any (for
	// scenarios whose variant is a parameter, as latency's rate).
	variants map[string]measureFunc
	measure  measureFunc
}

// registry is every scenario of the runner, in the order "all" runs them
// (set by init: the measurements dispatch through it).
var registry []*scenarioDef

func init() { registry = scenarioDefs() }

func scenarioDefs() []*scenarioDef {
	return []*scenarioDef{
		{
			name:     "core",
			measures: "the accounts workload through the executor without a broker: one pipeline per partition, sync commits, binary and JSON payloads",
			baseline: "naive: per-event Pebble Get+Set, one commit per batch (sequential, and naive-par with -naive-workers goroutines)",
			inAll:    true,
			plan: func(s *session) error {
				var jobs []job
				for _, cd := range s.codecs {
					jobs = append(jobs, job{"core", "naive", string(cd)})
					if s.cfg.naiveWorkers > 1 {
						jobs = append(jobs, job{"core", "naive-par", string(cd)})
					}
					jobs = append(jobs, job{"core", "strand", string(cd)})
				}
				return s.rounds(jobs...)
			},
			variants: map[string]measureFunc{
				"strand": func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
					return scenario.CoreStrand(ctx, cfg.coreOptions(j, cd))
				},
				"strand-serial": func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
					o := cfg.coreOptions(j, cd)
					o.Serial = true
					return scenario.CoreStrand(ctx, o)
				},
				"naive": func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
					return scenario.CoreNaive(ctx, cfg.coreOptions(j, cd), 1)
				},
				"naive-par": func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
					return scenario.CoreNaive(ctx, cfg.coreOptions(j, cd), max(cfg.naiveWorkers, 2))
				},
			},
		},
		{
			name:     "e2e",
			measures: "the same workload published to the embedded Iggy broker and processed by an App in the same process (-broker memory, disk or process); -drain variants process a log published before",
			baseline: "naive: a consumer polling the broker with per-event Pebble Get+Set",
			inAll:    true,
			plan: func(s *session) error {
				cd := string(s.codecs[0])
				e2e := job{"e2e", "strand", cd}
				if err := s.rounds(job{"e2e", "naive", cd}, e2e, job{"e2e", "naive-drain", cd}, job{"e2e", "strand-drain", cd}); err != nil {
					return err
				}
				s.peak = median(s.runs[e2e]).Rate
				return nil
			},
			variants: map[string]measureFunc{
				"strand":       e2eVariant(true, false),
				"strand-drain": e2eVariant(true, true),
				"naive":        e2eVariant(false, false),
				"naive-drain":  e2eVariant(false, true),
			},
		},
		{
			name:     "latency",
			measures: "publish-to-queryable latency (p50, p99, p99.9, max) with the producer paced at shares of the e2e peak (-latency-share) or at -latency-rate",
			baseline: "the e2e peak of the same run (measured first when e2e did not run)",
			inAll:    true,
			plan: func(s *session) error {
				cd := string(s.codecs[0])
				var rates []float64
				if s.cfg.latencyRate > 0 {
					rates = []float64{s.cfg.latencyRate}
				} else {
					if s.peak == 0 {
						e2e := job{"e2e", "strand", cd}
						if err := s.rounds(e2e); err != nil {
							return err
						}
						s.peak = median(s.runs[e2e]).Rate
					}
					for _, share := range s.shares {
						rates = append(rates, share*s.peak)
					}
				}
				for _, rate := range rates {
					j := job{"latency", fmt.Sprintf("%.0f", rate), cd}
					for range s.cfg.reps {
						if _, err := s.measure(j, "-latency-rate", fmt.Sprint(rate)); err != nil {
							return err
						}
					}
				}
				return nil
			},
			measure: func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
				o := scenario.LatencyOptions{E2EOptions: cfg.e2eOptions(j, cd), Rate: cfg.latencyRate, Duration: cfg.latencyFor, Tick: cfg.latencyTick}
				if cfg.latencyTrace != "" {
					o.Trace = fmt.Sprintf("%s-%.0f.csv", cfg.latencyTrace, cfg.latencyRate)
				}
				return scenario.Latency(ctx, o)
			},
		},
		{
			name:     "restart",
			measures: "the time from opening a store of -restart-keys keys to its first committed batch, by a task and by a whole processor",
			baseline: "none: an absolute time",
			inAll:    true,
			plan: func(s *session) error {
				cd := string(s.codecs[0])
				return s.rounds(job{"restart", "task", cd}, job{"restart", "processor", cd})
			},
			variants: map[string]measureFunc{
				"task": func(ctx context.Context, cfg config, _ job, cd workload.Codec) (scenario.Result, error) {
					return scenario.Restart(ctx, cfg.restartOptions(cd))
				},
				"processor": func(ctx context.Context, cfg config, _ job, cd workload.Codec) (scenario.Result, error) {
					return scenario.RestartProcessor(ctx, cfg.restartOptions(cd))
				},
			},
		},
		{
			name:     "rebuild",
			measures: "a table rebuilt in the background (a new WithTableVersion) from the core workload's log held in memory, while its old rows serve: events rebuilt per second until the switch",
			baseline: "core: the same log applied by one Task per partition in the same measurement (extra core_rate)",
			plan: func(s *session) error {
				return s.rounds(job{"rebuild", "strand", string(s.codecs[0])})
			},
			variants: map[string]measureFunc{
				"strand": func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
					return scenario.Rebuild(ctx, cfg.coreOptions(j, cd))
				},
			},
		},
		{
			name:     "scale",
			measures: "the core workload with 10k, 100k and 1M keys touched (-scale-keys, -scale-10m) at two skews, the input held off the Go heap so that the processing's own memory shows",
			baseline: "naive (as core) and input (the memory of the input alone)",
			plan: func(s *session) error {
				cd := string(s.codecs[0])
				sizes, err := s.cfg.scaleSizes()
				if err != nil {
					return err
				}
				for _, z := range sizes {
					var jobs []job
					for _, v := range strings.Split(s.cfg.scaleVariants, ",") {
						jobs = append(jobs, job{z.name(), v, cd})
					}
					if err := s.rounds(jobs...); err != nil {
						return err
					}
				}
				return nil
			},
			owns: func(sc string) bool { return strings.HasPrefix(sc, "scale:") },
			measure: func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
				return measureScale(ctx, cfg, j, cd)
			},
		},
		{
			name:     "scaleout",
			measures: "a group of instance processes: restore time of a partition by a new owner, the rebalance pause after a SIGKILL, throughput of 1, 2 and 3 instances, query latency of local and forwarded gets (-scaleout-parts)",
			baseline: "one instance outside any group (throughput); local gets (forwarded gets)",
			plan: func(s *session) error {
				plan, err := s.cfg.scaleoutPlan()
				if err != nil {
					return err
				}
				groups, err := plan.Jobs()
				if err != nil {
					return err
				}
				for _, g := range groups {
					var jobs []job
					for _, sj := range g {
						jobs = append(jobs, job{sj.Scenario, sj.Variant, string(s.codecs[0])})
					}
					if err := s.rounds(jobs...); err != nil {
						return err
					}
				}
				return nil
			},
			owns: scenario.IsScaleout,
			measure: func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
				o, err := cfg.scaleoutOptions(cd)
				if err != nil {
					return scenario.Result{}, err
				}
				return scenario.RunScaleout(ctx, o, scenario.ScaleoutJob{Scenario: j.scenario, Variant: j.variant})
			},
		},
	}
}

// lookup returns the scenario named name, or nil.
func lookup(name string) *scenarioDef {
	for _, d := range registry {
		if d.name == name {
			return d
		}
	}
	return nil
}

// ownerOf returns the scenario a job's scenario name belongs to, or nil.
func ownerOf(jobScenario string) *scenarioDef {
	for _, d := range registry {
		if d.owns != nil && d.owns(jobScenario) || d.owns == nil && d.name == jobScenario {
			return d
		}
	}
	return nil
}

// scenarioNames lists the registry's names, for help and errors.
func scenarioNames() string {
	var out []string
	for _, d := range registry {
		out = append(out, d.name)
	}
	return strings.Join(out, ", ")
}

// scenarios returns the scenarios a -scenario value selects: "all" (every
// scenario marked inAll) or a comma-separated list of names.
func scenarios(s string) ([]*scenarioDef, error) {
	if s == "all" {
		var out []*scenarioDef
		for _, d := range registry {
			if d.inAll {
				out = append(out, d)
			}
		}
		return out, nil
	}
	var out []*scenarioDef
	for _, x := range strings.Split(s, ",") {
		d := lookup(x)
		if d == nil {
			return nil, fmt.Errorf("benchmarks: unknown scenario %q (want %s, or all)", x, scenarioNames())
		}
		out = append(out, d)
	}
	return out, nil
}

// listScenarios prints the registry (-list).
func listScenarios(w io.Writer) {
	for _, d := range registry {
		all := ""
		if !d.inAll {
			all = " (not part of all)"
		}
		fmt.Fprintf(w, "%s%s\n  measures: %s\n  against:  %s\n", d.name, all, d.measures, d.baseline)
	}
}

// measureOne runs one measurement in this process.
func measureOne(ctx context.Context, cfg config, j job) (scenario.Result, error) {
	cd, err := workload.ParseCodec(j.codec)
	if err != nil {
		return scenario.Result{}, err
	}
	d := ownerOf(j.scenario)
	if d == nil {
		return scenario.Result{}, fmt.Errorf("benchmarks: unknown measurement %s (scenarios: %s)", j, scenarioNames())
	}
	f := d.measure
	if d.variants != nil {
		f = d.variants[j.variant]
	}
	if f == nil {
		return scenario.Result{}, fmt.Errorf("benchmarks: unknown measurement %s", j)
	}
	return f(ctx, cfg, j, cd)
}

// session is one run of the runner: what the scenarios' plans share.
type session struct {
	ctx     context.Context
	cfg     config
	codecs  []workload.Codec
	shares  []float64
	stderr  io.Writer
	jsonOut io.Writer
	runs    map[job][]scenario.Result
	order   []job
	peak    float64 // the e2e peak, for latency
}

// measure runs one measurement (in a child unless -inprocess) and keeps it.
func (s *session) measure(j job, extra ...string) (scenario.Result, error) {
	load := sysstat.Load()
	fmt.Fprintf(s.stderr, "running %s (load %s)...\n", j, load)
	r, err := runJob(s.ctx, s.cfg, j, extra)
	if err != nil {
		return r, fmt.Errorf("%s: %w", j, err)
	}
	r.Load = load
	if _, seen := s.runs[j]; !seen {
		s.order = append(s.order, j)
	}
	s.runs[j] = append(s.runs[j], r)
	if s.jsonOut != nil {
		b, _ := json.Marshal(r)
		fmt.Fprintf(s.jsonOut, "%s\n", b)
	}
	return r, nil
}

// rounds runs the jobs -reps times, interleaved, so that a baseline and
// what is compared with it see the same load.
func (s *session) rounds(jobs ...job) error {
	for range s.cfg.reps {
		for _, j := range jobs {
			if _, err := s.measure(j); err != nil {
				return err
			}
		}
	}
	return nil
}

// Record is one scenario's results as -record writes them: a JSON file
// per scenario and run in the record directory (benchmarks/results by
// default), the data RESULTS.md's tables are made from.
type Record struct {
	Scenario string    `json:"scenario"`
	Time     time.Time `json:"time"`
	Machine  string    `json:"machine"`
	// Commit is the source's git commit, when known (STRAND_COMMIT).
	Commit string `json:"commit,omitempty"`
	// Args is the runner's command line.
	Args []string `json:"args"`
	// Results are the medians of the rounds, with their ranges in Extra;
	// Runs every round.
	Results []scenario.Result   `json:"results"`
	Runs    [][]scenario.Result `json:"runs"`
}

// record writes one Record per scenario that ran to dir and returns the
// files written.
func (s *session) record(dir string, args []string, defs []*scenarioDef) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("benchmarks: -record %s: %w", dir, err)
	}
	now := time.Now().UTC()
	var files []string
	for _, d := range defs {
		rec := Record{Scenario: d.name, Time: now, Machine: sysstat.Machine(), Commit: os.Getenv("STRAND_COMMIT"), Args: args}
		for _, j := range s.order {
			if ownerOf(j.scenario) != d {
				continue
			}
			rec.Results = append(rec.Results, median(s.runs[j]))
			rec.Runs = append(rec.Runs, s.runs[j])
		}
		if len(rec.Results) == 0 {
			continue
		}
		b, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			return files, err
		}
		name := filepath.Join(dir, fmt.Sprintf("%s-%s.json", d.name, now.Format("20060102T150405Z")))
		if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
			return files, fmt.Errorf("benchmarks: -record: %w", err)
		}
		files = append(files, name)
	}
	slices.Sort(files)
	return files, nil
}

func (c config) coreOptions(j job, cd workload.Codec) scenario.CoreOptions {
	return scenario.CoreOptions{Workload: c.workload(), Codec: cd, Batch: c.batch, Dir: c.dir, CPUProfile: c.profilePath(j), Workers: c.workers}
}

func (c config) e2eOptions(j job, cd workload.Codec) scenario.E2EOptions {
	return scenario.E2EOptions{Workload: c.workload(), Codec: cd, Batch: c.batch, Dir: c.dir, Broker: c.broker, CPUProfile: c.profilePath(j),
		PublisherConnections: c.pubConns, IdleMax: c.idleMax}
}

func (c config) restartOptions(cd workload.Codec) scenario.RestartOptions {
	return scenario.RestartOptions{Keys: c.restartKeys, Partitions: uint32(c.partitions), Codec: cd, Batch: min(c.batch, 1000), Dir: c.dir}
}

// e2eVariant measures the e2e scenario with strand or the naive consumer,
// live or draining a log published before.
func e2eVariant(strand, drain bool) measureFunc {
	return func(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
		if strand {
			return scenario.E2EStrand(ctx, cfg.e2eOptions(j, cd), drain)
		}
		return scenario.E2ENaive(ctx, cfg.e2eOptions(j, cd), drain)
	}
}

// measureScale measures one size of the scale scenario.
func measureScale(ctx context.Context, cfg config, j job, cd workload.Codec) (scenario.Result, error) {
	z, err := parseScaleName(j.scenario)
	if err != nil {
		return scenario.Result{}, err
	}
	w := cfg.workload()
	w.Events, w.Accounts, w.Skew = z.events, z.keys, z.skew
	pj := job{"scale-" + strings.ReplaceAll(j.scenario[len("scale:"):], ":", "-"), j.variant, j.codec}
	o := scenario.ScaleOptions{Workload: w, Codec: cd, Batch: cfg.batch, Dir: cfg.dir, CPUProfile: cfg.profilePath(pj), Workers: cfg.workers, ValueCache: cfg.valueCacheMiB << 20}
	if cfg.memprofile != "" {
		o.MemProfile = fmt.Sprintf("%s-%s-%s-%s.pprof", cfg.memprofile, pj.scenario, pj.variant, pj.codec)
	}
	if cfg.scaleTimeline != "" {
		o.Timeline = fmt.Sprintf("%s-%s-%s.csv", cfg.scaleTimeline, pj.scenario, pj.codec)
	}
	var r scenario.Result
	switch j.variant {
	case "strand":
		r, err = scenario.ScaleStrand(ctx, o)
	case "naive":
		r, err = scenario.ScaleNaive(ctx, o)
	case "input":
		r, err = scenario.ScaleInput(ctx, o)
	default:
		return r, fmt.Errorf("benchmarks: unknown measurement %s (scale variants: naive, strand, input)", j)
	}
	r.Scenario = j.scenario // one name per size, so that rounds and ratios pair within it
	return r, err
}
