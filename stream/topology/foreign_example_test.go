package topology_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// PaymentEvent is what a payment service, which knows nothing of strand,
// publishes as JSON: the kind of event is a field of the document.
type PaymentEvent struct {
	Kind     string `json:"kind"`
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

// ExampleForeignSource reads a topic written by such a service: the
// classifier gives each message its key and type tag (and would give a fence
// or a sequence number); the declarations, projections and tables are the
// usual ones. A message it cannot classify is a dead letter.
func ExampleForeignSource() {
	charged := stream.DeclareFunc(1, func(e PaymentEvent) string { return e.Customer })
	refunded := stream.DeclareFunc(2, func(e PaymentEvent) string { return e.Customer }, stream.WithFence(planner.Release))

	topo := topology.New("payments")
	src := topology.ForeignSource(topo, "billing/payments", func(m stream.ForeignMessage) (stream.Classified[string], error) {
		var e PaymentEvent
		if err := json.Unmarshal(m.Payload, &e); err != nil {
			return stream.Classified[string]{}, errors.New("not a JSON payment event")
		}
		switch e.Kind {
		case "charge":
			return stream.Classified[string]{Key: e.Customer, Tag: charged.Tag()}, nil
		case "refund":
			return stream.Classified[string]{Key: e.Customer, Tag: refunded.Tag()}, nil
		}
		return stream.Classified[string]{}, fmt.Errorf("unknown kind %q", e.Kind)
	})
	spent := topology.NewTable[string, int64](topo, "spent", stream.JSON[int64]())
	topology.Project(topology.On(src, charged), spent, func(v *int64, e PaymentEvent) error { *v += e.Cents; return nil })
	topology.Project(topology.On(src, refunded), spent, func(v *int64, e PaymentEvent) error { *v -= e.Cents; return nil })

	tb := &exampleTB{}
	defer tb.done()
	d := topologytest.NewDriver(tb, topo)
	for _, doc := range []string{
		`{"kind":"charge","customer":"ada","cents":1200}`,
		`{"kind":"charge","customer":"ada","cents":300}`,
		`{"kind":"refund","customer":"ada","cents":200}`,
		`{"kind":"chargeback","customer":"ada","cents":50}`,
	} {
		d.PipeForeign("billing/payments", stream.ForeignMessage{Payload: []byte(doc)})
	}
	d.Advance()

	v, _, err := spent.Get(context.Background(), "ada")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ada spent", v)
	for _, dl := range d.DeadLetters() {
		fmt.Printf("dead letter at offset %d: %s\n", dl.Offset, dl.Reason)
	}
	// Output:
	// ada spent 1300
	// dead letter at offset 3: unclassified
}
