package iggy

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// TestStartOffsetsAfterExpiry: in both protocols, StartOffsets reports 0
// for partitions nothing was deleted from, and, once the embedded broker's
// cleaner has deleted expired segments of a partition, the offset of its
// oldest retained message, the first one a read from offset 0 returns.
func TestStartOffsetsAfterExpiry(t *testing.T) {
	for _, proto := range []Protocol{Protocol08, Protocol010} {
		t.Run(proto.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			tg := newTarget(t, iggytest.WithSegmentSize(16<<10), iggytest.WithMessageCleaner(20*time.Millisecond))
			tg.faults(t) // the cleaner and small segments are the embedded broker's
			c := tg.connect(t, WithProtocol(proto))
			name := fmt.Sprintf("starts-%d", time.Now().UnixNano())
			const expiry = 500 * time.Millisecond
			if err := c.EnsureTopic(ctx, name, "log", 3, WithMessageExpiry(iggcon.Duration(expiry.Microseconds()))); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.DeleteStream(context.Background(), name) })
			src, err := NewSource(c, name, "log")
			if err != nil {
				t.Fatal(err)
			}
			var _ connector.StartOffsetter = src
			if starts, err := src.StartOffsets(ctx); err != nil || !slices.Equal(starts, []uint64{0, 0, 0}) {
				t.Fatalf("StartOffsets of an empty topic = %v, %v; want [0 0 0]", starts, err)
			}
			pub, err := NewPublisher(ctx, c, name, "log")
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close(ctx)
			// Partition 0 gets ~100 KiB (several 16 KiB segments), partition 1
			// one message; partition 2 none.
			key0, key1 := keyOfPartition(t, 0, 3), keyOfPartition(t, 1, 3)
			payload := bytes.Repeat([]byte("x"), 1000)
			for range 100 {
				if err := pub.Send(ctx, stream.Envelope{Headers: connector.Headers{Key: key0, Tag: 1, Ordering: planner.Relaxed}, Payload: payload}); err != nil {
					t.Fatal(err)
				}
			}
			if err := pub.Send(ctx, stream.Envelope{Headers: connector.Headers{Key: key1, Tag: 1, Ordering: planner.Relaxed}, Payload: payload}); err != nil {
				t.Fatal(err)
			}
			// Expired sealed segments go; the active one stays.
			var starts []uint64
			testrun.WaitFor(t, 30*time.Second, func() error {
				var err error
				starts, err = src.StartOffsets(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if starts[0] == 0 {
					return fmt.Errorf("no segment of partition 0 expired: StartOffsets = %v", starts)
				}
				return nil
			})
			if starts[0] >= 100 || starts[1] != 0 || starts[2] != 0 {
				t.Fatalf("StartOffsets after expiry = %v; want [1..99 0 0]", starts)
			}
			// A read from offset 0 starts where StartOffsets says. The cleaner
			// may delete the next segment between the two calls (segments
			// expire one after the other, as they were written): a pair is
			// compared only when StartOffsets did not move across the read.
			for deadline := time.Now().Add(30 * time.Second); ; {
				msgs, err := c.Read(ctx, name, "log", 0, 0, 1)
				if err != nil || len(msgs) != 1 {
					t.Fatalf("Read from offset 0 after expiry = %d messages, %v", len(msgs), err)
				}
				after, err := src.StartOffsets(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if after[0] == starts[0] {
					if msgs[0].Offset != starts[0] {
						t.Errorf("StartOffsets says partition 0 starts at %d, a read from 0 starts at %d", starts[0], msgs[0].Offset)
					}
					break
				}
				if after[0] < starts[0] || time.Now().After(deadline) {
					t.Fatalf("StartOffsets of partition 0 went from %d to %d across a read (30 s at most)", starts[0], after[0])
				}
				starts = after // the cleaner went on: compare again
			}
		})
	}
}

// keyOfPartition returns a key that strand routes to partition p of n.
func keyOfPartition(t *testing.T, p, n uint32) []byte {
	t.Helper()
	for i := range 1000 {
		k := []byte(fmt.Sprintf("k%d", i))
		if connector.PartitionOf(k, n) == p {
			return k
		}
	}
	t.Fatalf("no key of partition %d of %d", p, n)
	return nil
}
