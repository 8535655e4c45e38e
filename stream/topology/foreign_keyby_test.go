package topology_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/strand-io/strand/internal/proptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// A foreign topic that is not keyed at all (its producer spreads messages
// over the partitions as it likes) is classified by its partition, which
// keeps each partition's order, and KeyBy forwards every event to the
// partition of its customer: the customers table equals the fold of the
// log by customer, each customer's events in the order of their source
// partition.
func TestForeignSourceUnkeyedThroughKeyBy(t *testing.T) {
	placed := stream.DeclareFunc(1, func(e proptest.OrderPlaced) string { return "" }) // keyed by the classifier
	topo := topology.New("unkeyed")
	src := topology.ForeignSource(topo, "shop/unkeyed", func(m stream.ForeignMessage) (stream.Classified[string], error) {
		return stream.Classified[string]{Key: fmt.Sprintf("p%d", m.Partition), Tag: placed.Tag()}, nil
	})
	customers := topology.NewTable[string, proptest.CustomerRow](topo, "customers", stream.JSON[proptest.CustomerRow]())
	byCustomer := topology.KeyBy(topology.On(src, placed), "by-customer", func(e proptest.OrderPlaced) (string, error) { return e.Customer, nil })
	topology.Project(byCustomer, customers, func(v *proptest.CustomerRow, e proptest.OrderPlaced) error {
		v.Orders++
		v.Total += e.Amount
		v.Seen = append(v.Seen, e.Seq)
		return nil
	})

	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(3), topologytest.WithBatchSize(7))
	events := proptest.ShopWorkload(300, 40, 9, 7)
	perPartition := make([][]proptest.OrderPlaced, 3)
	for i, e := range events {
		p := uint32((i * 7919) % 3)
		body, _ := json.Marshal(e)
		d.PipeForeign("shop/unkeyed", stream.ForeignMessage{Partition: p, Payload: body})
		perPartition[p] = append(perPartition[p], e)
	}
	d.Advance()
	got := map[string]proptest.CustomerRow{}
	if err := customers.Scan(context.Background(), func(k string, v proptest.CustomerRow) bool { got[k] = v; return true }); err != nil {
		t.Fatal(err)
	}
	want := map[string]proptest.CustomerRow{}
	for _, e := range events {
		c := want[e.Customer]
		c.Orders++
		c.Total += e.Amount
		want[e.Customer] = c
	}
	for k, c := range got {
		w := want[k]
		if c.Orders != w.Orders || c.Total != w.Total {
			t.Fatalf("customer %s: %+v, want %d orders totalling %d", k, c, w.Orders, w.Total)
		}
		// Per source partition, the customer's events keep their order.
		for p, evs := range perPartition {
			var wantSeq, gotSeq []int
			in := map[int]bool{}
			for _, e := range evs {
				if e.Customer == k {
					wantSeq = append(wantSeq, e.Seq)
					in[e.Seq] = true
				}
			}
			for _, s := range c.Seen {
				if in[s] {
					gotSeq = append(gotSeq, s)
				}
			}
			if !reflect.DeepEqual(gotSeq, wantSeq) {
				t.Fatalf("customer %s, source partition %d: applied %v, want %v", k, p, gotSeq, wantSeq)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d customers, want %d", len(got), len(want))
	}
	if n := len(d.DeadLetters()); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}
