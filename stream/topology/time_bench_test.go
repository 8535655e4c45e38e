package topology_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// BenchmarkTTL measures what a TTL costs the write path: the same
// 20,000 events over 2,000 keys folded into a table without a TTL, with
// one (nothing expires: the expiry index is written, never swept), and
// with one where every row expires before the next round (the sweep
// removes them). ns/op is per event.
func BenchmarkTTL(b *testing.B) {
	const events, keys = 20_000, 2_000
	in := make([]tEv, events)
	for i := range in {
		in[i] = tEv{K: fmt.Sprintf("k%04d", i%keys), N: 1}
	}
	for _, mode := range []string{"no-ttl", "ttl", "ttl-expiring"} {
		b.Run(mode, func(b *testing.B) {
			topo := topology.New("bench-ttl")
			src := topology.Source[string](topo, "t/events")
			var opts []topology.TableOption
			if mode != "no-ttl" {
				opts = append(opts, topology.WithTTL(time.Hour))
			}
			tab := topology.NewTable[string, grouptest.TVal](topo, "vals", stream.JSON[grouptest.TVal](), opts...)
			topology.Project(topology.On(src, tEvents), tab, func(v *grouptest.TVal, e tEv) error { v.Sum += e.N; return nil })
			d := topologytest.NewDriver(b, topo, topologytest.WithPartitions(2), topologytest.WithBatchSize(2_000))
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				topologytest.Pipe(d, tEvents, in...)
				if mode == "ttl-expiring" {
					d.AdvanceClock(2 * time.Hour)
				}
				b.StartTimer()
				d.Advance()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
			var expired uint64
			for _, st := range d.App().Stats() {
				expired += st.Total.Expired
			}
			if _, ok, _ := tab.Get(context.Background(), "k0001"); !ok {
				b.Fatal("k0001 missing")
			}
			b.ReportMetric(float64(expired)/float64(b.N), "expired/op")
		})
	}
}
