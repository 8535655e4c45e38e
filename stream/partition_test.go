package stream_test

import (
	"testing"

	"github.com/strand-io/strand/stream"
)

// PartitionOf is XXH32(key, seed 0) % partitions: checked against the
// reference hash's published values.
func TestPartitionOf(t *testing.T) {
	for _, c := range []struct {
		key  string
		hash uint32 // XXH32(key, 0)
	}{
		{"", 0x02CC5D05},
		{"a", 0x550D7456},
		{"abc", 0x32D153FF},
		{"Nobody inspects the spammish repetition", 0xE2293B2F},
	} {
		for _, n := range []uint32{1, 3, 8, 1000} {
			if got := stream.PartitionOf([]byte(c.key), n); got != c.hash%n {
				t.Errorf("PartitionOf(%q, %d) = %d, want %d", c.key, n, got, c.hash%n)
			}
		}
	}
	if got := stream.PartitionOf([]byte("abc"), 0); got != 0 {
		t.Errorf("PartitionOf with 0 partitions = %d, want 0", got)
	}
}
