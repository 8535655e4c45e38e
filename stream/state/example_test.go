package state_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/state"
	"github.com/strand-io/strand/stream/topology"
)

// Deposit is the example's event.
type Deposit struct {
	Account string
	Amount  int64
}

// Example reads an App's store: first through the running App in this
// process (OpenApp, a consistent copy), then the stopped store's directory
// (Open), typed through the table's codecs and summed up.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := iggytest.NewServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	client, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	_ = client.EnsureTopic(ctx, "bank", "deposits", 2)
	deposits := stream.DeclareFunc(1, func(d Deposit) string { return d.Account })
	pub, _ := iggy.NewPublisher(ctx, client, "bank", "deposits")
	_ = iggy.PublishBatch(ctx, pub, deposits, []Deposit{{"ada", 5}, {"bob", 2}, {"ada", 6}})
	_ = pub.Close(ctx)

	topo := topology.New("balances")
	balances := topology.NewTable[string, int64](topo, "balances", stream.JSON[int64]())
	topology.Project(topology.On(topology.Source[string](topo, "bank/deposits"), deposits), balances,
		func(b *int64, d Deposit) error { *b += d.Amount; return nil })
	dir, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(dir)
	app, err := topology.Open(ctx, topo, client, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// The running App's store, in its own process.
	st, err := state.OpenApp(app)
	if err != nil {
		fmt.Println(err)
		return
	}
	ada, _, _ := state.Get(ctx, st, balances, "ada")
	fmt.Println("ada, while running:", ada)
	_ = st.Close()
	stop()
	<-done
	_ = app.Close()

	// The stopped store.
	st, err = state.Open(ctx, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	sum, err := st.Summary(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	h, p, d, o := sum.Waiting()
	fmt.Printf("table %s: %d rows; waiting: %d held, %d parked, %d dead letters, %d outbox\n",
		sum.Tables[0].Name, sum.Tables[0].Rows, h, p, d, o)
	total := int64(0)
	_ = state.Scan(ctx, st, balances, func(_ string, b int64) bool { total += b; return true })
	fmt.Println("total:", total)
	// Output:
	// ada, while running: 11
	// table balances: 2 rows; waiting: 0 held, 0 parked, 0 dead letters, 0 outbox
	// total: 13
}
