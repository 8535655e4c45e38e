package iggy

import (
	"context"
	"fmt"
	"testing"
	"time"

	binaryserialization "github.com/apache/iggy/foreign/go/binary_serialization"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/stream/connector"
)

// benchReply is a PollMessages reply of n 100-byte JSON events with strand
// headers, as the broker sends it.
func benchReply(b *testing.B, n int) []byte {
	envs := benchEnvelopes(b, n)
	ms := make([]testMsg, n)
	for i, e := range envs {
		h, err := appendStrandHeaders(nil, &e.Headers)
		if err != nil {
			b.Fatal(err)
		}
		ms[i] = testMsg{offset: uint64(i), ts: 1_700_000_000_000_000, payload: e.Payload, headers: h}
	}
	return buildReply(0, ms)
}

// BenchmarkPollDecode decodes one poll reply of n messages into records:
// "sdk" is the SDK's DeserializeFetchMessagesResponse plus the conversion
// Reader.Poll did before, "strand" is the connector's decoder. Both start
// from the reply payload as read from the socket (a buffer the SDK path
// and the new path both allocate once per poll, not measured here).
func BenchmarkPollDecode(b *testing.B) {
	ref, _ := newTopicRef("s", "t")
	for _, n := range []int{64, 4096} {
		reply := benchReply(b, n)
		b.Run(fmt.Sprintf("sdk/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(reply)))
			for b.Loop() {
				polled, err := binaryserialization.DeserializeFetchMessagesResponse(reply, iggcon.MESSAGE_COMPRESSION_NONE)
				if err != nil {
					b.Fatal(err)
				}
				recs, err := sdkRecords(ref, 0, polled.Messages, 0)
				if err != nil || len(recs) != n {
					b.Fatal(len(recs), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
		b.Run(fmt.Sprintf("strand/n=%d", n), func(b *testing.B) {
			d := fetchDecoder{t: ref}
			b.ReportAllocs()
			b.SetBytes(int64(len(reply)))
			for b.Loop() {
				recs, _, err := d.decode(reply, 0)
				if err != nil || len(recs) != n {
					b.Fatal(len(recs), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}

// BenchmarkPollPath polls a 1-partition topic of the embedded broker from
// start to end, 4096 messages a poll, through the SDK's PollMessages (the
// old path) and through the connector's own request and decoder (the path
// Reader.Poll takes), alternating in the same process. b.N counts messages.
func BenchmarkPollPath(b *testing.B) {
	const logSize = 200_000
	tg := newTarget(b)
	c := tg.connect(b)
	s, topic := tg.topic(b, c, 1)
	p := newPublisher(b, c, s, topic)
	envs := benchEnvelopes(b, logSize)
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
	pr, err := src.Open(ctx, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer pr.Close()
	r := pr.(*Reader)
	paths := []struct {
		name string
		poll func(context.Context, *Reader, uint64, int) ([]connector.Record, error)
	}{{"sdk", sdkPoll}, {"strand", newPoll}}
	for _, path := range paths {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			start := time.Now()
			var off uint64
			for got := 0; got < b.N; {
				recs, err := path.poll(ctx, r, off, min(4096, b.N-got))
				if err != nil {
					b.Fatal(err)
				}
				got += len(recs)
				off = (off + uint64(len(recs))) % logSize
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
