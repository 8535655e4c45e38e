package topology_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// BenchmarkRebuild compares, in one process and under the same load, the
// first processing of a log by a topology with a To, a KeyBy and a ForEach
// (which publish) with its rebuild after a reset (which folds the same
// records into the tables and publishes nothing). Each iteration processes
// the log twice; the figures are events per second of each.
func BenchmarkRebuild(b *testing.B) {
	const events = 20000
	var first, rebuild time.Duration
	for range b.N {
		seen := &calls{n: map[int]int{}}
		topo, _ := resetTopology(true, seen)
		d := topologytest.NewDriver(b, topo, topologytest.WithPartitions(4), topologytest.WithBatchSize(2000))
		for i := range events {
			topologytest.Pipe(d, resetEv, grouptest.Ev{K: fmt.Sprintf("k%d", i%1000), N: i, Amount: int64(i)})
		}
		start := time.Now()
		d.Advance()
		first += time.Since(start)
		d.Reset() // the same topics, the repartition topic included
		start = time.Now()
		d.Advance()
		rebuild += time.Since(start)
		d.Close()
	}
	b.ReportMetric(float64(events*b.N)/first.Seconds(), "first-events/s")
	b.ReportMetric(float64(events*b.N)/rebuild.Seconds(), "rebuild-events/s")
}
