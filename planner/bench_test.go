package planner_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/strand-io/strand/planner"
)

// benchBatch is a batch of n records over 100 keys and 4 types in which
// 10% of the records are fences (Acquire, Release or AcqRel).
func benchBatch(n int) []planner.Record[uint64] {
	rng := rand.New(rand.NewPCG(42, uint64(n)))
	batch := make([]planner.Record[uint64], n)
	fences := []planner.Ordering{planner.Acquire, planner.Release, planner.AcqRel}
	for i := range batch {
		o := planner.Relaxed
		if rng.IntN(10) == 0 {
			o = fences[rng.IntN(len(fences))]
		}
		batch[i] = planner.Record[uint64]{Key: rng.Uint64N(100) * 0x9e3779b97f4a7c15, Tag: planner.Tag(rng.IntN(4)), Ordering: o}
	}
	return batch
}

// BenchmarkNew plans a fresh batch each time, allocating a new plan.
func BenchmarkNew(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		batch := benchBatch(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				planner.New(batch)
			}
			reportPerRecord(b, n)
		})
	}
}

// BenchmarkPlanner plans with a warm, reused Planner: the hot path of a
// partition pipeline.
func BenchmarkPlanner(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		batch := benchBatch(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var pl planner.Planner[uint64]
			pl.Plan(batch) // warm up
			b.ReportAllocs()
			for b.Loop() {
				pl.Plan(batch)
			}
			reportPerRecord(b, n)
		})
	}
}

// BenchmarkPlannerStringKeys is BenchmarkPlanner with keys of 16-byte
// strings, as when planning from raw key bytes.
func BenchmarkPlannerStringKeys(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		src := benchBatch(n)
		batch := make([]planner.Record[string], n)
		for i, r := range src {
			batch[i] = planner.Record[string]{Key: fmt.Sprintf("account-%08d", r.Key%1_000_000), Tag: r.Tag, Ordering: r.Ordering}
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var pl planner.Planner[string]
			pl.Plan(batch)
			b.ReportAllocs()
			for b.Loop() {
				pl.Plan(batch)
			}
			reportPerRecord(b, n)
		})
	}
}

func reportPerRecord(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
}
