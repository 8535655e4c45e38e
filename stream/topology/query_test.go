package topology_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// A table's rows are filed under connector.PartitionOf(its key bytes, its
// partition count); ScanPartition reads them partition by partition in key
// byte order, resumes after given key bytes, and together the partitions
// hold what Scan sees.
func TestScanPartitionAndKeyPlacement(t *testing.T) {
	ctx := context.Background()
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	topo := topology.New("placement")
	src := topology.Source[string](topo, "p/log")
	n := topology.NewTable[string, int64](topo, "n", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), n, func(v *int64, e grouptest.Ev) error { *v += e.Amount; return nil })
	if n.Partitions() != 0 {
		t.Fatalf("Partitions before Open = %d", n.Partitions())
	}
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(5))
	var evs []grouptest.Ev
	for i := range 500 {
		evs = append(evs, grouptest.Ev{K: fmt.Sprintf("key-%d", i%97), Amount: 1})
	}
	topologytest.Pipe(d, decl, evs...)
	d.Advance()
	if n.Partitions() != 5 {
		t.Fatalf("Partitions = %d, want 5", n.Partitions())
	}
	all := map[string]int64{}
	if err := n.Scan(ctx, func(k string, v int64) bool { all[k] = v; return true }); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int64{}
	for p := range uint32(5) {
		var last []byte
		var keys [][]byte
		err := n.ScanPartition(ctx, p, nil, func(kb []byte, k string, v int64) bool {
			want, err := n.AppendKey(nil, k)
			if err != nil || !bytes.Equal(kb, want) || connector.PartitionOf(kb, 5) != p {
				t.Fatalf("row %q in partition %d: key bytes %q (%v), its partition %d", k, p, want, err, connector.PartitionOf(kb, 5))
			}
			if last != nil && bytes.Compare(last, kb) >= 0 {
				t.Fatalf("partition %d: %q after %q", p, kb, last)
			}
			last = bytes.Clone(kb)
			keys = append(keys, last)
			seen[k] = v
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 2 {
			got := 0
			_ = n.ScanPartition(ctx, p, keys[1], func([]byte, string, int64) bool { got++; return true })
			if got != len(keys)-2 {
				t.Fatalf("partition %d after its second key: %d rows, want %d", p, got, len(keys)-2)
			}
		}
	}
	if fmt.Sprint(seen) != fmt.Sprint(all) || len(all) != 97 {
		t.Fatalf("partitions hold %d keys, Scan %d", len(seen), len(all))
	}
	if _, err := n.AppendKey(nil, ""); err == nil {
		t.Fatal("AppendKey of an empty key succeeded")
	}
	d.Close()
	if err := n.ScanPartition(ctx, 0, nil, func([]byte, string, int64) bool { return true }); !errors.Is(err, topology.ErrNotOpen) {
		t.Fatalf("ScanPartition after Close = %v, want ErrNotOpen", err)
	}
}
