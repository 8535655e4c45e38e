package iggy

import (
	"fmt"
	"testing"
)

// BenchmarkPollDecodeForeign decodes one poll reply of n JSON messages of
// a plain producer (two String headers each, no strand headers) with a
// foreign decoder: records with their raw messages, three allocations per
// reply. Compare with BenchmarkPollDecode/strand, the strand-header path.
func BenchmarkPollDecodeForeign(b *testing.B) {
	ref, _ := newTopicRef("s", "t")
	for _, n := range []int{64, 4096} {
		reply := buildReply(0, foreignMsgs(n))
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			d := fetchDecoder{t: ref, foreign: true}
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
