package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// Rounds read back from the store (after a restart, or when memory gave
// up) may cut a row: its messages are published in order across rounds,
// and it is deleted only with its last one.
func TestOutboxStoreRoundsCutRows(t *testing.T) {
	db, err := state.Open(t.TempDir(), state.WithDurability(state.NoSync))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	const procSource, outTopicA = "src", "out-a"
	origin := rows.OriginStream("topo", procSource, 0)
	tx := db.NewTxn()
	seq := uint64(1)
	var rowStarts []uint64
	for _, n := range []int{5, 1, 7, 3} {
		var enc rows.OutboxEncoder
		enc.Begin(origin, []string{outTopicA})
		for i := range n {
			h := connector.Headers{Key: []byte("k" + strconv.Itoa(i)), Tag: 1, Ordering: planner.Relaxed}
			enc.Add(0, &h, fmt.Appendf(nil, "k%d:%d", i, int(seq)+i))
		}
		tx.PutRow(state.FamilyOutbox, 0, rows.OutboxKey(procSource, seq), enc.End())
		rowStarts = append(rowStarts, seq)
		seq += uint64(n)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	e, err := newEnv(Config{Source: procSource, DB: db, Log: slog.Default(), Sinks: map[string]connector.Sink{outTopicA: nopSink{}}, Backoff: [2]time.Duration{time.Millisecond, time.Millisecond},
		Update: func(uint32, func(*stream.PartitionStats)) {}, Pending: func(uint32) int64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	k := newMessageKind(e)
	var got []uint64
	deleted := map[string]bool{}
	for round := 0; ; round++ {
		rs, err := k.rows(context.Background(), 0, 4, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 0 {
			break
		}
		if len(rs) > 4 {
			t.Fatalf("round of %d rows over a limit of 4", len(rs))
		}
		for _, r := range rs {
			if r.last {
				deleted[string(r.key)] = true
			}
			got = append(got, r.order)
		}
		if err := k.afterDelete(0, rs); err != nil {
			t.Fatal(err)
		}
		if round > 20 {
			t.Fatal("rounds do not end")
		}
	}
	for i, s := range got {
		if s != uint64(i+1) {
			t.Fatalf("rounds gave %v, want 1..%d in order", got, seq-1)
		}
	}
	if len(got) != int(seq-1) || len(deleted) != len(rowStarts) {
		t.Fatalf("%d messages, %d rows deleted; want %d and %d", len(got), len(deleted), seq-1, len(rowStarts))
	}
	for _, s := range rowStarts {
		if !deleted[string(rows.OutboxKey(procSource, s))] {
			t.Errorf("row %d never ended a round", s)
		}
	}
}

// nopSink accepts every message (the rounds are read, never sent).
type nopSink struct{}

func (nopSink) Send(context.Context, []connector.Message) error { return nil }
