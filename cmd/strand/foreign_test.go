package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

type order struct {
	Type  string `json:"type"`
	Order string `json:"order"`
	Cents int64  `json:"cents"`
}

// TestForeignDeadLettersListAndReplay: a plain producer (the official SDK,
// typed headers, partitions of its own choosing) writes a topic a foreign
// source reads; the messages its classifier refuses are listed with their
// reason, and replayed to the partitions they were read from with their
// own headers, kinds and bytes unchanged, exactly once.
func TestForeignDeadLettersListAndReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := iggytest.NewServer(iggytest.WithCredentials(testUser, testPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials(testUser, testPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.EnsureTopic(ctx, "f", "orders", 3); err != nil {
		t.Fatal(err)
	}
	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	if _, err := sdk.LoginUser(testUser, testPassword); err != nil {
		t.Fatal(err)
	}
	sid, _ := iggcon.NewIdentifier("f")
	tid, _ := iggcon.NewIdentifier("orders")
	hkey, _ := iggcon.NewHeaderKeyString("origin")
	send := func(part uint32, body string, i int) {
		t.Helper()
		m, err := iggcon.NewIggyMessage([]byte(body), iggcon.WithUserHeaders([]iggcon.HeaderEntry{
			{Key: hkey, Value: iggcon.HeaderValue{Kind: iggcon.String, Value: []byte("webshop")}},
			{Key: iggcon.NewHeaderKeyInt32(int32(i)), Value: iggcon.HeaderValue{Kind: iggcon.Bool, Value: []byte{1}}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		if err := sdk.SendMessages(sid, tid, iggcon.PartitionId(part), []iggcon.IggyMessage{m}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		b, _ := json.Marshal(order{Type: "placed", Order: fmt.Sprintf("o-%d", i%3), Cents: int64(i)})
		send(uint32(i%3), string(b), i)
	}
	send(2, "not json", 100)
	send(0, "{broken", 101)
	send(1, `{"type":"refund","order":"o-1","cents":5}`, 102)

	topo := topology.New("orders")
	placed := stream.DeclareFunc(1, func(o order) string { return o.Order })
	src := topology.ForeignSource(topo, "f/orders", func(m stream.ForeignMessage) (stream.Classified[string], error) {
		var o order
		if err := json.Unmarshal(m.Payload, &o); err != nil {
			return stream.Classified[string]{}, errors.New("not an order document")
		}
		tag := placed.Tag()
		if o.Type != "placed" {
			tag = 9
		}
		return stream.Classified[string]{Key: o.Order, Tag: tag}, nil
	})
	sums := topology.NewTable[string, int64](topo, "sums", stream.JSON[int64]())
	topology.Project(topology.On(src, placed), sums, func(v *int64, o order) error { *v += o.Cents; return nil })
	app, err := topology.Open(ctx, topo, cl, t.TempDir(), topology.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}

	originals := map[string]iggy.StoredMessage{} // by payload
	for p := range uint32(3) {
		msgs, err := cl.Tail(ctx, "f", "orders", p, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			originals[string(m.Payload)] = m
		}
	}

	f := &fixture{cl: cl, env: map[string]string{"STRAND_IGGY_ADDR": srv.Addr(), "STRAND_IGGY_USER": testUser, "STRAND_IGGY_PASSWORD": testPassword}}
	out, errOut, code := f.strand(t, replayHooks{}, "dlq", "list", "-topic", "f/orders.dlq")
	if code != 0 || !strings.Contains(out, "3 dead letters") || !strings.Contains(out, "unclassified") || !strings.Contains(out, "unknown-type") {
		t.Fatalf("dlq list: %d\n%s\n%s", code, out, errOut)
	}
	out, _, _ = f.strand(t, replayHooks{}, "dlq", "list", "-topic", "f/orders.dlq", "-reason", "unclassified")
	if !strings.Contains(out, "2 dead letters") || !strings.Contains(out, "not an order document") {
		t.Fatalf("dlq list -reason unclassified:\n%s", out)
	}
	t.Logf("strand dlq list:\n%s", out)

	out, errOut, code = f.strand(t, replayHooks{}, "dlq", "replay", "-topic", "f/orders.dlq")
	if code != 0 || !strings.Contains(out, "replayed 3 dead letters; 0 were already replayed; 0 skipped") {
		t.Fatalf("dlq replay: %d\n%s\n%s", code, out, errOut)
	}
	out, _, _ = f.strand(t, replayHooks{}, "dlq", "replay", "-topic", "f/orders.dlq")
	if !strings.Contains(out, "replayed 0 dead letters; 3 were already replayed") {
		t.Fatalf("second replay:\n%s", out)
	}
	// Each replay is the original message again, in its partition, after
	// everything that was there.
	for p := range uint32(3) {
		msgs, err := cl.Tail(ctx, "f", "orders", p, 100)
		if err != nil {
			t.Fatal(err)
		}
		last := msgs[len(msgs)-1]
		orig, ok := originals[string(last.Payload)]
		if !ok || orig.Partition != p || orig.Offset == last.Offset || len(msgs) != 6 {
			t.Fatalf("partition %d ends with %q at offset %d (%d messages); want the replay of the bad message read there", p, last.Payload, last.Offset, len(msgs))
		}
		if !reflect.DeepEqual(last.Headers, orig.Headers) || last.Headers[1].NameKind != connector.FieldInt32 || last.Headers[1].ValueKind != connector.FieldBool {
			t.Fatalf("partition %d: replayed headers %+v, original %+v", p, last.Headers, orig.Headers)
		}
	}
}
