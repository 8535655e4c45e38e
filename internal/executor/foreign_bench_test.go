package executor

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// BenchmarkForeignTasks measures what classification costs: b.N deposits
// over 10,000 accounts in one partition, processed by Task.Process in
// batches of DefaultPollSize (no runtime, no sync), as records with strand
// headers ("strand"), and as foreign records classified by a function that
// decodes the JSON payload ("foreign-json") or reads the key from a header
// ("foreign-header"); each with the classification on the program's 4
// workers and on 1. The figure is events/s.
func BenchmarkForeignTasks(b *testing.B) {
	headerClassify := func(m stream.ForeignMessage) (stream.Classified[string], error) {
		k, _ := m.Header("key")
		return stream.Classified[string]{Key: string(k), Tag: fDeposits.Tag()}, nil
	}
	for _, c := range []struct {
		name    string
		foreign *ForeignSpec
	}{
		{"strand", nil},
		{"foreign-json", NewForeign(fClassify, stream.StringKey[string]())},
		{"foreign-header", NewForeign(headerClassify, stream.StringKey[string]())},
	} {
		for _, workers := range []int{4, 1} {
			if c.foreign == nil && workers == 1 {
				continue
			}
			b.Run(fmt.Sprintf("%s/workers=%d", c.name, workers), func(b *testing.B) {
				benchForeignTasks(b, c.foreign, workers)
			})
		}
	}
}

func benchForeignTasks(b *testing.B, foreign *ForeignSpec, workers int) {
	bal := state.NewTable[string, int64]("balances", stream.StringKey[string](), state.JSON[int64]())
	prog, err := NewProgram(Spec{Name: "foreign-bench", Workers: workers, Sources: []SourceSpec{{Name: foreignSource, Foreign: foreign,
		Handlers: []Handler{Project(fDeposits, bal, func(v *int64, e fDeposit) error { *v += e.Amount; return nil })}}}})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	recs := make([]connector.Record, b.N)
	for i := range recs {
		acct := fmt.Sprintf("acct-%d", rng.IntN(10_000))
		if foreign == nil {
			recs[i], err = fDeposits.Record(0, uint64(i), fDeposit{Acct: acct, Amount: 1})
			if err != nil {
				b.Fatal(err)
			}
			continue
		}
		recs[i] = fMsg(uint64(i), "deposit", fmt.Sprintf(`{"a":%q,"n":1}`, acct), connector.Field{Name: "key", Value: []byte(acct)})
	}
	db, err := state.Open(b.TempDir(), state.WithDurability(state.NoSync))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	if err := prog.Attach(db); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	task, err := prog.NewTask(ctx, db, foreignSource, 0, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for lo := 0; lo < len(recs); lo += benchBatch {
		res, err := task.Process(ctx, recs[lo:min(lo+benchBatch, len(recs))])
		if err != nil || len(res.DeadLetters) > 0 {
			b.Fatal(err, res.DeadLetters)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

// benchBatch is the batch size of the benchmark: the pipelines' default
// poll size (pipeline.DefaultPollSize).
const benchBatch = 4096
