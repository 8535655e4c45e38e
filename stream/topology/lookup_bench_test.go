package topology_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

type benchTx struct {
	K   uint64 `json:"k"`
	Amt int64  `json:"amt"`
}

type benchRate struct {
	K    uint64 `json:"k"`
	Rate int64  `json:"rate"`
}

type benchSum struct {
	Sum int64 `json:"sum"`
	N   int64 `json:"n"`
}

// lookupBenchTopology is the lookup benchmark's topology: transactions
// (Relaxed, not reduced) folded into sums, rates set now and then by an
// Acquire-fenced type of the same source, tiers from a source of their
// own (mode "global": a global source, SourceNode.Global). With lookups
// (modes "lookups" and "global") the fold reads the key's rate and tier
// (two lookups per event); without ("plain"), it folds the amount alone,
// over the same tables and writes.
func lookupBenchTopology(mode string) (*topology.Topology, *stream.Event[uint64, benchTx], *stream.Event[uint64, benchRate], *stream.Event[uint64, benchRate], *topology.Table[uint64, benchSum]) {
	topo := topology.New("lookup-bench")
	tx := stream.DeclareFunc[uint64](1, func(e benchTx) uint64 { return e.K })
	rate := stream.DeclareFunc[uint64](2, func(e benchRate) uint64 { return e.K }, stream.WithFence(planner.Acquire))
	tier := stream.DeclareFunc[uint64](1, func(e benchRate) uint64 { return e.K })
	rates := topology.NewTable[uint64, int64](topo, "rates", stream.JSON[int64]())
	tiers := topology.NewTable[uint64, int64](topo, "tiers", stream.JSON[int64]())
	sums := topology.NewTable[uint64, benchSum](topo, "sums", stream.JSON[benchSum]())
	src := topology.Source[uint64](topo, "bench/tx")
	topology.Project(topology.On(src, rate), rates, func(v *int64, e benchRate) error { *v = e.Rate; return nil })
	tierSrc := topology.Source[uint64](topo, "bench/tiers")
	if mode == "global" {
		tierSrc.Global()
	}
	topology.Project(topology.On(tierSrc, tier), tiers, func(v *int64, e benchRate) error { *v = e.Rate; return nil })
	s := topology.On(src, tx)
	if mode == "plain" {
		topology.ProjectContext(s, sums, func(_ context.Context, v *benchSum, e benchTx) error {
			v.Sum += e.Amt
			v.N++
			return nil
		})
		return topo, tx, rate, tier, sums
	}
	topology.ProjectContext(s.Reads(rates, tiers), sums, func(ctx context.Context, v *benchSum, e benchTx) error {
		r, _, err := topology.Lookup(ctx, rates, e.K)
		if err != nil {
			return err
		}
		t, _, err := topology.Lookup(ctx, tiers, e.K)
		if err != nil {
			return err
		}
		v.Sum += e.Amt*(1+r) + t
		v.N++
		return nil
	})
	return topo, tx, rate, tier, sums
}

// BenchmarkLookupFold compares a fold that reads two other tables per event
// (one its own source writes, one another source writes: "lookups"; or a
// global table, read as last committed: "global") with the same fold
// without lookups ("plain"), through the engine's tasks (NoSync commits, to compare
// CPU rather than fsyncs; batches of 10,000). STRAND_BENCH_EVENTS (default
// 200,000) and STRAND_BENCH_ACCOUNTS (keys, default 10,000) change the
// workload.
//
//	go test -run '^$' -bench LookupFold -benchtime 1x ./stream/topology/
func BenchmarkLookupFold(b *testing.B) {
	n := envInt("STRAND_BENCH_EVENTS", 200_000)
	keys := envInt("STRAND_BENCH_ACCOUNTS", 10_000)
	for _, mode := range []string{"plain", "lookups", "global"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				topo, txDecl, rateDecl, tierDecl, sums := lookupBenchTopology(mode)
				d := newTaskDriver(b, topo, tdBatchSize(10_000), tdStateOptions(state.WithDurability(state.NoSync)))
				r := rand.New(rand.NewPCG(1, 2))
				for k := range keys {
					tdPipeTo(d, "bench/tiers", tierDecl, benchRate{K: uint64(k), Rate: int64(k % 7)})
				}
				d.Advance()
				for range n {
					k := uint64(r.IntN(keys))
					if r.IntN(100) == 0 {
						tdPipeTo(d, "bench/tx", rateDecl, benchRate{K: k, Rate: int64(r.IntN(5))})
						continue
					}
					tdPipeTo(d, "bench/tx", txDecl, benchTx{K: k, Amt: int64(r.IntN(100))})
				}
				t0, c0 := time.Now(), cpuTime()
				b.StartTimer()
				d.Advance()
				b.StopTimer()
				el, cpu := time.Since(t0), cpuTime()-c0
				b.ReportMetric(float64(n)/el.Seconds(), "events/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/event")
				var total int64
				if err := sums.Scan(context.Background(), func(_ uint64, v benchSum) bool { total += v.N; return true }); err != nil {
					b.Fatal(err)
				}
				if total == 0 || total > int64(n) {
					b.Fatalf("%d events folded of %d", total, n)
				}
				d.Close()
				b.StartTimer()
			}
		})
	}
}
