package scenario

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/figure"
)

// ScaleoutPlan is what a scale-out run measures.
type ScaleoutPlan struct {
	// Parts lists the measurements: restore, pause, throughput, query.
	Parts []string
	// Keys and History are the restore measurement's sizes (every
	// combination).
	Keys, History []int
	// Sessions are the pause measurement's session timeouts.
	Sessions []time.Duration
	// Instances are the throughput measurement's instance counts.
	Instances []int
	// Clients are the query measurement's client counts.
	Clients []int
}

// ScaleoutParts are the measurements of a scale-out run, in the order they
// run.
var ScaleoutParts = []string{"restore", "pause", "throughput", "query"}

// ScaleoutJob is one measurement of a scale-out run: a scenario name that
// carries its size, and a variant.
type ScaleoutJob struct{ Scenario, Variant string }

// Jobs returns the plan's measurements in rounds: the runner runs each
// round's jobs one after the other, as many times as it repeats, so that a
// baseline and what is compared with it run next to each other.
func (p ScaleoutPlan) Jobs() ([][]ScaleoutJob, error) {
	var out [][]ScaleoutJob
	for _, part := range p.Parts {
		switch part {
		case "restore":
			for _, k := range p.Keys {
				for _, h := range p.History {
					sc := fmt.Sprintf("%srestore:%d:%d", ScaleoutPrefix, k, h)
					out = append(out, []ScaleoutJob{{sc, RestoreNaive}, {sc, RestoreChangelog}, {sc, RestoreSnapshot}})
				}
			}
		case "pause":
			for _, s := range p.Sessions {
				sc := fmt.Sprintf("%spause:%v", ScaleoutPrefix, s)
				out = append(out, []ScaleoutJob{{sc, PauseLeave}, {sc, PauseKill}})
			}
		case "throughput":
			round := []ScaleoutJob{{ScaleoutPrefix + "throughput", ThroughputSolo}}
			for _, n := range p.Instances {
				round = append(round, ScaleoutJob{ScaleoutPrefix + "throughput", strconv.Itoa(n)})
			}
			out = append(out, round)
		case "query":
			for _, c := range p.Clients {
				sc := fmt.Sprintf("%squery:%d", ScaleoutPrefix, c)
				out = append(out, []ScaleoutJob{{sc, "get"}, {sc, QueryWriting}, {sc, QueryWritingWait}})
			}
		default:
			return nil, fmt.Errorf("scaleout: unknown measurement %q (want %s)", part, strings.Join(ScaleoutParts, ", "))
		}
	}
	return out, nil
}

// RunScaleout runs one scale-out measurement (a ScaleoutJob) in this
// process: the size in the scenario name overrides o's.
func RunScaleout(ctx context.Context, o ScaleoutOptions, j ScaleoutJob) (Result, error) {
	name, size, _ := strings.Cut(strings.TrimPrefix(j.Scenario, ScaleoutPrefix), ":")
	var r Result
	var err error
	switch name {
	case "restore":
		if _, err := fmt.Sscanf(strings.ReplaceAll(size, ":", " "), "%d %d", &o.Keys, &o.History); err != nil {
			return r, fmt.Errorf("scaleout: measurement %q: %w", j.Scenario, err)
		}
		r, err = ScaleoutRestore(ctx, o, j.Variant)
	case "pause":
		if o.Session, err = time.ParseDuration(size); err != nil {
			return r, fmt.Errorf("scaleout: measurement %q: %w", j.Scenario, err)
		}
		r, err = ScaleoutPause(ctx, o, j.Variant)
	case "throughput":
		r, err = ScaleoutThroughput(ctx, o, j.Variant)
	case "query":
		if o.Clients, err = strconv.Atoi(size); err != nil {
			return r, fmt.Errorf("scaleout: measurement %q: %w", j.Scenario, err)
		}
		r, err = ScaleoutQuery(ctx, o, j.Variant)
	default:
		return r, fmt.Errorf("scaleout: unknown measurement %q", j.Scenario)
	}
	r.Scenario = j.Scenario
	return r, err
}

// scaleoutKey is the figure a scale-out measurement's median is taken
// by: the time for restores and pauses, the rate for throughput, the
// forwarded p99 for queries.
func scaleoutKey(r Result) float64 {
	switch {
	case strings.HasPrefix(r.Scenario, ScaleoutPrefix+"throughput"):
		return r.Rate
	case strings.HasPrefix(r.Scenario, ScaleoutPrefix+"query"):
		return r.P99
	}
	return r.Seconds
}

// summary is the median of the runs of one measurement, with the range
// of its key figure.
type summary struct {
	Result
	runs     []Result
	min, max float64
}

func summarize(rs []Result) summary {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b Result) int { return cmp.Compare(scaleoutKey(a), scaleoutKey(b)) })
	s := summary{Result: sorted[len(sorted)/2], runs: rs, min: scaleoutKey(sorted[0]), max: scaleoutKey(sorted[len(sorted)-1])}
	for _, r := range rs {
		s.Verified = s.Verified && r.Verified
	}
	return s
}

// rng formats a summary's range and run count.
func (s summary) rng(f func(float64) string) string {
	if len(s.runs) < 2 {
		return "(1)"
	}
	return fmt.Sprintf("%s–%s (%d)", f(s.min), f(s.max), len(s.runs))
}

// ratios returns the median and range of per-round ratios fn(a[i], b[i]).
func ratios(a, b []Result, fn func(a, b Result) float64) (med, lo, hi float64, ok bool) {
	var xs []float64
	for i := range min(len(a), len(b)) {
		if x := fn(a[i], b[i]); x > 0 {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return 0, 0, 0, false
	}
	slices.Sort(xs)
	return xs[len(xs)/2], xs[0], xs[len(xs)-1], true
}

func fmtRatio(med, lo, hi float64, ok bool) string {
	if !ok {
		return "—"
	}
	if lo == hi {
		return fmt.Sprintf("%.2f×", med)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", med, lo, hi)
}

func secs(x float64) string { return fmt.Sprintf("%.3f", x) }

// timeRatio and rateRatio are the per-round ratios of the tables: a's
// time or rate over b's (0 when b has none).
func timeRatio(a, b Result) float64 {
	if b.Seconds <= 0 {
		return 0
	}
	return a.Seconds / b.Seconds
}

func rateRatio(a, b Result) float64 {
	if b.Rate <= 0 {
		return 0
	}
	return a.Rate / b.Rate
}

// section prints one table of PrintScaleout: its title (none if empty),
// the header (tab-separated columns), the rows body writes, aligned right,
// and a blank line.
func section(w io.Writer, title, header string, body func(tw io.Writer)) {
	if title != "" {
		fmt.Fprintln(w, title)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	body(tw)
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// PrintScaleout prints the tables of a scale-out run; runs holds, per
// measurement, all its runs in the order they ran.
func PrintScaleout(w io.Writer, runs [][]Result) {
	by := map[string][]Result{} // scenario/variant → runs
	var names []string
	for _, rs := range runs {
		if len(rs) == 0 {
			continue
		}
		k := rs[0].Scenario + "/" + rs[0].Variant
		if _, ok := by[k]; !ok {
			names = append(names, k)
		}
		by[k] = append(by[k], rs...)
	}
	// present returns the summaries of the variants of scenario sc that ran.
	present := func(sc string, variants ...string) []summary {
		var out []summary
		for _, v := range variants {
			if rs := by[sc+"/"+v]; len(rs) > 0 {
				out = append(out, summarize(rs))
			}
		}
		return out
	}
	// One entry per restore or pause scenario (its variants), per
	// throughput or query measurement.
	var restores, pauses [][]summary
	var tput, queries []summary
	seen := map[string]bool{}
	for _, k := range names {
		sc, _, _ := strings.Cut(k, "/")
		first := !seen[sc]
		seen[sc] = true
		switch {
		case first && strings.HasPrefix(sc, ScaleoutPrefix+"restore"):
			restores = append(restores, present(sc, RestoreNaive, RestoreChangelog, RestoreSnapshot))
		case first && strings.HasPrefix(sc, ScaleoutPrefix+"pause"):
			pauses = append(pauses, present(sc, PauseLeave, PauseKill))
		case strings.HasPrefix(sc, ScaleoutPrefix+"throughput"):
			tput = append(tput, summarize(by[k]))
		case strings.HasPrefix(sc, ScaleoutPrefix+"query"):
			queries = append(queries, summarize(by[k]))
		}
	}

	if len(restores) > 0 {
		section(w, "scale-out: restore of one partition by a new owner (seconds from topology.Open to Serving; naive: to the last event processed from scratch)",
			"keys\tevents/key\tevents\tnaive s\trange (runs)\tchangelog s\trange\t× naive\trestore s\tcommits applied\trecords read\tsnapshot s\trange\t× naive\trestore s\tapplied\trecords read\tsnapshot every\tverified\tload\t",
			func(tw io.Writer) {
				for _, r := range restores {
					if len(r) < 3 {
						continue
					}
					ns, cs, ss := r[0], r[1], r[2]
					snapNote := "no snapshot"
					if ss.Extra["from_snapshot"] == 1 {
						snapNote = "from snapshot"
					}
					fmt.Fprintf(tw, "%s\t%.0f\t%d\t%.3f\t%s\t%.3f\t%s\t%s\t%.3f\t%.0f\t%.0f\t%.3f\t%s\t%s\t%.3f\t%.0f\t%.0f\t%.0f (%s)\t%v\t%s\t\n",
						figure.Count(ns.Extra["keys"]), ns.Extra["history"], ns.Events, ns.Seconds, ns.rng(secs),
						cs.Seconds, cs.rng(secs), fmtRatio(ratios(cs.runs, ns.runs, timeRatio)), cs.Extra["restore_s"], cs.Extra["applied"], cs.Extra["read_records"],
						ss.Seconds, ss.rng(secs), fmtRatio(ratios(ss.runs, ns.runs, timeRatio)), ss.Extra["restore_s"], ss.Extra["applied"], ss.Extra["read_records"],
						ss.Extra["snapshot_every"], snapNote, ns.Verified && cs.Verified && ss.Verified, figure.Load1(cs.Load))
				}
			})
		section(w, "", "restore CPU\tkeys\tevents/key\tnaive CPU s\tchangelog CPU s\tsnapshot CPU s\tbroker CPU s (naive / changelog / snapshot)\tpeak RSS MiB (naive / changelog / snapshot)\tfirst owner s (changelog / snapshot)\tchangelog records (changelog / snapshot)\t",
			func(tw io.Writer) {
				for _, r := range restores {
					if len(r) < 3 {
						continue
					}
					ns, cs, ss := r[0], r[1], r[2]
					fmt.Fprintf(tw, "restore CPU\t%s\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f / %.2f / %.2f\t%.0f / %.0f / %.0f\t%.1f / %.1f\t%.0f / %.0f\t\n",
						figure.Count(ns.Extra["keys"]), ns.Extra["history"], ns.CPUSeconds, cs.CPUSeconds, ss.CPUSeconds,
						ns.Extra["broker_cpu_s"], cs.Extra["broker_cpu_s"], ss.Extra["broker_cpu_s"],
						float64(ns.PeakRSS)/(1<<20), float64(cs.PeakRSS)/(1<<20), float64(ss.PeakRSS)/(1<<20), cs.Extra["build_s"], ss.Extra["build_s"],
						cs.Extra["changelog_records"], ss.Extra["changelog_records"])
				}
			})
	}

	if len(pauses) > 0 {
		section(w, "scale-out: rebalance pause (seconds from the SIGKILL or clean stop of the instance serving most partitions to the first commit of each of them on a survivor)",
			"session timeout\tvariant\tinstances\tpartitions moved\tpause s\trange (runs)\tpause − timeout s\tto Restoring s\tto Serving s\trestore s (max)\tvictim's partitions: gap s\tsurvivors' partitions: max gap s\tproducer events/s\tverified\tload\t",
			func(tw io.Writer) {
				for _, s := range slices.Concat(pauses...) {
					over := "—"
					if s.Variant == PauseKill {
						over = fmt.Sprintf("%.3f", s.Seconds-s.Extra["session_s"])
					}
					fmt.Fprintf(tw, "%v\t%s\t%.0f\t%.0f\t%.3f\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%v\t%s\t\n",
						time.Duration(s.Extra["session_s"]*float64(time.Second)), s.Variant, s.Extra["instances"], s.Extra["moved"], s.Seconds, s.rng(secs), over,
						s.Extra["detect_s"], s.Extra["serving_s"], s.Extra["restore_max_s"], s.Extra["victim_gap_s"], s.Extra["survivor_max_gap_s"],
						figure.Count(s.Extra["rate"]), s.Verified, figure.Load1(s.Load))
				}
			})
	}

	if len(tput) > 0 {
		var one []Result
		for _, s := range tput {
			if s.Variant == "1" {
				one = s.runs
			}
		}
		section(w, "scale-out: throughput of instance processes (one broker process, one producer publishing the log as fast as it can; CPU = user + system seconds over the run)",
			"instances\tevents\tseconds\tevents/s\trange (runs)\t× 1 instance\tinstances' CPU s\tCPU s per M events: instances\tbroker\tproducer\ttotal\tproducer events/s\tverified\tload\t",
			func(tw io.Writer) {
				for _, s := range tput {
					vs := "—"
					if s.Variant != "1" {
						vs = fmtRatio(ratios(s.runs, one, rateRatio))
					}
					label := s.Variant
					if s.Variant == ThroughputSolo {
						label = "1, no group"
					}
					m := float64(s.Events) / 1e6
					fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%v\t%s\t\n",
						label, s.Events, s.Seconds, figure.Count(s.Rate), s.rng(figure.Count), vs, s.CPUSeconds, s.Extra["cpu_per_M_instances"],
						s.Extra["cpu_broker_s"]/m, s.Extra["cpu_producer_s"]/m, s.Extra["cpu_per_M_total"],
						figure.Count(s.Extra["producer_rate"]), s.Verified, figure.Load1(s.Load))
				}
			})
	}

	if len(queries) > 0 {
		p50 := func(a, _ Result) float64 { return a.P50 / a.Extra["local_p50"] }
		p99 := func(a, _ Result) float64 { return a.P99 / a.Extra["local_p99"] }
		section(w, "scale-out: query server latency, ms (two instance processes; gets to one of them, of its own keys and of the other's)",
			"clients\tgets\tlocal p50\tp99\tp99.9\tmax\tforwarded p50\tp99\tp99 range (runs)\tp99.9\tmax\tforwarded/local p50\tp99\tgets/s\tverified\tload\t",
			func(tw io.Writer) {
				for _, s := range queries {
					fmt.Fprintf(tw, "%.0f\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%.3f\t%.3f\t%s\t%s\t%s\t%v\t%s\t\n",
						s.Extra["clients"], s.Events, s.Extra["local_p50"], s.Extra["local_p99"], s.Extra["local_p999"], s.Extra["local_max"],
						s.P50, s.P99, s.rng(secs), s.P999, s.Max, fmtRatio(ratios(s.runs, s.runs, p50)), fmtRatio(ratios(s.runs, s.runs, p99)),
						figure.Count(s.Extra["requests_per_s"]), s.Verified, figure.Load1(s.Load))
				}
			})
	}
	noted := map[string]bool{}
	for _, k := range names {
		if n := by[k][0].Note; n != "" && !noted[n] {
			noted[n] = true
			fmt.Fprintf(w, "note %s: %s\n", k, n)
		}
	}
}
