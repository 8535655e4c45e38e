package iggy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// keyName is the key of key number i.
func keyName(i int) string { return fmt.Sprintf("account-%d", i) }

// publishAll publishes total events over keys keys (event j has key j%keys
// and per-key seq j/keys) from g goroutines, each owning some keys, in
// batches of PublishBatch.
func publishAll(t testing.TB, p *Publisher, keys, total, g int) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]event, 0, 500)
			// Goroutine w owns the keys k with k % g == w.
			for j := 0; j < total; j++ {
				k := j % keys
				if k%g != w {
					continue
				}
				batch = append(batch, event{Key: keyName(k), Seq: uint64(j / keys), Body: "0123456789abcdef"})
				if len(batch) == cap(batch) {
					if err := PublishBatch(ctx, p, eventEncoder{}, batch); err != nil {
						errs <- err
						return
					}
					batch = batch[:0]
				}
			}
			if len(batch) > 0 {
				if err := PublishBatch(ctx, p, eventEncoder{}, batch); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}
}

// consumed is what consumeAll read, per partition.
type consumed [][]connector.Record

// consumeAll reads every partition from offset 0 until want records in all
// arrived, concurrently. Duplicates are caught by check, which compares
// what was read with the partitions' end offsets. hooks, if set, run once:
// the first when the readers are open, the second after about half the
// records were read.
func consumeAll(t testing.TB, src *Source, parts uint32, want int, hooks ...func()) consumed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := make(consumed, parts)
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	readers := make([]connector.PartitionReader, parts)
	for p := range parts {
		r, err := src.Open(ctx, p, 0)
		if err != nil {
			t.Fatalf("open partition %d: %v", p, err)
		}
		readers[p] = r
		defer r.Close()
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				recs, err := readers[p].Poll(pctx, 1000)
				if err != nil {
					if pctx.Err() == nil {
						errs <- err
					}
					return
				}
				out[p] = append(out[p], recs...)
				total.Add(int64(len(recs)))
			}
		}()
	}
	if len(hooks) > 0 && hooks[0] != nil {
		hooks[0]()
	}
	hooked := len(hooks) < 2
	deadline := time.Now().Add(90 * time.Second)
	for total.Load() < int64(want) && time.Now().Before(deadline) {
		if !hooked && total.Load() >= int64(want/2) {
			hooks[1]()
			hooked = true
		}
		select {
		case err := <-errs:
			t.Fatalf("poll: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("poll: %v", err)
	}
	return out
}

// check verifies that the records hold each of the keys' events exactly
// once, in per-key order, in the key's XXH32 partition, with contiguous
// offsets, and that they are all src's partitions hold: every publisher
// must be done, so that a duplicate sent late is in the log by now.
func (c consumed) check(t testing.TB, src *Source, keys, total int) {
	t.Helper()
	parts := uint32(len(c))
	ends, err := src.EndOffsets(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	for p, end := range ends {
		if p >= len(c) || end != uint64(len(c[p])) {
			t.Fatalf("partition %d ends at offset %d; read %d records of %d partitions (a duplicate or a lost read)", p, end, len(c[min(p, len(c)-1)]), len(c))
		}
	}
	next := make(map[string]uint64, keys)
	n := 0
	for p, recs := range c {
		for i, r := range recs {
			if r.HeaderErr != nil {
				t.Fatalf("partition %d offset %d: %v", p, r.Offset, r.HeaderErr)
			}
			if r.Partition != uint32(p) || r.Offset != uint64(i) {
				t.Fatalf("partition %d record %d: got partition %d offset %d", p, i, r.Partition, r.Offset)
			}
			key := string(r.Headers.Key)
			if want := xxh32.Partition(r.Headers.Key, parts); want != uint32(p) {
				t.Fatalf("key %q is in partition %d, XXH32 says %d", key, p, want)
			}
			var e event
			if err := json.Unmarshal(r.Payload, &e); err != nil {
				t.Fatalf("partition %d offset %d: payload %q: %v", p, r.Offset, r.Payload, err)
			}
			if e.Key != key || e.Seq != r.Headers.Seq || !r.Headers.HasSeq || r.Headers.Tag != 7 {
				t.Fatalf("partition %d offset %d: headers %+v do not match payload %+v", p, r.Offset, r.Headers, e)
			}
			if e.Seq != next[key] {
				t.Fatalf("key %q: got seq %d at partition %d offset %d, want %d (lost, duplicated or reordered)", key, e.Seq, p, r.Offset, next[key])
			}
			next[key]++
			n++
		}
	}
	if n != total {
		t.Fatalf("read %d events, published %d", n, total)
	}
	if len(next) != keys {
		t.Fatalf("read %d keys, published %d", len(next), keys)
	}
}

// TestRoundTripOver8Partitions publishes 20,000 events of 1,000 keys from
// 4 goroutines and reads them back (100,000 with STRAND_SOAK=1).
func TestRoundTripOver8Partitions(t *testing.T) {
	const keys, parts = 1000, 8
	total := sized(20_000, 100_000)
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, parts)
	p, err := NewPublisher(ctxT(t, 10*time.Second), c, s, topic, WithConnections(2))
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, p, keys, total, 4)
	if err := p.Close(ctxT(t, 30*time.Second)); err != nil {
		t.Fatalf("close publisher: %v", err)
	}
	src, err := NewSource(c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	consumeAll(t, src, parts, total).check(t, src, keys, total)
}

// TestPublisherAndReadersSurviveDroppedConnections: 8,000 events (30,000
// with STRAND_SOAK=1), every connection dropped four times on the way.
func TestPublisherAndReadersSurviveDroppedConnections(t *testing.T) {
	const keys, parts = 200, 8
	total := sized(8_000, 30_000)
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, parts)
	p, err := NewPublisher(ctxT(t, 10*time.Second), c, s, topic, WithConnections(2), WithBatchSize(100))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(c, s, topic, WithPollBatch(300))
	if err != nil {
		t.Fatal(err)
	}

	// Publish asynchronously, dropping every connection a few times on the
	// way; readers run at the same time and see the drops too.
	var failed atomic.Int64
	var firstErr atomic.Value
	pubDone := make(chan struct{})
	publish := func() {
		defer close(pubDone)
		ctx := context.Background()
		for j := range total {
			if j > 0 && j%(total/4) == 0 {
				srv.DropConnections()
			}
			env, _ := eventEncoder{}.Envelope(event{Key: keyName(j % keys), Seq: uint64(j / keys)})
			err := p.Enqueue(ctx, env, func(err error) {
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			})
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		}
	}
	got := consumeAll(t, src, parts, total, func() { go publish() }, srv.DropConnections)
	<-pubDone
	if err := p.Close(ctxT(t, 30*time.Second)); err != nil {
		t.Fatalf("close publisher: %v", err)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d events failed; first: %v", n, firstErr.Load())
	}
	got.check(t, src, keys, total)
}

func TestUnansweredSendIsNotDuplicated(t *testing.T) {
	// The broker holds a send past the call timeout and applies it after
	// the publisher gave up on the reply: the publisher must wait for the
	// broken session to end, find the batch in the log, and not send it
	// again.
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t, WithCallTimeout(300*time.Millisecond))
	s, topic := tg.topic(t, c, 1)
	p, err := NewPublisher(ctxT(t, 10*time.Second), c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	srv.DelayNext(iggytest.CmdSendMessages, 1, time.Second)
	applied := time.Now().Add(1500 * time.Millisecond) // the held send is applied by then
	evs := make([]event, 50)
	for i := range evs {
		evs[i] = event{Key: "k", Seq: uint64(i)}
	}
	if err := PublishBatch(ctxT(t, 20*time.Second), p, eventEncoder{}, evs); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := p.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(applied))
	tail, err := c.Tail(ctxT(t, 10*time.Second), s, topic, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(tail) != len(evs) {
		t.Fatalf("partition holds %d messages, published %d", len(tail), len(evs))
	}
}

func TestSendThatTheBrokerNeverAppliedIsSentAgain(t *testing.T) {
	tg := newTarget(t)
	srv := tg.faults(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 2)
	var n atomic.Int32
	remove := srv.Control(func(req *iggytest.Request) iggytest.Reply {
		if req.Command == iggytest.CmdSendMessages && n.Add(1) <= 2 {
			return iggytest.Reply{Action: iggytest.Drop} // crash before applying
		}
		return iggytest.Reply{}
	})
	defer remove()
	p, err := NewPublisher(ctxT(t, 10*time.Second), c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if err := Publish(ctxT(t, 20*time.Second), p, eventEncoder{}, event{Key: "k", Seq: 0}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	tail, err := c.Tail(ctxT(t, 10*time.Second), s, topic, p.PartitionOf([]byte("k")), 10)
	if err != nil || len(tail) != 1 {
		t.Fatalf("tail: %d messages, %v; want exactly 1", len(tail), err)
	}
}

func TestKeyPartitionAgreesWithTheServersMessagesKeyPartitioning(t *testing.T) {
	const parts = 7
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, parts)
	ctx := ctxT(t, 20*time.Second)

	// Send one message per key with the SDK's own messages-key
	// partitioning and see where the server put it.
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
	p, err := NewPublisher(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	const keys = 60
	for i := range keys {
		key := []byte(keyName(i))
		part, _ := iggcon.EntityIdBytes(key)
		msg, _ := iggcon.NewIggyMessage(key)
		if err := sdk.SendMessages(sid, tid, part, []iggcon.IggyMessage{msg}); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for part := range uint32(parts) {
		tail, err := c.Tail(ctx, s, topic, part, keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tail {
			got++
			if want := p.PartitionOf(m.Payload); want != part {
				t.Errorf("server put key %q in partition %d, the publisher would use %d", m.Payload, part, want)
			}
			if want := xxh32.Sum(m.Payload, 0) % parts; want != part {
				t.Errorf("key %q: XXH32 %% %d = %d, server used %d", m.Payload, parts, want, part)
			}
		}
	}
	if got != keys {
		t.Fatalf("found %d messages, sent %d", got, keys)
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 3)
	ctx := ctxT(t, 20*time.Second)
	p, err := NewPublisher(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	envs := []stream.Envelope{
		{Headers: connector.Headers{Key: []byte{0, 1, 2, 255}, Tag: 0xdeadbeef, Ordering: 6, Algebra: 4}, Payload: []byte("a")},
		{Headers: connector.Headers{Key: make([]byte, 255), Tag: 1, Ordering: 2, Algebra: 1, Seq: 1<<64 - 1, HasSeq: true}, Payload: []byte("b")},
		{Headers: connector.Headers{Key: []byte("k"), Tag: 2, Ordering: 4, Algebra: 0, Seq: 0, HasSeq: true}, Payload: make([]byte, 70_000)},
	}
	if err := p.Send(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	src, _ := NewSource(c, s, topic)
	for _, e := range envs {
		part := p.PartitionOf(e.Headers.Key)
		r, err := src.Open(ctx, part, 0)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for !found {
			recs, err := r.Poll(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				if string(rec.Headers.Key) != string(e.Headers.Key) {
					continue
				}
				found = true
				h := rec.Headers
				if rec.HeaderErr != nil || h.Tag != e.Headers.Tag || h.Ordering != e.Headers.Ordering || h.Algebra != e.Headers.Algebra ||
					h.HasSeq != e.Headers.HasSeq || h.Seq != e.Headers.Seq || len(rec.Payload) != len(e.Payload) || rec.Timestamp == 0 {
					t.Fatalf("got %+v (err %v), want %+v", h, rec.HeaderErr, e.Headers)
				}
			}
		}
		r.Close()
	}
}

func TestForeignMessagesAreDeliveredWithHeaderErr(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	ctx := ctxT(t, 20*time.Second)
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	err = sink.Send(ctx, []connector.Message{
		{Key: []byte("k"), Payload: []byte("no strand headers")},
		{Key: []byte("k"), Headers: []connector.Field{{Name: connector.HeaderKey, Value: []byte("k")}}, Payload: []byte("partial")},
	})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := NewPublisher(ctx, c, s, topic)
	defer pub.Close(context.Background())
	if err := Publish(ctx, pub, eventEncoder{}, event{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	src, _ := NewSource(c, s, topic)
	r, err := src.Open(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var recs []connector.Record
	for len(recs) < 3 {
		more, err := r.Poll(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, more...)
	}
	for i, want := range []bool{true, true, false} {
		if got := recs[i].HeaderErr != nil; got != want {
			t.Fatalf("record %d: HeaderErr = %v, want set=%v", i, recs[i].HeaderErr, want)
		}
		if want && !errors.Is(recs[i].HeaderErr, connector.ErrBadHeaders) {
			t.Fatalf("record %d: HeaderErr %v does not wrap connector.ErrBadHeaders", i, recs[i].HeaderErr)
		}
	}
}
