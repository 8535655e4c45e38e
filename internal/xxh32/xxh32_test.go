package xxh32

import "testing"

func TestSumVectors(t *testing.T) {
	long := make([]byte, 101)
	for i := range long {
		long[i] = byte(i)
	}
	for _, tc := range []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0x02cc5d05},
		{"abc", 0, 0x32d153ff},
		{"user-1", 0, 0xa43fb6ad},
		{"order-42", 0, 0xbbc33ad1},
		{"Nobody inspects the spammish repetition", 0, 0xe2293b2f},
		{"", 1, 0x0b2cb792},
	} {
		if got := Sum([]byte(tc.in), tc.seed); got != tc.want {
			t.Errorf("Sum(%q, %d) = %#x, want %#x", tc.in, tc.seed, got, tc.want)
		}
	}
}

func TestPartition(t *testing.T) {
	if got := Partition([]byte("user-1"), 4); got != 0xa43fb6ad%4 {
		t.Fatalf("Partition = %d", got)
	}
	if got := Partition([]byte("x"), 0); got != 0 {
		t.Fatalf("Partition with 0 partitions = %d", got)
	}
}

func BenchmarkSum16(b *testing.B) {
	k := []byte("account-00001234")
	for b.Loop() {
		Sum(k, 0)
	}
}
