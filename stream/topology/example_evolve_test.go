package topology_test

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/stream/topology/topologytest"
)

// ExampleApp_Builds changes a running read model: version 2 of the
// accounts topology fixes the deposit fold (WithTableVersion(2)) and adds
// an owners table. Opened on version 1's store, it rebuilds balances
// beside its old rows and builds owners from the log in the background,
// then switches; the receipts published by version 1 are not published
// again.
func ExampleApp_Builds() {
	tb := &exampleTB{}
	defer tb.done()
	v1, _, _ := evolving(1)
	d := topologytest.NewDriver(tb, v1, topologytest.WithPartitions(2))
	topologytest.Pipe(d, Opened, AccountOpened{Account: 42, Owner: "ada"})
	topologytest.Pipe(d, Deposits, Deposited{42, 100}, Deposited{42, 20})
	d.Advance()

	v2, balances, owners := evolving(2)
	d.Evolve(v2) // what a deployment of the new code does: topology.Open on the same directory
	d.Advance()  // waits for the builds too
	for _, b := range d.App().Builds() {
		fmt.Printf("%s: replacing old rows %v, done %v\n", b.Table, b.Replacing, b.Done)
	}
	ctx := context.Background()
	a, _, _ := balances.Get(ctx, 42)
	o, _, _ := owners.Get(ctx, 42)
	fmt.Printf("balance %d (version 2 counts deposits twice), owners %q\n", a.Balance, o)
	fmt.Println("receipts published:", len(topologytest.Outputs(d, "bank/receipts", Deposits)))
	// Output:
	// balances: replacing old rows true, done true
	// owners: replacing old rows false, done true
	// balance 240 (version 2 counts deposits twice), owners "ada;"
	// receipts published: 2
}
