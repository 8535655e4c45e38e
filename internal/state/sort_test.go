package state

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The commit's radix sort orders keys exactly as comparing them does.
func TestRadixSortDirtyOrdersKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		n := r.IntN(600)
		var keys []dirtyKey
		for range n {
			key := make([]byte, r.IntN(14))
			for i := range key {
				key[i] = byte(r.IntN(4)) // many shared bytes and ties in the prefix
			}
			k := string(appendTableKey(nil, 7, uint32(r.IntN(3))*0x01000100, key))
			part, p := sortPrefix(k)
			keys = append(keys, dirtyKey{part: part, p: p, k: k})
		}
		got, _ := radixSortDirty(slices.Clone(keys), nil)
		want := slices.Clone(keys)
		slices.SortFunc(want, func(a, b dirtyKey) int { return strings.Compare(a.k, b.k) })
		for i := range want {
			if got[i].k != want[i].k {
				t.Fatalf("trial %d: position %d: %x, want %x", trial, i, got[i].k, want[i].k)
			}
		}
	}
}
