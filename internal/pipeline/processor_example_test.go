package pipeline

import (
	"github.com/strand-io/strand/internal/executor"

	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/state"
)

// A processor runs a program over a partitioned source until its context
// ends. Here the source is an in-memory log of two partitions (in
// production: connectors/iggy.NewSource), and dead letters go to an
// in-memory sink (in production: an Iggy "<topic>.dlq" topic through
// connectors/iggy.NewSink).
func ExampleProcessor() {
	deposits := stream.Declare[string, procDeposit](1,
		stream.WithReduce(algebra.Sum(func(e procDeposit) int64 { return e.Amount }, func(e procDeposit, n int64) procDeposit { e.Amount = n; return e })))
	balances := state.NewTable[string, int64]("balances", stream.StringKey[string](), state.JSON[int64]())
	balances.SetPartitions(2)
	prog, err := executor.NewProgram(executor.Spec{Name: "bank", Sources: []executor.SourceSpec{{
		Name: "bank/accounts",
		Handlers: []executor.Handler{executor.Project(deposits, balances, func(v *int64, e procDeposit) error {
			*v += e.Amount
			return nil
		})},
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}

	src := newMemSource("bank/accounts", 2)
	for _, e := range []procDeposit{{"alice", 10}, {"bob", 5}, {"alice", 32}} {
		env, _ := deposits.Envelope(e)
		src.appendEnv(env)
	}
	src.append(0, connector.Record{HeaderErr: fmt.Errorf("no strand headers"), Payload: []byte("?")})

	dir, _ := os.MkdirTemp("", "strand-example")
	defer os.RemoveAll(dir)
	db, err := state.Open(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	dlq := newMemSink()
	p, err := NewProcessor(prog, db, src,
		WithDeadLetterSink(dlq),
		WithProcessorLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	for p.Stats().Total.Published < 1 || p.Stats().Total.Applied < 3 {
		time.Sleep(time.Millisecond) // polls the stats
	}
	cancel()
	fmt.Println("run:", <-done)

	for _, acct := range []string{"alice", "bob"} {
		v, _, _ := balances.Get(context.Background(), acct)
		fmt.Println(acct, v)
	}
	m := dlq.Messages()[0]
	fmt.Println("dead letter:", header(m, deadletter.HeaderReason), "from partition", header(m, deadletter.HeaderPartition), "offset", header(m, deadletter.HeaderOffset))
	// Output:
	// run: <nil>
	// alice 42
	// bob 5
	// dead letter: bad-headers from partition 0 offset 0
}
