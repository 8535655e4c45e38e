package iggy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

// onePartition publishes n events of key "k" to a 1-partition topic.
func onePartition(t testing.TB, tg *target, c *Client, n int) (*Source, string, string) {
	t.Helper()
	s, topic := tg.topic(t, c, 1)
	p := newPublisher(t, c, s, topic)
	evs := make([]event, n)
	for i := range evs {
		evs[i] = event{Key: "k", Seq: uint64(i)}
	}
	if err := PublishBatch(ctxT(t, 10*time.Second), p, eventEncoder{}, evs); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	return src, s, topic
}

func open(t testing.TB, src *Source, part uint32, from uint64) *Reader {
	t.Helper()
	r, err := src.Open(ctxT(t, 10*time.Second), part, from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.(*Reader)
}

func TestReaderStartsAtTheGivenOffsetAndHonoursMax(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	src, _, _ := onePartition(t, tg, c, 20)
	r := open(t, src, 0, 5)
	ctx := ctxT(t, 10*time.Second)
	recs, err := r.Poll(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[0].Offset != 5 || recs[3].Offset != 8 || recs[0].Headers.Seq != 5 {
		t.Fatalf("got %d records from offset %d", len(recs), recs[0].Offset)
	}
	if cap(recs[0].Payload) != len(recs[0].Payload) {
		t.Fatal("payload capacity reaches into the next message")
	}
	recs, err = r.Poll(ctx, 0)
	if err != nil || len(recs) != 11 || recs[0].Offset != 9 || r.Next() != 20 {
		t.Fatalf("second poll: %d records, %v, next %d", len(recs), err, r.Next())
	}
}

func TestPollWaitsForNewEventsAndStopsOnCancelOrClose(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	src, s, topic := onePartition(t, tg, c, 1)
	r := open(t, src, 0, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := r.Poll(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("empty partition: got %v, want DeadlineExceeded", err)
	}

	go func() {
		time.Sleep(50 * time.Millisecond) // pacing: let Poll wait first (it passes either way)
		p, err := NewPublisher(context.Background(), c, s, topic)
		if err != nil {
			return
		}
		defer p.Close(context.Background())
		_ = Publish(context.Background(), p, eventEncoder{}, event{Key: "k", Seq: 1})
	}()
	recs, err := r.Poll(ctxT(t, 10*time.Second), 10)
	if err != nil || len(recs) != 1 || recs[0].Offset != 1 {
		t.Fatalf("got %d records, %v", len(recs), err)
	}

	go func() {
		time.Sleep(50 * time.Millisecond) // pacing: let Poll wait first (it passes either way)
		r.Close()
	}()
	if _, err := r.Poll(ctxT(t, 10*time.Second), 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("poll during Close: got %v, want ErrClosed", err)
	}
}

func TestPollRecoversFromTimeoutsAndDrops(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t, WithCallTimeout(300*time.Millisecond))
	src, _, _ := onePartition(t, tg, c, 10)
	r := open(t, src, 0, 0)
	ctx := ctxT(t, 10*time.Second)
	srv.DelayNext(iggytest.CmdPollMessages, 2, 1500*time.Millisecond)
	recs, err := r.Poll(ctx, 3)
	if err != nil || len(recs) != 3 || recs[0].Offset != 0 {
		t.Fatalf("poll through timeouts: %d records, %v", len(recs), err)
	}
	srv.DropConnections()
	srv.RefuseConnections(200 * time.Millisecond)
	recs, err = r.Poll(ctx, 100)
	if err != nil || len(recs) != 7 || recs[0].Offset != 3 {
		t.Fatalf("poll after a drop: %d records, %v", len(recs), err)
	}
}

func TestPollReportsAGapLeftByRetention(t *testing.T) {
	tg := newTarget(t, iggytest.WithMaxMessagesPerPartition(10))
	tg.faults(t)
	c := tg.connect(t)
	src, _, _ := onePartition(t, tg, c, 25)
	r := open(t, src, 0, 0)
	_, err := r.Poll(ctxT(t, 10*time.Second), 10)
	if !errors.Is(err, ErrOffsetGap) {
		t.Fatalf("got %v, want ErrOffsetGap", err)
	}
	t.Log(err)
}

func TestOpenChecksThePartition(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 2)
	src, _ := NewSource(c, s, topic)
	if n, err := src.Partitions(ctxT(t, 5*time.Second)); err != nil || n != 2 {
		t.Fatalf("Partitions: %d, %v", n, err)
	}
	if src.Name() != s+"/"+topic {
		t.Fatalf("Name = %q", src.Name())
	}
	if _, err := src.Open(ctxT(t, 5*time.Second), 2, 0); !errors.Is(err, ierror.ErrPartitionNotFound) {
		t.Fatalf("got %v, want ErrPartitionNotFound", err)
	}
}

func TestAdviseStoresTheLastConsumedOffset(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	src, s, topic := onePartition(t, tg, c, 10)
	r := open(t, src, 0, 0)
	ctx := ctxT(t, 10*time.Second)
	if err := r.Advise(ctx, 0); err != nil {
		t.Fatalf("Advise(0): %v", err)
	}
	if err := r.Advise(ctx, 7); err != nil {
		t.Fatalf("Advise(7): %v", err)
	}
	tg.sdk08(t)
	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(tg.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	if _, err := sdk.LoginUser(tg.user, tg.pass); err != nil {
		t.Fatal(err)
	}
	sid, _ := iggcon.NewIdentifier(s)
	tid, _ := iggcon.NewIdentifier(topic)
	cid, _ := iggcon.NewIdentifier("strand")
	part := uint32(0)
	off, err := sdk.GetConsumerOffset(iggcon.NewSingleConsumer(cid), sid, tid, &part)
	if err != nil || off == nil || off.StoredOffset != 6 {
		t.Fatalf("stored offset: %+v, %v; want 6 (next 7 minus one)", off, err)
	}
	if err := r.Advise(ctx, 11); !errors.Is(err, ierror.ErrInvalidOffset) {
		t.Fatalf("advise beyond the end: got %v, want ErrInvalidOffset", err)
	}
}
