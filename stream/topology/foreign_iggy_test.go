package topology_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
)

// The orders of a shop that publishes plain JSON to Iggy with the official
// SDK, keyed by order id (messages-key partitioning), with typed headers
// and no strand headers at all.

type shopEvent struct {
	Type   string `json:"type"`
	Order  string `json:"order"`
	Amount int64  `json:"amount,omitempty"`
}

type shopOrder struct {
	Lines  int
	Total  int64
	Status string
}

func (e shopEvent) Key() string { return e.Order }

var (
	shopPlaced = stream.Declare[string, shopEvent](1, stream.WithFence(planner.Acquire))
	shopLine   = stream.Declare[string, shopEvent](2)
	shopPaid   = stream.Declare[string, shopEvent](3, stream.WithFence(planner.Release))
)

func classifyShop(m stream.ForeignMessage) (stream.Classified[string], error) {
	var e shopEvent
	if err := json.Unmarshal(m.Payload, &e); err != nil {
		return stream.Classified[string]{}, errors.New("payload is not JSON")
	}
	tags := map[string]stream.Classified[string]{"placed": {Tag: shopPlaced.Tag()}, "line": {Tag: shopLine.Tag()}, "paid": {Tag: shopPaid.Tag()}}
	c, ok := tags[e.Type]
	if !ok {
		return c, fmt.Errorf("event type %q unknown", e.Type)
	}
	c.Key = e.Order
	return c, nil
}

func foldShop(o *shopOrder, e shopEvent) {
	switch e.Type {
	case "placed":
		o.Status = "placed"
	case "line":
		o.Lines++
		o.Total += e.Amount
	case "paid":
		o.Status = "paid"
	}
}

func shopTopology() (*topology.Topology, *topology.Table[string, shopOrder]) {
	topo := topology.New("shop")
	src := topology.ForeignSource(topo, "shop/orders", classifyShop)
	orders := topology.NewTable[string, shopOrder](topo, "orders", stream.JSON[shopOrder]())
	for _, decl := range []*stream.Event[string, shopEvent]{shopPlaced, shopLine, shopPaid} {
		topology.Project(topology.On(src, decl), orders, func(o *shopOrder, e shopEvent) error { foldShop(o, e); return nil })
	}
	return topo, orders
}

// TestForeignSourceEndToEnd: a plain SDK producer, the embedded broker, the
// connector's foreign source, the front door: the table equals the
// sequential fold, and the one message the classifier refuses is in the
// dead-letter topic with its own headers, kinds and all.
func TestForeignSourceEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.EnsureTopic(ctx, "shop", "orders", 3); err != nil {
		t.Fatal(err)
	}

	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	if _, err := sdk.LoginUser("iggy", "iggy"); err != nil {
		t.Fatal(err)
	}
	sid, _ := iggcon.NewIdentifier("shop")
	tid, _ := iggcon.NewIdentifier("orders")
	ctype, _ := iggcon.NewHeaderKeyString("content-type")
	headers := func(i int) []iggcon.HeaderEntry {
		return []iggcon.HeaderEntry{
			{Key: ctype, Value: iggcon.HeaderValue{Kind: iggcon.String, Value: []byte("application/json")}},
			{Key: iggcon.NewHeaderKeyInt32(7), Value: iggcon.HeaderValue{Kind: iggcon.Uint32, Value: []byte{byte(i), 0, 0, 0}}},
		}
	}
	send := func(key string, body []byte, hs []iggcon.HeaderEntry) {
		t.Helper()
		m, err := iggcon.NewIggyMessage(body, iggcon.WithUserHeaders(hs))
		if err != nil {
			t.Fatal(err)
		}
		part, _ := iggcon.EntityIdString(key)
		if err := sdk.SendMessages(sid, tid, part, []iggcon.IggyMessage{m}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]shopOrder{}
	for i := range 60 {
		order := fmt.Sprintf("o-%d", i%7)
		e := shopEvent{Type: "line", Order: order, Amount: int64(i)}
		switch {
		case i < 7:
			e = shopEvent{Type: "placed", Order: order}
		case i >= 53:
			e = shopEvent{Type: "paid", Order: order}
		}
		body, _ := json.Marshal(e)
		send(order, body, headers(i))
		o := want[order]
		foldShop(&o, e)
		want[order] = o
	}
	send("o-3", []byte("<order id='o-3'/>"), headers(99))

	topo, orders := shopTopology()
	app, err := topology.Open(ctx, topo, client, t.TempDir(), topology.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]shopOrder{}
	if err := orders.Scan(ctx, func(k string, v shopOrder) bool { got[k] = v; return true }); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("orders %+v\nsequential fold %+v", got, want)
	}

	var dls []deadletter.Letter
	for p := range uint32(3) {
		msgs, err := client.Tail(ctx, "shop", "orders.dlq", p, math.MaxInt32)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			d, err := deadletter.Parse(connector.Message{ID: m.ID, Headers: m.Headers, Payload: m.Payload})
			if err != nil {
				t.Fatal(err)
			}
			dls = append(dls, d)
		}
	}
	wantRaw := []connector.Field{
		{Name: "content-type", Value: []byte("application/json"), ValueKind: connector.FieldString},
		{Name: "\x07\x00\x00\x00", Value: []byte{99, 0, 0, 0}, NameKind: connector.FieldInt32, ValueKind: connector.FieldUint32},
	}
	if len(dls) != 1 || dls[0].Reason != deadletter.ReasonUnclassified || dls[0].Raw == nil || !reflect.DeepEqual(dls[0].Raw.Headers, wantRaw) ||
		string(dls[0].Payload) != "<order id='o-3'/>" || dls[0].Source != "shop/orders" {
		t.Fatalf("dead letters %v", dls)
	}
}
