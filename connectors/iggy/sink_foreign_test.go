package iggy

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/stream/connector"
)

// What a Sink sends with HasPartition lands in exactly that partition, and
// a foreign Source reads back each message's id, user headers (kinds kept)
// and payload as sent, up to the largest payload (iggcon.MaxPayloadSize)
// and the largest user-header block (maxUserHeaders) Iggy carries; one byte
// more is refused before anything is sent.
func TestSinkMessagesReadBackByAForeignSource(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 4)
	ctx := ctxT(t, 30*time.Second)
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)

	var msgs []connector.Message
	for i := range 24 {
		key := fmt.Appendf(nil, "key-%d", i)
		hs := []connector.Field{
			{Name: "n", Value: fmt.Appendf(nil, "%d", i)},
			{Name: "bin", Value: []byte{0, 0xff, byte(i), 0}},
			{Name: "\x07\x00\x00\x00", Value: []byte{byte(i), 0, 0, 0, 0, 0, 0, 0}, NameKind: connector.FieldInt32, ValueKind: connector.FieldUint64},
			{Name: strings.Repeat("k", 255), Value: bytes.Repeat([]byte{byte(i)}, 255), ValueKind: connector.FieldString},
		}
		msgs = append(msgs, connector.Message{
			Key: key, ID: MessageID(key), Headers: hs[:i%5], Payload: fmt.Appendf(nil, "payload %d", i),
			// Never the key's own partition.
			Partition: (sink.PartitionOf(key) + 1 + uint32(i%3)) % 4, HasPartition: true,
		})
	}
	// The largest payload, and the largest user-header block of fields of
	// the largest name and value (10 bytes of kinds and lengths each).
	big := make([]byte, iggcon.MaxPayloadSize)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var full []connector.Field
	for i := range maxUserHeaders / (10 + 255 + 255) {
		full = append(full, connector.Field{Name: fmt.Sprintf("%255d", i), Value: bytes.Repeat([]byte{byte(i)}, 255)})
	}
	msgs = append(msgs,
		connector.Message{Key: []byte("big"), ID: MessageID([]byte("big")), Payload: big, Partition: 2, HasPartition: true},
		connector.Message{Key: []byte("full"), ID: MessageID([]byte("full")), Headers: full, Payload: []byte("f"), Partition: 1, HasPartition: true},
		connector.Message{Key: []byte("by key"), ID: MessageID([]byte("by key")), Payload: []byte("k")},
	)
	byKey := &msgs[len(msgs)-1]
	byKey.Partition = sink.PartitionOf(byKey.Key)

	tooBig := connector.Message{Key: []byte("x"), Payload: make([]byte, iggcon.MaxPayloadSize+1), Partition: 0, HasPartition: true}
	tooMany := connector.Message{Key: []byte("x"), Payload: []byte("x"), Headers: append(full[:len(full):len(full)], connector.Field{Name: "a", Value: bytes.Repeat([]byte("v"), 255)})}
	for _, bad := range []connector.Message{tooBig, tooMany} {
		if err := sink.Send(ctx, append([]connector.Message{msgs[0]}, bad)); !errors.Is(err, ErrInvalidMessage) {
			t.Fatalf("Send of %d payload bytes, %d header fields: %v, want ErrInvalidMessage", len(bad.Payload), len(bad.Headers), err)
		}
	}
	if err := sink.Send(ctx, msgs); err != nil {
		t.Fatal(err)
	}

	want := map[[16]byte]*connector.Message{}
	perPart := make([]uint64, 4)
	for i := range msgs {
		want[msgs[i].ID] = &msgs[i]
		perPart[msgs[i].Partition]++
	}
	src, err := c.OpenForeignSource(ctx, s+"/"+topic)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := src.(*Source).EndOffsets(ctx)
	if err != nil || !reflect.DeepEqual(ends, perPart) {
		t.Fatalf("end offsets %v (%v), want %v: something landed in another partition", ends, err, perPart)
	}
	for p := range uint32(4) {
		r, err := src.Open(ctx, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		for n := uint64(0); n < perPart[p]; {
			recs, err := r.Poll(ctx, 0)
			if err != nil {
				r.Close()
				t.Fatalf("partition %d: %v", p, err)
			}
			for _, rec := range recs {
				n++
				m := want[rec.Raw.ID]
				if m == nil || m.Partition != p || rec.Partition != p {
					t.Fatalf("partition %d offset %d: message id %x, not sent to this partition", p, rec.Offset, rec.Raw.ID)
				}
				delete(want, rec.Raw.ID)
				if !bytes.Equal(rec.Payload, m.Payload) || rec.HeaderErr != nil {
					t.Fatalf("partition %d offset %d: %d payload bytes (header error %v), want %d", p, rec.Offset, len(rec.Payload), rec.HeaderErr, len(m.Payload))
				}
				if len(rec.Raw.Headers) != len(m.Headers) {
					t.Fatalf("partition %d offset %d: %d headers, want %d", p, rec.Offset, len(rec.Raw.Headers), len(m.Headers))
				}
				for j, h := range rec.Raw.Headers {
					if w := normal(m.Headers[j]); h.Name != w.Name || !bytes.Equal(h.Value, w.Value) || h.NameKind != w.NameKind || h.ValueKind != w.ValueKind {
						t.Fatalf("partition %d offset %d header %d: %+v, want %+v", p, rec.Offset, j, h, w)
					}
				}
			}
		}
		r.Close()
	}
	if len(want) != 0 {
		t.Fatalf("%d messages not read back", len(want))
	}
}
