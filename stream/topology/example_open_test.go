package topology_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream/topology"
)

// Example_open runs the accounts topology through the front door on strand's
// embedded Iggy broker: Open learns the partition count and keeps state in a
// directory, Run processes, Get reads committed state, Close stops it all.
func Example_open() {
	ctx := context.Background()
	srv, err := iggytest.NewServer() // or a real Iggy 0.8 server
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
	_ = client.EnsureTopic(ctx, "bank", "accounts", 4)

	pub, _ := iggy.NewPublisher(ctx, client, "bank", "accounts")
	_ = iggy.Publish(ctx, pub, Opened, AccountOpened{Account: 42, Owner: "ada"})
	_ = iggy.PublishBatch(ctx, pub, Deposits, []Deposited{{42, 100}, {42, 20}})
	_ = iggy.Publish(ctx, pub, Withdraws, Withdrawn{42, 30})
	_ = pub.Close(ctx)

	topo, balances := accounts()
	dir, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(dir)
	app, err := topology.Open(ctx, topo, client, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer app.Close()
	go app.Run(ctx)

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if a, ok, _ := balances.Get(ctx, 42); ok && a.Balance == 90 {
			fmt.Printf("%s has %d\n", a.Owner, a.Balance)
			break
		}
	}
	// Output: ada has 90
}
