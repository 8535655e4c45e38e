package iggy

import (
	"fmt"
	"testing"

	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// buildReply012 encodes the binary protocol 0.12.0 poll reply holding msgs:
// the same messages as buildReply, as batches of consecutive offsets that
// share a timestamp (one batch per run, as the server stores them).
func buildReply012(partition uint32, msgs []testMsg) []byte {
	var cur uint64
	if len(msgs) > 0 {
		cur = msgs[len(msgs)-1].offset
	}
	b := wire.PollPrefix{Partition: partition, CurrentOffset: cur, Count: uint32(len(msgs))}.Append(nil)
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].offset == msgs[j-1].offset+1 && msgs[j].ts == msgs[i].ts {
			j++
		}
		var start int
		b, start = wire.BeginBatch(b)
		for _, m := range msgs[i:j] {
			id := [16]byte{1}
			b = wire.AppendFrame(b, &id, uint32(m.offset-msgs[i].offset), 0, m.payload, m.headers)
		}
		wire.FinishBatch(b, start, msgs[i].ts-1, uint32(j-i))
		wire.StampBatch(b[start:], uint64(partition), msgs[i].offset, msgs[i].ts)
		i = j
	}
	return b
}

// The 0.10 decoder gives exactly what the legacy decoder gives for the same
// messages, across gaps, earlier offsets, malformed headers and several
// batches; and foreign records carry their raw message in both.
func TestFetchDecode012MatchesLegacy(t *testing.T) {
	ref, _ := newTopicRef("s", "t")
	bad := msgsFrom(3, 4)
	bad[1].headers = []byte{2, 255, 255, 255, 255}
	sameTS := msgsFrom(10, 11, 12)
	for i := range sameTS {
		sameTS[i].ts = 77
	}
	cases := []struct {
		name string
		msgs []testMsg
		want uint64
	}{
		{"contiguous", msgsFrom(5, 6, 7), 5},
		{"one batch", sameTS, 10},
		{"gap inside", msgsFrom(5, 6, 9, 10), 5},
		{"gap first", msgsFrom(8, 9), 5},
		{"earlier first", msgsFrom(3, 4, 5, 6), 5},
		{"bad headers", bad, 3},
		{"empty", nil, 0},
	}
	for _, foreign := range []bool{false, true} {
		leg := fetchDecoder{t: ref, partition: 2, foreign: foreign}
		v10 := fetchDecoder{t: ref, partition: 2, foreign: foreign, proto: wire.V012}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s foreign=%v", c.name, foreign), func(t *testing.T) {
				want, winfo, werr := leg.decode(buildReply(2, c.msgs), c.want)
				got, ginfo, gerr := v10.decode(buildReply012(2, c.msgs), c.want)
				if (werr == nil) != (gerr == nil) || winfo != ginfo {
					t.Fatalf("legacy %v %+v, 0.10 %v %+v", werr, winfo, gerr, ginfo)
				}
				for i := range want {
					want[i].Raw, got[i].Raw = nil, nil // ids differ by construction
				}
				if err := sameRecords(want, got); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// FuzzFetchDecode012: no 0.10 reply, however malformed, makes the decoder
// panic; what it accepts is a contiguous run from want.
func FuzzFetchDecode012(f *testing.F) {
	f.Add(buildReply012(0, msgsFrom(0, 1, 2)), uint64(0))
	f.Add(buildReply012(0, msgsFrom(4, 5, 7)), uint64(4))
	f.Add(buildReply012(0, nil), uint64(0))
	f.Add([]byte{}, uint64(0))
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, partition: 1, proto: wire.V012}
	f.Fuzz(func(t *testing.T, reply []byte, want uint64) {
		recs, _, err := d.decode(reply, want)
		if err != nil {
			if recs != nil {
				t.Fatal("records with an error")
			}
			return
		}
		for i, r := range recs {
			if r.Offset != want+uint64(i) || r.Partition != 1 {
				t.Fatalf("record %d: offset %d partition %d", i, r.Offset, r.Partition)
			}
			if cap(r.Payload) != len(r.Payload) {
				t.Fatal("payload capacity past its bytes")
			}
		}
	})
}
