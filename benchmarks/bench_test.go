package main

import (
	"context"
	"flag"
	"testing"

	"github.com/strand-io/strand/benchmarks/internal/scenario"
	"github.com/strand-io/strand/benchmarks/internal/workload"
)

// Sizes of the Go benchmarks. The issues' sizes (1,000,000 events) are the
// runner's (run.sh); these default to a tenth so that
// `go test -bench . ./benchmarks/` stays a few minutes, except the restart
// benchmark, which needs the full 1,000,000 keys to mean anything. Set them
// after -args:
//
//	go test ./benchmarks/ -run '^$' -bench . -args -bench.events=1000000
var (
	benchEvents      = flag.Int("bench.events", 100_000, "events per iteration of BenchmarkCore and BenchmarkE2E")
	benchRestartKeys = flag.Int("bench.restart-keys", 1_000_000, "keys of state in BenchmarkRestart's store")
)

func benchWorkload() workload.Config {
	w := workload.Default()
	w.Events = *benchEvents
	return w
}

// BenchmarkCore runs the accounts workload through stream.Task per
// partition (no broker) and through the naive consumer, per codec. One
// iteration is one whole run on a fresh store; events/s is measured over
// the processing alone (store setup and read-back excluded).
func BenchmarkCore(b *testing.B) {
	ctx := context.Background()
	for _, cd := range []workload.Codec{workload.Binary, workload.JSON} {
		o := scenario.CoreOptions{Workload: benchWorkload(), Codec: cd, Batch: 5000, Dir: b.TempDir()}
		if _, err := o.PrepareLog(); err != nil {
			b.Fatal(err)
		}
		for _, v := range []struct {
			name string
			fn   func() (scenario.Result, error)
		}{
			{"strand", func() (scenario.Result, error) { return scenario.CoreStrand(ctx, o) }},
			{"naive", func() (scenario.Result, error) { return scenario.CoreNaive(ctx, o, 1) }},
			{"naive-8", func() (scenario.Result, error) { return scenario.CoreNaive(ctx, o, 8) }},
		} {
			b.Run(v.name+"/"+string(cd), func(b *testing.B) {
				report(b, v.fn)
			})
		}
	}
}

// BenchmarkE2E runs the workload (binary codec) through the embedded broker
// in memory: producer and consumer concurrently, or the consumer alone on a
// pre-published log (drain), for stream.Processor and the naive consumer.
func BenchmarkE2E(b *testing.B) {
	ctx := context.Background()
	o := scenario.E2EOptions{Workload: benchWorkload(), Codec: workload.Binary, Batch: 5000, Dir: b.TempDir(), Broker: "memory"}
	b.Run("strand", func(b *testing.B) {
		report(b, func() (scenario.Result, error) { return scenario.E2EStrand(ctx, o, false) })
	})
	b.Run("strand-drain", func(b *testing.B) {
		report(b, func() (scenario.Result, error) { return scenario.E2EStrand(ctx, o, true) })
	})
	b.Run("naive", func(b *testing.B) {
		report(b, func() (scenario.Result, error) { return scenario.E2ENaive(ctx, o, false) })
	})
	b.Run("naive-drain", func(b *testing.B) {
		report(b, func() (scenario.Result, error) { return scenario.E2ENaive(ctx, o, true) })
	})
}

// report runs fn b.N times and reports the mean rate of its measured
// sections.
func report(b *testing.B, fn func() (scenario.Result, error)) {
	var events, secs float64
	for b.Loop() {
		r, err := fn()
		if err != nil {
			b.Fatal(err)
		}
		events += float64(r.Events)
		secs += r.Seconds
	}
	b.ReportMetric(events/secs, "events/s")
	b.ReportMetric(secs*1e3/float64(b.N), "ms/run")
}

// BenchmarkRestart reopens a store holding -bench.restart-keys accounts
// (built once, outside the timer) and processes one new batch of 1,000
// deposits per partition from the checkpoints; one iteration is one
// restart: state.Open, Attach, a Task per partition, the batch and its
// commit (closing the store afterwards is excluded from the time).
func BenchmarkRestart(b *testing.B) {
	ctx := context.Background()
	s, err := scenario.NewRestartStore(ctx, scenario.RestartOptions{
		Keys: *benchRestartKeys, Partitions: 8, Codec: workload.Binary, Batch: 1000, Dir: b.TempDir(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Remove()
	var open, first, total float64
	b.ResetTimer()
	for range b.N {
		tm, err := s.Resume(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer() // the Close inside Resume is not part of a restart
		open += tm.Open.Seconds()
		first += tm.FirstBatch.Seconds()
		total += tm.Total.Seconds()
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(total*1e3/n, "ms/restart")
	b.ReportMetric(open*1e3/n, "ms/open")
	b.ReportMetric(first*1e3/n, "ms/first-batch")
}
