package pipeline

import (
	"github.com/strand-io/strand/internal/executor"

	"context"
	"fmt"

	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/state"
)

// BenchmarkProcessor measures the runtime end to end without a broker: b.N
// deposits over 10,000 accounts, already in an 8-partition in-memory log,
// processed until every checkpoint is at the end (poll, plan, execute with a
// sum reduction, commit, advise). The figure is events/s.
func BenchmarkProcessor(b *testing.B) {
	for _, d := range []state.Durability{state.NoSync, state.Sync} {
		for _, poll := range []int{512, DefaultPollSize} {
			b.Run(fmt.Sprintf("%s/poll=%d", d, poll), func(b *testing.B) {
				benchProcessor(b, d, poll)
			})
		}
		b.Run(fmt.Sprintf("%s/tasks-without-runtime/poll=%d", d, DefaultPollSize), func(b *testing.B) {
			benchTasks(b, d, DefaultPollSize)
		})
	}
}

// benchParts is the partition count of the benchmarks' log.
const benchParts = 8

// newDepositBench is the setup of BenchmarkProcessor: a fixture of
// benchParts partitions holding b.N deposits over 10,000 accounts, and a
// fresh store of durability d, closed when the benchmark ends.
func newDepositBench(b *testing.B, d state.Durability) (*procFixture, *state.DB) {
	fx := newProcFixture(b, benchParts, nil)
	rng := rand.New(rand.NewPCG(3, 4))
	for range b.N {
		env, err := fx.deposit.Envelope(procDeposit{Acct: "acct-" + strconv.Itoa(rng.IntN(10_000)), Amount: 1})
		if err != nil {
			b.Fatal(err)
		}
		fx.src.appendEnv(env)
	}
	db, err := state.Open(b.TempDir(), state.WithDurability(d))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return fx, db
}

func benchProcessor(b *testing.B, d state.Durability, poll int) {
	fx, db := newDepositBench(b, d)
	p, err := NewProcessor(fx.prog, db, fx.src, quiet(), WithPollSize(poll))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	for p.Stats().Total.Records < uint64(b.N) {
		time.Sleep(200 * time.Microsecond) // polls the stats
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	st := p.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(st.Total.Batches), "commits")
}

// benchTasks is the baseline of BenchmarkProcessor: the same work driven by
// calling Task.Process directly, partition after partition on one
// goroutine, with no reader, no overlap and no concurrency across
// partitions.
func benchTasks(b *testing.B, d state.Durability, poll int) {
	fx, db := newDepositBench(b, d)
	if err := fx.prog.Attach(db); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for pt := range uint32(benchParts) {
		task, err := fx.prog.NewTask(ctx, db, procSource, pt, executor.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		rd, _ := fx.src.Open(ctx, pt, 0)
		for n := len(fx.src.log(pt)); task.Next() < uint64(n); {
			recs, err := rd.Poll(ctx, poll)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := task.Process(ctx, recs); err != nil {
				b.Fatal(err)
			}
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}
