package bank_test

import (
	"context"
	"fmt"
	"os"

	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// exampleTB is the small adapter topologytest.NewDriver needs outside a test.
type exampleTB struct {
	dir string
	fns []func()
}

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Errorf(format string, a ...any) { fmt.Printf(format+"\n", a...) }
func (e *exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) Cleanup(fn func())              { e.fns = append(e.fns, fn) }
func (e *exampleTB) TempDir() string                { return e.dir }
func (e *exampleTB) close()                         { runCleanups(e.fns); os.RemoveAll(e.dir) }
func runCleanups(fns []func()) {
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// The accounts topology on the test driver: an account is opened, gets two
// deposits (which fold into one), a withdrawal, is closed (the balance is
// paid out) and re-opened; the table holds what a sequential fold gives.
func Example() {
	dir, _ := os.MkdirTemp("", "bank-example-")
	tb := &exampleTB{dir: dir}
	defer tb.close()

	ev := bank.Declarations(bank.JSON)
	topo, balances := bank.NewTopology(ev, "bank/accounts")
	d := topologytest.NewDriver(tb, topo, topologytest.WithPartitions(8))
	topologytest.Pipe(d, ev.Opened, bank.AccountOpened{Account: 42, Owner: "ada"})
	topologytest.Pipe(d, ev.Deposits, bank.Deposited{Account: 42, Amount: 100}, bank.Deposited{Account: 42, Amount: 50})
	topologytest.Pipe(d, ev.Withdrawals, bank.Withdrawn{Account: 42, Amount: 30})
	topologytest.Pipe(d, ev.Closed, bank.AccountClosed{Account: 42})
	topologytest.Pipe(d, ev.Opened, bank.AccountOpened{Account: 42, Owner: "ada"})
	topologytest.Pipe(d, ev.Deposits, bank.Deposited{Account: 42, Amount: 7})
	d.Advance()

	a, _, _ := balances.Get(context.Background(), 42)
	fmt.Printf("%s: balance %d, paid out %d, opened %d times\n", a.Status, a.Balance, a.PaidOut, a.Openings)
	// Output:
	// open: balance 7, paid out 120, opened 2 times
}
