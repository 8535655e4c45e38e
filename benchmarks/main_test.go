package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/testrun"

	"github.com/strand-io/strand/benchmarks/internal/scenario"
	"github.com/strand-io/strand/benchmarks/internal/workload"
)

// The tests here are smoke tests at tiny sizes, so that `go test ./...`
// stays fast; the measurements are made by the runner (run.sh) and by the
// benchmarks in bench_test.go.

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		// Re-executed by runJob: act as the runner's child.
		os.Exit(realMain())
	}
	// The Iggy SDK logs every login through the standard logger.
	iggy.RouteStdLog(slog.New(slog.DiscardHandler))
	testrun.QuietChildren() // the runner's children exit at once under -race
	testrun.Verify(m)
}

// tinyEvents is the events of a smoke test's run: the smallest size that
// still fills several batches of every partition (4000 until issue 33
// item 7).
const tinyEvents = 2000

func tiny(codec workload.Codec) workload.Config {
	w := workload.Default()
	w.Events, w.Accounts = tinyEvents, 200
	return w
}

func TestCoreSmoke(t *testing.T) {
	ctx := context.Background()
	for _, cd := range []workload.Codec{workload.Binary, workload.JSON} {
		o := scenario.CoreOptions{Workload: tiny(cd), Codec: cd, Batch: 300, Dir: t.TempDir()}
		for name, fn := range map[string]func() (scenario.Result, error){
			"strand": func() (scenario.Result, error) { return scenario.CoreStrand(ctx, o) },
			"serial": func() (scenario.Result, error) {
				s := o
				s.Serial = true
				return scenario.CoreStrand(ctx, s)
			},
			"naive":   func() (scenario.Result, error) { return scenario.CoreNaive(ctx, o, 1) },
			"naive-8": func() (scenario.Result, error) { return scenario.CoreNaive(ctx, o, 8) },
		} {
			r, err := fn()
			if err != nil {
				t.Fatalf("%s/%s: %v", name, cd, err)
			}
			if !r.Verified || r.Events != tinyEvents || r.Rate <= 0 || r.Commits == 0 {
				t.Errorf("%s/%s: %+v", name, cd, r)
			}
		}
	}
}

func TestE2ESmoke(t *testing.T) {
	ctx := context.Background()
	o := scenario.E2EOptions{Workload: tiny(workload.Binary), Codec: workload.Binary, Batch: 500, Dir: t.TempDir(), Broker: "memory"}
	for _, drain := range []bool{false, true} {
		r, err := scenario.E2EStrand(ctx, o, drain)
		if err != nil {
			t.Fatalf("strand (drain %v): %v", drain, err)
		}
		if !r.Verified || r.Rate <= 0 {
			t.Errorf("strand (drain %v): %+v", drain, r)
		}
	}
	o.Broker = "disk"
	for _, drain := range []bool{false, true} {
		r, err := scenario.E2ENaive(ctx, o, drain)
		if err != nil {
			t.Fatalf("naive (drain %v): %v", drain, err)
		}
		if !r.Verified || r.Rate <= 0 {
			t.Errorf("naive (drain %v): %+v", drain, r)
		}
	}
}

func TestLatencySmoke(t *testing.T) {
	o := scenario.LatencyOptions{
		E2EOptions: scenario.E2EOptions{Workload: tiny(workload.Binary), Codec: workload.Binary, Batch: 500, Dir: t.TempDir()},
		Rate:       10_000, Duration: 300 * time.Millisecond,
	}
	r, err := scenario.Latency(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Verified || r.Events != 3000 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 {
		t.Errorf("%+v", r)
	}
}

func TestRestartSmoke(t *testing.T) {
	ctx := context.Background()
	o := scenario.RestartOptions{Keys: 1000, Partitions: 4, Codec: workload.Binary, Batch: 50, Dir: t.TempDir()} // 3000 keys until issue 33 item 7
	s, err := scenario.NewRestartStore(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove()
	for range 3 {
		tm, err := s.Resume(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tm.Total <= 0 || tm.FirstBatch <= 0 || tm.Total < tm.FirstBatch {
			t.Errorf("timing %+v", tm)
		}
	}
	r, err := scenario.RestartProcessor(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Verified || r.Seconds <= 0 {
		t.Errorf("processor restart: %+v", r)
	}
}

// TestRunner runs the runner itself, with every measurement in a child
// process (this test binary, re-executed), and checks the table.
func TestRunner(t *testing.T) {
	// In parallel with TestScaleRunner: both check that the runner's
	// scenarios run and verify their results, not their figures (the CPU
	// and RSS they print are the process's, shared).
	t.Parallel()
	var out, errOut bytes.Buffer
	rec := t.TempDir()
	// The smallest sizes that go through every scenario, and one codec
	// (TestCoreSmoke runs both; issue 33 item 7: 3000 events, 2000 restart
	// keys, 200 ms latency runs and both codecs before).
	cfg, err := parseFlags([]string{"-scenario", "all", "-events", "1000", "-accounts", "100", "-batch", "100", "-codecs", "binary",
		"-restart-keys", "500", "-latency-duration", "100ms", "-latency-share", "0.25,0.5", "-dir", t.TempDir(), "-record", rec}, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), cfg, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	checkRecords(t, rec, "core", "e2e", "latency", "restart")
	s := out.String()
	t.Log("\n" + s)
	for _, want := range []string{"core", "naive-8", "e2e", "strand-drain", "naive-drain", "publish→queryable", "restart (binary", "× naive"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "false") {
		t.Errorf("a measurement was not verified:\n%s", s)
	}
}

func TestFlags(t *testing.T) {
	var errOut bytes.Buffer
	for _, bad := range [][]string{
		{"-events", "0"}, {"-skew", "1"}, {"-codecs", "xml"}, {"-broker", "cloud"}, {"-scenario", "nope", "-quick"},
		{"-latency-share", "0.5,x"}, {"-reps", "0"},
	} {
		cfg, err := parseFlags(bad, &errOut)
		if err == nil {
			_, err = scenarios(cfg.scenario)
		}
		if err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	cfg, err := parseFlags([]string{"-quick"}, &errOut)
	if err != nil || cfg.events != 100_000 || cfg.restartKeys != 100_000 {
		t.Errorf("-quick: %+v, %v", cfg, err)
	}
	cfg, err = parseFlags([]string{"-quick", "-events", "7"}, &errOut)
	if err != nil || cfg.events != 7 {
		t.Errorf("-quick -events 7: %+v, %v", cfg, err)
	}
}

func TestMedian(t *testing.T) {
	rs := []scenario.Result{
		{Scenario: "core", Rate: 3, Verified: true},
		{Scenario: "core", Rate: 1, Verified: true},
		{Scenario: "core", Rate: 2, Verified: true, Extra: map[string]float64{"x": 1}},
	}
	m := median(rs)
	if m.Rate != 2 || m.Extra["min"] != 1 || m.Extra["max"] != 3 || m.Extra["runs"] != 3 || m.Extra["x"] != 1 || !m.Verified {
		t.Errorf("median %+v", m)
	}
	if rs[2].Extra["runs"] != 0 {
		t.Error("median changed its input")
	}
	rs[0].Verified = false
	if median(rs).Verified {
		t.Error("median of an unverified run set is verified")
	}
	lat := median([]scenario.Result{{Scenario: "latency", P99: 9}, {Scenario: "latency", P99: 5}})
	if lat.P99 != 9 { // upper median of two
		t.Errorf("latency median p99 %v", lat.P99)
	}
}

func TestScaleSmoke(t *testing.T) {
	ctx := context.Background()
	w := tiny(workload.Binary)
	w.Events, w.Accounts, w.Skew = 3000, 1000, 1.01
	o := scenario.ScaleOptions{Workload: w, Codec: workload.Binary, Batch: 200, Dir: t.TempDir()}
	for name, fn := range map[string]func(context.Context, scenario.ScaleOptions) (scenario.Result, error){
		"strand": scenario.ScaleStrand, "naive": scenario.ScaleNaive, "input": scenario.ScaleInput,
	} {
		r, err := fn(ctx, o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !r.Verified || r.Events != 3000 || r.Rate <= 0 || r.Extra["keys"] != 1000 || r.InputBytes <= 0 || r.Extra["batches"] <= 0 {
			t.Errorf("%s: %+v", name, r)
		}
		if name != "input" && r.Commits == 0 {
			t.Errorf("%s: no commits", name)
		}
	}
}

// TestScaleRunner runs the scale scenario through the runner, children
// included, and checks its table.
func TestScaleRunner(t *testing.T) {
	t.Parallel() // see TestRunner
	var out, errOut bytes.Buffer
	cfg, err := parseFlags([]string{"-scenario", "scale", "-events", "2000", "-scale-keys", "500,1000", "-scale-skews", "1.1",
		"-scale-per-key", "3", "-batch", "300", "-dir", t.TempDir()}, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), cfg, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	s := out.String()
	t.Log("\n" + s)
	for _, want := range []string{"scale", "500", "1k", "3000", "input", "× naive", "1000 keys touched"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "false") {
		t.Errorf("a measurement was not verified:\n%s", s)
	}
	for _, bad := range [][]string{{"-scale-keys", "0"}, {"-scale-skews", "1"}, {"-scale-per-key", "0"}} {
		if _, err := parseFlags(bad, &errOut); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// checkRecords checks that -record wrote one file per scenario, each with
// verified results of its scenario only.
func checkRecords(t *testing.T, dir string, want ...string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) != len(want) {
		t.Fatalf("-record wrote %v (%v); want one file for each of %v", files, err, want)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !slices.Contains(want, rec.Scenario) || !strings.HasPrefix(filepath.Base(f), rec.Scenario+"-") {
			t.Errorf("%s holds scenario %q", f, rec.Scenario)
		}
		if len(rec.Results) == 0 || len(rec.Runs) != len(rec.Results) || rec.Machine == "" || len(rec.Args) == 0 {
			t.Errorf("%s: %d results, %d runs, machine %q, args %q", f, len(rec.Results), len(rec.Runs), rec.Machine, rec.Args)
		}
		for _, r := range rec.Results {
			if ownerOf(r.Scenario) == nil || ownerOf(r.Scenario).name != rec.Scenario || !r.Verified {
				t.Errorf("%s: result %s/%s (verified %v) in the record of %s", f, r.Scenario, r.Variant, r.Verified, rec.Scenario)
			}
		}
	}
}

func TestRegistry(t *testing.T) {
	for _, d := range registry {
		if lookup(d.name) != d || d.plan == nil || d.measures == "" || d.baseline == "" || (d.measure == nil) == (d.variants == nil) {
			t.Errorf("scenario %q is incomplete: a plan, what it measures, a baseline, and either measure or variants", d.name)
		}
	}
	for jobScenario, want := range map[string]string{"core": "core", "e2e": "e2e", "latency": "latency", "restart": "restart",
		"scale:10000:1.1:30000": "scale"} {
		if d := ownerOf(jobScenario); d == nil || d.name != want {
			t.Errorf("ownerOf(%q) = %v; want %s", jobScenario, d, want)
		}
	}
	if _, err := measureOne(context.Background(), config{}, job{"nope", "strand", "binary"}); err == nil {
		t.Error("measureOne of an unknown scenario succeeded")
	}
	if _, err := measureOne(context.Background(), config{}, job{"core", "nope", "binary"}); err == nil {
		t.Error("measureOne of an unknown variant succeeded")
	}
	all, err := scenarios("all")
	if err != nil || len(all) != 4 {
		t.Errorf("all = %d scenarios, %v; want core, e2e, latency, restart", len(all), err)
	}
	var out bytes.Buffer
	listScenarios(&out)
	for _, d := range registry {
		if !strings.Contains(out.String(), d.name+"") || !strings.Contains(out.String(), d.measures) {
			t.Errorf("-list lacks %s", d.name)
		}
	}
}
