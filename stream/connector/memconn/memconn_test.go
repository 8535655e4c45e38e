package memconn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/connectortest"
	"github.com/strand-io/strand/stream/connector/memconn"
)

func TestConformance(t *testing.T) {
	connectortest.Run(t, connectortest.Harness{
		Connect: func(t *testing.T) connector.Connector {
			b, err := memconn.New()
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Delete: func(_ context.Context, c connector.Connector, topic string) error {
			return c.(*memconn.Broker).DeleteTopic(topic)
		},
	})
}

func TestOptionsRefuseBadValues(t *testing.T) {
	if _, err := memconn.New(memconn.WithClock(nil)); err == nil {
		t.Error("New(WithClock(nil)) succeeded; want an error naming the option")
	}
	b, err := memconn.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateTopic("t", 0); err == nil {
		t.Error("CreateTopic with 0 partitions succeeded")
	}
	if _, err := b.CreateTopic("t", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateTopic("t", 1); err == nil {
		t.Error("CreateTopic of an existing topic succeeded")
	}
	if err := b.DeleteTopic("none"); err == nil {
		t.Error("DeleteTopic of a missing topic succeeded")
	}
}

func TestManualDeliveryHidesRecordsUntilDelivered(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := memconn.New(memconn.WithManualDelivery(), memconn.WithClock(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	top, err := b.CreateTopic("t", 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if off, err := top.Append(0, connector.Record{Payload: []byte{byte(i)}}); err != nil || off != uint64(i) {
			t.Fatalf("Append %d = %d, %v", i, off, err)
		}
	}
	ctx := context.Background()
	if ends, _ := top.EndOffsets(ctx); ends[0] != 0 {
		t.Errorf("end before release = %d; want 0", ends[0])
	}
	top.SetEndFloor(0, 1)
	if ends, _ := top.EndOffsets(ctx); ends[0] != 1 {
		t.Errorf("end with floor 1 = %d; want 1", ends[0])
	}
	r, err := top.Open(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	short, cancel := context.WithCancel(ctx)
	cancel()
	if recs, err := r.Poll(short, 10); err == nil {
		t.Fatalf("poll before release returned %d records", len(recs))
	}
	if n := top.Deliver(0, 2); n != 2 {
		t.Fatalf("Deliver(2) = %d", n)
	}
	recs, err := r.Poll(ctx, 10)
	if err != nil || len(recs) != 2 {
		t.Fatalf("poll after releasing 2 = %d records, %v", len(recs), err)
	}
	if recs[0].Timestamp != uint64(at.UnixMicro()) {
		t.Errorf("timestamp %d; want the broker's clock %d", recs[0].Timestamp, at.UnixMicro())
	}
	if appended, released := top.Len(0); appended != 3 || released != 2 {
		t.Errorf("Len = %d, %d; want 3, 2", appended, released)
	}
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	top := memconn.NewTopic("t", 1)
	for i := range 5 {
		if _, err := top.Append(0, connector.Record{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	top.Hide(0, 2)
	r, err := top.Open(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := r.Poll(ctx, 10)
	if err != nil || len(recs) != 4 || recs[2].Offset != 3 {
		t.Fatalf("poll with offset 2 hidden = %v, %v; want offsets 0 1 3 4", recs, err)
	}
	boom := errors.New("boom")
	top.FailPolls(func(uint32, uint64) error { return boom })
	if _, err := r.Poll(ctx, 10); !errors.Is(err, boom) {
		t.Errorf("poll with FailPolls = %v; want boom", err)
	}
	top.FailPolls(nil)
	if err := r.Advise(ctx, 5); err != nil || top.Advised(0) != 5 {
		t.Errorf("Advise(5): %v, Advised = %d", err, top.Advised(0))
	}
	r.Close()
	r.Close()
	if _, err := r.Poll(ctx, 1); err == nil {
		t.Error("poll of a closed reader succeeded")
	}
	if o, c := top.Readers(); o != 1 || c != 1 {
		t.Errorf("Readers = %d, %d; want 1, 1", o, c)
	}

	msgs := []connector.Message{{Key: []byte("a"), ID: [16]byte{1}}, {Key: []byte("b"), ID: [16]byte{2}}, {Key: []byte("c"), ID: [16]byte{3}}}
	top.FailSends(1, 2)
	if err := top.Send(ctx, msgs); err == nil {
		t.Fatal("Send with FailSends succeeded")
	}
	sent, _ := top.Sent(ctx, msgs)
	if sent[0] != true || sent[1] != true || sent[2] != false {
		t.Errorf("after a failure after 2 messages, Sent = %v; want [true true false]", sent)
	}
	if err := top.Send(ctx, msgs[2:]); err != nil {
		t.Fatal(err)
	}
	if n := len(top.Messages()); n != 3 || top.Sends() != 2 || top.SentChecks() != 1 {
		t.Errorf("messages %d, sends %d, checks %d; want 3, 2, 1", n, top.Sends(), top.SentChecks())
	}
}

func TestCloseEndsAWaitingPoll(t *testing.T) {
	top := memconn.NewTopic("t", 1)
	r, err := top.Open(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Poll(context.Background(), 1)
		done <- err
	}()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("a poll of a closed reader returned no error")
	}
}
