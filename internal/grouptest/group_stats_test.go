package grouptest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// lose takes p (held with e) from the member: it no longer owns it, and
// the instance is told so (as when its lease ran out).
func (f *fakeMember) lose(p uint32, e connector.Epoch) {
	f.mu.Lock()
	delete(f.owns, p)
	f.mu.Unlock()
	f.ch <- connector.Assignment{Kind: connector.Lost, Partition: p, Epoch: e, Reason: connector.Expired}
}

// An instance's Stats hold only the partitions it serves: once a partition
// with a parked key moves away, the key is its new owner's to retry, and
// the old owner neither lists the partition nor counts the key (the
// generator's group cases, seed 13, found an old owner still counting it:
// a group that had settled looked as if it waited for a retry). The
// partition it keeps stays listed, its counters intact.
func TestGroupStatsHoldOnlyServedPartitions(t *testing.T) {
	ctx := context.Background()
	cl := Broker(t)
	const parts = 2
	if err := cl.EnsureTopic(ctx, "ps", "log", parts); err != nil {
		t.Fatal(err)
	}
	decl := stream.DeclareFunc(1, EvKey)
	// A failed key is retried only after an hour: it stays parked.
	topo := topology.New("parkstats", topology.WithRetry(5, time.Hour, time.Hour))
	src := topology.Source[string](topo, "ps/log")
	n := topology.NewTable[string, int64](topo, "n", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), n, func(v *int64, e Ev) error {
		if e.K == "bad" {
			return errors.New("refused")
		}
		*v += e.Amount
		return nil
	})
	bad := connector.PartitionOf([]byte("bad"), parts)
	good := "good"
	for connector.PartitionOf([]byte(good), parts) == bad {
		good += "+"
	}
	kept := 1 - bad

	m := newFakeMember(1)
	m.grant(0, 1)
	m.grant(1, 1)
	dir := t.TempDir()
	app, err := topology.Open(ctx, topo, cl, dir, topology.WithGroup(m), topology.WithLogger(testLogger(t, "a")))
	if err != nil {
		t.Fatal(err)
	}
	in := runInstance(t, "a", dir, app)
	defer in.close(t)

	pub, err := iggy.NewPublisher(ctx, cl, "ps", "log")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close(ctx) }()
	for i, k := range []string{"bad", good, good} {
		if err := iggy.Publish(ctx, pub, decl, Ev{K: k, Amount: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	partition := func(p uint32) (stream.PartitionStats, bool) {
		for _, ps := range app.Stats()[0].Partitions {
			if ps.Partition == p {
				return ps, true
			}
		}
		return stream.PartitionStats{}, false
	}
	waitUntil(t, "a parked key on the bad partition, the kept one at offset 2", 30*time.Second, func() bool {
		b, okb := partition(bad)
		g, okg := partition(kept)
		return okb && b.ParkedKeys == 1 && okg && g.Next == 2
	})
	if st := app.Stats()[0]; st.ParkedKeys != 1 || st.ParkedRecords != 1 {
		t.Fatalf("before the move: %d parked keys (%d records), want 1 (1)", st.ParkedKeys, st.ParkedRecords)
	}

	// The partition of the parked key moves away.
	m.lose(bad, 1)
	waitUntil(t, "the bad partition to move away", 30*time.Second, func() bool { return app.Phase(bad) == topology.NotOwned })
	st := app.Stats()[0]
	if st.ParkedKeys != 0 || st.ParkedRecords != 0 {
		t.Errorf("after partition %d moved away: %d parked keys (%d records), want none", bad, st.ParkedKeys, st.ParkedRecords)
	}
	if ps, ok := partition(bad); ok {
		t.Errorf("after partition %d moved away, Stats still list it: %+v", bad, ps)
	}
	if g, ok := partition(kept); !ok || g.Next != 2 || g.Applied != 2 {
		t.Errorf("partition %d, still served: %+v (listed %v), want next 2, 2 applied", kept, g, ok)
	}
	if st.Total.Applied != 2 || st.Total.Failures == 0 {
		t.Errorf("total counters %+v: want the work done, the moved partition's included (2 applied, a failure)", st.Total)
	}
}
