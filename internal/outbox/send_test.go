package outbox

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/strand-io/strand/stream/connector"
)

// recordSink keeps the messages of every Send, and the slices it was given.
type recordSink struct {
	mu    sync.Mutex
	msgs  []connector.Message
	calls [][]connector.Message
}

func (s *recordSink) Send(_ context.Context, msgs []connector.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, msgs)
	s.msgs = append(s.msgs, msgs...)
	return nil
}

// commitRows builds the rows of one commit as writeOutbox lays them out:
// one array of messages, per destination in seq order; dests[i] is message
// i's destination.
func commitRows(first uint64, dests []string, sinks map[string]connector.Sink) []outRow {
	var order []string
	count := map[string]int{}
	for _, d := range dests {
		if count[d] == 0 {
			order = append(order, d)
		}
		count[d]++
	}
	at := map[string]int{}
	n := 0
	for _, d := range order {
		at[d] = n
		n += count[d]
	}
	msgs := make([]connector.Message, n)
	rows := make([]outRow, 0, n)
	for i, d := range dests {
		mi := at[d]
		at[d]++
		msgs[mi] = connector.Message{Key: []byte(fmt.Sprintf("%s-%d", d, first+uint64(i))), Payload: []byte{byte(i)}}
		rows = append(rows, outRow{order: first + uint64(i), dest: d, sink: sinks[d], msgs: msgs, mi: mi})
	}
	return rows
}

// TestSendRowsOrderAndNoCopy checks that sendRows gives each sink its
// messages in row order, whether a round is one commit's messages (handed
// over as the commit's array, capacity capped) or joins commits and rows
// read back (copied).
func TestSendRowsOrderAndNoCopy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts [][]string // commits of the round, each message's destination
		copy  bool       // the round cannot be handed over as it is
	}{
		{"one commit, one destination", [][]string{{"a", "a", "a"}}, false},
		{"one commit, two destinations interleaved", [][]string{{"a", "b", "a", "b", "b", "a"}}, false},
		{"two commits", [][]string{{"a", "b", "a"}, {"b", "a"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sa, sb := &recordSink{}, &recordSink{}
			sinks := map[string]connector.Sink{"a": sa, "b": sb}
			var rows []outRow
			seq := uint64(1)
			for _, p := range tc.parts {
				rows = append(rows, commitRows(seq, p, sinks)...)
				seq += uint64(len(p))
			}
			if err := sendRows(context.Background(), rows); err != nil {
				t.Fatal(err)
			}
			for name, s := range map[string]*recordSink{"a": sa, "b": sb} {
				var want []string
				for _, r := range rows {
					if r.dest == name {
						want = append(want, string(r.msg().Key))
					}
				}
				sends := min(len(want), 1)
				if len(s.calls) != sends || len(s.msgs) != len(want) {
					t.Fatalf("sink %s: %d sends of %d messages, want %d of %d", name, len(s.calls), len(s.msgs), sends, len(want))
				}
				if sends == 0 {
					continue
				}
				for i := range want {
					if string(s.msgs[i].Key) != want[i] {
						t.Fatalf("sink %s: message %d is %q, want %q", name, i, s.msgs[i].Key, want[i])
					}
				}
				c := s.calls[0]
				if cap(c) != len(c) {
					t.Fatalf("sink %s: given %d messages with room for %d: an append would write into the next destination's", name, len(c), cap(c))
				}
				shared := false
				for _, r := range rows {
					if r.dest == name && &r.msgs[r.mi] == &c[0] {
						shared = true
					}
				}
				if shared == tc.copy {
					t.Fatalf("sink %s: handed the commit's array: %v, want %v", name, shared, !tc.copy)
				}
			}
		})
	}
}
