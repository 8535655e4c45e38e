package iggy

import (
	"testing"
	"time"

	"github.com/strand-io/strand/stream/connector"
)

// Read returns the messages from an offset on, at most n, in order; none
// from the end on; and refuses a missing partition.
func TestClientReadFromAnOffset(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 1)
	ctx := ctxT(t, 10*time.Second)
	if got, err := c.Read(ctx, s, topic, 0, 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("Read of an empty partition = %d, %v", len(got), err)
	}
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	var msgs []connector.Message
	for i := range 25 {
		msgs = append(msgs, connector.Message{Key: []byte("k"), ID: MessageID([]byte("read"), []byte("k"), []byte{byte(i)}), Payload: []byte{byte(i)}})
	}
	if err := sink.Send(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	for _, c2 := range []struct {
		from      uint64
		n, want   int
		firstByte byte
	}{{0, 100, 25, 0}, {10, 5, 5, 10}, {20, 100, 5, 20}, {24, 1, 1, 24}, {25, 10, 0, 0}, {1000, 10, 0, 0}, {3, 0, 0, 0}} {
		got, err := c.Read(ctx, s, topic, 0, c2.from, c2.n)
		if err != nil || len(got) != c2.want {
			t.Fatalf("Read from %d, n %d = %d messages, %v; want %d", c2.from, c2.n, len(got), err, c2.want)
		}
		for i, m := range got {
			if m.Offset != c2.from+uint64(i) || m.Payload[0] != c2.firstByte+byte(i) || m.ID != msgs[m.Offset].ID {
				t.Fatalf("Read from %d: message %d is %+v", c2.from, i, m)
			}
		}
	}
	if _, err := c.Read(ctx, s, topic, 5, 0, 1); err == nil {
		t.Fatal("Read of a missing partition succeeded")
	}
}
