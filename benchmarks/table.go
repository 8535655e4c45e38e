package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/strand-io/strand/benchmarks/internal/figure"
	"github.com/strand-io/strand/benchmarks/internal/scenario"
)

// printTable prints the throughput results with their ratios to the naive
// baselines of the same run, then latency and restart results.
func printTable(w io.Writer, rs []scenario.Result) {
	find := func(sc, variant, codec string) (scenario.Result, bool) {
		for _, r := range rs {
			if r.Scenario == sc && r.Codec == codec && r.Variant == variant {
				return r, true
			}
		}
		return scenario.Result{}, false
	}
	var variants []string
	for _, x := range rs {
		variants = append(variants, x.Scenario+"/"+x.Variant)
	}
	baseline := func(r scenario.Result) (naive, par string) { return baselines(r, variants) }
	ratio := func(a, b float64) string {
		if b <= 0 || a <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tvariant\tcodec\tevents\tseconds\tevents/s\trange (runs)\t× naive\t× naive-8\tCPU s\tevents/CPU-s\tpeak RSS\tinput\tprocess peak\tcommits\tverified\tload\t")
	for _, r := range rs {
		if r.Rate == 0 || isScale(r) {
			continue
		}
		vsNaive, vsPar := "—", "—"
		naive, par := baseline(r)
		if b, ok := find(r.Scenario, naive, r.Codec); ok && naive != "" {
			vsNaive = ratio(r.Rate, b.Rate)
		}
		if b, ok := find(r.Scenario, par, r.Codec); ok && par != "" {
			vsPar = ratio(r.Rate, b.Rate)
		}
		// With several rounds, the median of the per-round ratios (each
		// against the baseline run next to it) is steadier.
		if x, ok := r.Extra["x_naive"]; ok {
			vsNaive = fmt.Sprintf("%.2f× (%.2f–%.2f)", x, r.Extra["x_naive_min"], r.Extra["x_naive_max"])
		}
		if x, ok := r.Extra["x_par"]; ok {
			vsPar = fmt.Sprintf("%.2f× (%.2f–%.2f)", x, r.Extra["x_par_min"], r.Extra["x_par_max"])
		}
		perCPU := "—"
		if r.CPUSeconds > 0 {
			perCPU = figure.Count(float64(r.Events) / r.CPUSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.2f\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%d\t%v\t%s\t\n",
			r.Scenario, r.Variant, r.Codec, r.Events, r.Seconds, figure.Count(r.Rate), spread(r, figure.Count), vsNaive, vsPar, r.CPUSeconds, perCPU,
			mib(r.PeakRSS), mib(r.InputBytes), mib(r.ProcessPeakRSS), r.Commits, r.Verified, figure.Load1(r.Load))
	}
	_ = tw.Flush()

	var lat, rest, scale []scenario.Result
	for _, r := range rs {
		switch {
		case r.Scenario == "latency":
			lat = append(lat, r)
		case r.Scenario == "restart":
			rest = append(rest, r)
		case isScale(r):
			scale = append(scale, r)
		}
	}
	if len(scale) > 0 {
		fmt.Fprintln(w)
		printScale(w, scale, func(r scenario.Result) (scenario.Result, bool) { return find(r.Scenario, "naive", r.Codec) })
	}
	if len(lat) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "latency\tcodec\tshare of e2e peak\ttarget events/s\tachieved events/s\tevents\tcommits\tp50 ms\tp99 ms\tp99 range (runs)\tp99.9 ms\tmax ms\tfrom Send: p50/p99/max ms\tverified\tload\t")
		for _, r := range lat {
			share := "—"
			if b, ok := find("e2e", "strand", r.Codec); ok && b.Rate > 0 {
				share = fmt.Sprintf("%.0f%%", 100*r.Extra["target_rate"]/b.Rate)
			}
			fmt.Fprintf(tw, "publish→queryable\t%s\t%s\t%s\t%s\t%d\t%d\t%.1f\t%.1f\t%s\t%.1f\t%.1f\t%.1f / %.1f / %.1f\t%v\t%s\t\n",
				r.Codec, share, figure.Count(r.Extra["target_rate"]), figure.Count(r.Extra["achieved_rate"]), r.Events, r.Commits, r.P50, r.P99,
				spread(r, func(x float64) string { return fmt.Sprintf("%.1f", x) }), r.P999, r.Max,
				r.Extra["sent_p50"], r.Extra["sent_p99"], r.Extra["sent_max"], r.Verified, figure.Load1(r.Load))
		}
		_ = tw.Flush()
	}
	if len(rest) > 0 {
		fmt.Fprintln(w)
		for _, r := range rest {
			fmt.Fprintf(w, "restart (%s, %d keys of state, %s, load %s): %.3f s from open to the first committed batch, range %s", r.Codec, int(r.Extra["keys"]), r.Variant, figure.Load1(r.Load), r.Seconds,
				spread(r, func(x float64) string { return fmt.Sprintf("%.3f", x) }))
			keys := make([]string, 0, len(r.Extra))
			for k := range r.Extra {
				if strings.HasSuffix(k, "_s") && k != "duration_s" {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %.3f s", strings.TrimSuffix(k, "_s"), r.Extra[k]))
			}
			if c, ok := r.Extra["open_cpu_ms"]; ok {
				parts = append(parts, fmt.Sprintf("CPU during open %.0f ms", c))
			}
			if wal, ok := r.Extra["wal_mib"]; ok {
				parts = append(parts, fmt.Sprintf("WAL files %.1f MiB", wal))
			}
			if len(parts) > 0 {
				fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
			}
			fmt.Fprintln(w)
		}
	}
	for _, r := range rs {
		if isScale(r) && r.Variant != "naive" {
			continue // one note per size
		}
		if pr := r.Extra["producer_rate"]; pr > 0 {
			fmt.Fprintf(w, "note %s/%s/%s: the producer published all %d events at %s events/s\n", r.Scenario, r.Variant, r.Codec, r.Events, figure.Count(pr))
		}
		if r.Note != "" {
			v := r.Variant
			if r.Scenario == "latency" {
				v = figure.Count(r.Extra["target_rate"]) + " events/s"
			}
			fmt.Fprintf(w, "note %s/%s/%s: %s\n", r.Scenario, v, r.Codec, r.Note)
		}
	}
}

// baselines names the variants a result is compared with: the naive
// consumer of the same scenario and mode, and (core) the naive consumer with
// one goroutine per partition. variants lists "scenario/variant" of the run.
func baselines(r scenario.Result, variants []string) (naive, par string) {
	switch {
	case strings.HasPrefix(r.Variant, "naive"):
		return "", ""
	case isScale(r):
		if r.Variant == "input" {
			return "", ""
		}
		return "naive", ""
	case r.Scenario == "core":
		for _, v := range variants {
			if strings.HasPrefix(v, "core/naive-") {
				par = strings.TrimPrefix(v, "core/")
			}
		}
		return "naive", par
	case strings.HasSuffix(r.Variant, "-drain"):
		return "naive-drain", ""
	}
	return "naive", ""
}

// spread formats the range of a median's runs.
func spread(r scenario.Result, f func(float64) string) string {
	n := int(r.Extra["runs"])
	if n <= 1 {
		return "(1)"
	}
	return fmt.Sprintf("%s–%s (%d)", f(r.Extra["min"]), f(r.Extra["max"]), n)
}

func mib(b int64) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// isScale reports whether r is a measurement of the scale scenario (whose
// scenario name carries its size: "scale:keys:skew:events").
func isScale(r scenario.Result) bool { return strings.HasPrefix(r.Scenario, "scale:") }

// printScale prints the scale scenario's table: per size (keys touched,
// skew), the naive consumer, strand and the input alone.
func printScale(w io.Writer, rs []scenario.Result, naiveOf func(scenario.Result) (scenario.Result, bool)) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scale\tkeys\tskew\tvariant\tcodec\tevents\tseconds\tevents/s\trange (runs)\t× naive\tCPU s\tCPU µs/event\tproc RSS\tGo heap peak\tbatches\tinput\tcommits\tverified\tload\t")
	for _, r := range rs {
		vs := "—"
		if x, ok := r.Extra["x_naive"]; ok {
			vs = fmt.Sprintf("%.2f× (%.2f–%.2f)", x, r.Extra["x_naive_min"], r.Extra["x_naive_max"])
		} else if b, ok := naiveOf(r); ok && r.Variant == "strand" && b.Rate > 0 {
			vs = fmt.Sprintf("%.2f×", r.Rate/b.Rate)
		}
		fmt.Fprintf(tw, "scale\t%s\t%.2f\t%s\t%s\t%d\t%.2f\t%s\t%s\t%s\t%.2f\t%.3f\t%s\t%s\t%s\t%s\t%d\t%v\t%s\t\n",
			figure.Count(r.Extra["keys"]), r.Extra["skew"], r.Variant, r.Codec, r.Events, r.Seconds, figure.Count(r.Rate), spread(r, figure.Count), vs,
			r.CPUSeconds, r.Extra["cpu_us_per_event"], mib(int64(r.Extra["proc_rss"])), mib(int64(r.Extra["heap_peak"])),
			mib(int64(r.Extra["batches"])), mib(r.InputBytes), r.Commits, r.Verified, figure.Load1(r.Load))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "store\tkeys\tskew\tvariant\tvalue cache hit\tentries\tfilter skips/event\tPebble reads/event\t(found)\tblock cache hit\tread amp\tcompaction debt\tcompactions\tflushes\tstalls\tstall s\tsstables\t")
	for _, r := range rs {
		if _, ok := r.Extra["pebble_reads"]; !ok {
			continue
		}
		fmt.Fprintf(tw, "store\t%s\t%.2f\t%s\t%.1f%%\t%s\t%.3f\t%.3f\t%.3f\t%.1f%%\t%.0f\t%s\t%.0f\t%.0f\t%.0f\t%.2f\t%s\t\n",
			figure.Count(r.Extra["keys"]), r.Extra["skew"], r.Variant, 100*r.Extra["vc_hit"], figure.Count(r.Extra["vc_entries"]),
			r.Extra["filter_skips"], r.Extra["pebble_reads"], r.Extra["pebble_found"], 100*r.Extra["bc_hit"], r.Extra["read_amp"],
			mib(int64(r.Extra["compaction_debt"])), r.Extra["compactions"], r.Extra["flushes"], r.Extra["stalls"], r.Extra["stall_s"],
			mib(int64(r.Extra["live_bytes"])))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "timeline\tkeys\tskew\tevents\tevents/s per tenth of the events (1st … 10th)\tlast/first\tCPU µs/event per tenth\tlast/first\tmax RSS\tmax store\tend store\tmax compaction debt\t")
	for _, r := range rs {
		first, ok := r.Extra["tenth_1_rate"]
		if !ok || r.Variant != "strand" {
			continue
		}
		var tenths, cpus []string
		for i := 1; i <= 10; i++ {
			tenths = append(tenths, figure.Count(r.Extra[fmt.Sprintf("tenth_%d_rate", i)]))
			cpus = append(cpus, fmt.Sprintf("%.2f", r.Extra[fmt.Sprintf("tenth_%d_cpu_us", i)]))
		}
		fmt.Fprintf(tw, "timeline\t%s\t%.2f\t%d\t%s\t%.2f\t%s\t%.2f\t%s\t%s\t%s\t%s\t\n", figure.Count(r.Extra["keys"]), r.Extra["skew"], r.Events,
			strings.Join(tenths, " "), r.Extra["tenth_10_rate"]/first, strings.Join(cpus, " "), r.Extra["tenth_10_cpu_us"]/r.Extra["tenth_1_cpu_us"],
			mib(int64(r.Extra["timeline_max_rss"])),
			mib(int64(r.Extra["timeline_max_store"])), mib(int64(r.Extra["timeline_end_store"])), mib(int64(r.Extra["timeline_max_debt"])))
	}
	_ = tw.Flush()
}
