package topology_test

import (
	"context"
	"fmt"
	"os"

	"github.com/strand-io/strand/stream/topology/topologytest"
)

// exampleTB lets an Example use the driver; in a test, pass the *testing.T.
type exampleTB struct{ cleanups []func() }

func (*exampleTB) Helper()                      {}
func (*exampleTB) Errorf(f string, args ...any) { fmt.Printf(f+"\n", args...) }
func (*exampleTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (tb *exampleTB) Cleanup(fn func())         { tb.cleanups = append(tb.cleanups, fn) }
func (tb *exampleTB) TempDir() string {
	d, _ := os.MkdirTemp("", "strand-")
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}
func (tb *exampleTB) done() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}

// Example builds the bank-account read model of the seed (see accounts in
// driver_test.go) and runs it through the test driver: no broker, the same
// executor and a real store, then a restart that resumes from the
// checkpoint.
func Example() {
	tb := &exampleTB{}
	defer tb.done()
	topo, balances := accounts()
	d := topologytest.NewDriver(tb, topo, topologytest.WithPartitions(2))

	topologytest.Pipe(d, Opened, AccountOpened{Account: 42, Owner: "ada"})
	topologytest.Pipe(d, Deposits, Deposited{42, 100}, Deposited{42, 20})
	topologytest.Pipe(d, Withdraws, Withdrawn{42, 30})
	d.Advance()

	d.Restart() // close the store and resume from its checkpoints
	topologytest.Pipe(d, Closed, AccountClosed{42})
	d.Advance()

	a, _, err := balances.Get(context.Background(), 42)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("owner %s balance %d open %v\n", a.Owner, a.Balance, a.Open)
	fmt.Println("lag", d.Lag(), "dead letters", len(d.DeadLetters()))
	// Output:
	// owner ada balance 90 open false
	// lag 0 dead letters 0
}
