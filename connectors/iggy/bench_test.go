package iggy

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// benchEvent marshals to about 100 bytes of JSON.
type benchEvent struct {
	Account uint64 `json:"account"`
	Kind    string `json:"kind"`
	Amount  int64  `json:"amount"`
	Ref     string `json:"ref"`
	At      int64  `json:"at"`
}

type benchEncoder struct{}

func (benchEncoder) Envelope(e benchEvent) (stream.Envelope, error) {
	b, err := json.Marshal(e)
	return stream.Envelope{
		Headers: connector.Headers{Key: fmt.Appendf(nil, "account-%d", e.Account), Tag: 2, Ordering: planner.Relaxed, Algebra: algebra.Associative},
		Payload: b,
	}, err
}

func benchEvents(n int) []benchEvent {
	evs := make([]benchEvent, n)
	for i := range evs {
		evs[i] = benchEvent{Account: uint64(i % 10_000), Kind: "deposit", Amount: int64(i), Ref: "ref-0123456789abcdefghij", At: 1_700_000_000_000_000 + int64(i)}
	}
	return evs
}

// benchEnvelopes pre-encodes events, so that a benchmark measures the
// connector, not encoding/json.
func benchEnvelopes(b *testing.B, n int) []stream.Envelope {
	envs := make([]stream.Envelope, n)
	for i, e := range benchEvents(min(n, 100_000)) {
		envs[i], _ = benchEncoder{}.Envelope(e)
	}
	for i := 100_000; i < n; i++ {
		envs[i] = envs[i%100_000]
	}
	if n > 0 && (len(envs[0].Payload) < 95 || len(envs[0].Payload) > 110) {
		b.Fatalf("payload is %d bytes, want about 100", len(envs[0].Payload))
	}
	return envs
}

const benchParts = 8

// BenchmarkPublish publishes 100-byte JSON events to an 8-partition topic
// of the embedded broker.
func BenchmarkPublish(b *testing.B) {
	b.Run("enqueue", func(b *testing.B) { benchPublish(b, 1, false) })
	b.Run("enqueue-2conns", func(b *testing.B) { benchPublish(b, 2, false) })
	b.Run("batch-1000", func(b *testing.B) { benchPublish(b, 1, true) })
	b.Run("sync-64-goroutines", func(b *testing.B) {
		// Publish returns when its event is accepted; 64 callers at once
		// share batches.
		tg := newTarget(b)
		c := tg.connect(b)
		s, topic := tg.topic(b, c, benchParts)
		p := newPublisher(b, c, s, topic)
		envs := benchEnvelopes(b, 100_000)
		ctx := context.Background()
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(32) // × GOMAXPROCS 2
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := p.Send(ctx, envs[next.Add(1)%int64(len(envs))]); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	})
	b.Run("enqueue-json", func(b *testing.B) {
		tg := newTarget(b)
		c := tg.connect(b)
		s, topic := tg.topic(b, c, benchParts)
		p := newPublisher(b, c, s, topic)
		evs := benchEvents(100_000)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			env, err := benchEncoder{}.Envelope(evs[i%len(evs)])
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Enqueue(ctx, env, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	})
}

func benchPublish(b *testing.B, conns int, batch bool) {
	tg := newTarget(b)
	c := tg.connect(b)
	s, topic := tg.topic(b, c, benchParts)
	p := newPublisher(b, c, s, topic, WithConnections(conns))
	envs := benchEnvelopes(b, b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if batch {
		for i := 0; i < b.N; i += 1000 {
			if err := p.Send(ctx, envs[i:min(i+1000, b.N)]...); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		var once sync.Once
		fail := func(err error) {
			if err != nil {
				once.Do(func() { b.Error(err) })
			}
		}
		for i := range envs {
			if err := p.Enqueue(ctx, envs[i], fail); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkConsume reads 100-byte JSON events, headers parsed, from an
// 8-partition topic of the embedded broker: one reader per partition, all
// at once, or one partition alone.
func BenchmarkConsume(b *testing.B) {
	b.Run("8-readers", func(b *testing.B) { benchConsume(b, benchParts) })
	b.Run("1-reader", func(b *testing.B) { benchConsume(b, 1) })
}

func benchConsume(b *testing.B, readers int) {
	tg := newTarget(b)
	c := tg.connect(b)
	s, topic := tg.topic(b, c, uint32(readers))
	p := newPublisher(b, c, s, topic)
	envs := benchEnvelopes(b, b.N)
	ctx := context.Background()
	for i := 0; i < len(envs); i += 10_000 {
		if err := p.Send(ctx, envs[i:min(i+10_000, len(envs))]...); err != nil {
			b.Fatal(err)
		}
	}
	src, err := NewSource(c, s, topic)
	if err != nil {
		b.Fatal(err)
	}
	rs := make([]connector.PartitionReader, readers)
	want := make([]uint64, readers)
	for part := range readers {
		if rs[part], err = src.Open(ctx, uint32(part), 0); err != nil {
			b.Fatal(err)
		}
		defer rs[part].Close()
	}
	for _, e := range envs {
		want[p.PartitionOf(e.Headers.Key)]++
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for part := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got uint64
			for got < want[part] {
				recs, err := rs[part].Poll(ctx, 0)
				if err != nil {
					b.Error(err)
					return
				}
				for i := range recs {
					if recs[i].HeaderErr != nil {
						b.Error(recs[i].HeaderErr)
						return
					}
				}
				got += uint64(len(recs))
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkParseStrandHeaders is the per-record header cost of a poll.
func BenchmarkParseStrandHeaders(b *testing.B) {
	h := connector.Headers{Key: []byte("account-1234"), Tag: 2, Ordering: planner.Relaxed, Seq: 7, HasSeq: true}
	buf, _ := appendStrandHeaders(nil, &h)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseStrandHeaders(buf); err != nil {
			b.Fatal(err)
		}
	}
}
