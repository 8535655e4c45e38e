package connector_test

import (
	"testing"

	"github.com/strand-io/strand/stream/connector"
)

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
			if got := connector.PartitionOf([]byte(c.key), n); got != c.hash%n {
				t.Errorf("PartitionOf(%q, %d) = %d, want %d", c.key, n, got, c.hash%n)
			}
		}
	}
	if got := connector.PartitionOf([]byte("abc"), 0); got != 0 {
		t.Errorf("PartitionOf with 0 partitions = %d, want 0", got)
	}
}

func TestFieldKindString(t *testing.T) {
	for k, want := range map[connector.FieldKind]string{0: "default", connector.FieldRaw: "raw", connector.FieldString: "string",
		connector.FieldUint64: "uint64", connector.FieldDouble: "double", 16: "kind-16"} {
		if got := k.String(); got != want {
			t.Errorf("FieldKind(%d).String() = %q, want %q", k, got, want)
		}
		if k.Valid() != (k <= 15) {
			t.Errorf("FieldKind(%d).Valid() = %v", k, k.Valid())
		}
	}
}
