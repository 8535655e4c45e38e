package topology_test

import (
	"context"
	"errors"
	"testing"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// TestMain: property tests try 50 cases each (500 with STRAND_SOAK=1),
// and no goroutine may leak (internal/testrun).
func TestMain(m *testing.M) { testrun.Main(m) }

type AccountID uint64

type AccountOpened struct {
	Account AccountID
	Owner   string
}

type Deposited struct {
	Account AccountID
	Amount  int64
}

type Withdrawn struct {
	Account AccountID
	Amount  int64
}

type AccountClosed struct{ Account AccountID }

func (e AccountOpened) Key() AccountID { return e.Account }
func (e Deposited) Key() AccountID     { return e.Account }
func (e Withdrawn) Key() AccountID     { return e.Account }
func (e AccountClosed) Key() AccountID { return e.Account }

type Account struct {
	Owner   string
	Balance int64
	Open    bool
	Opens   int
}

var (
	Opened   = stream.Declare[AccountID, AccountOpened](1, stream.WithFence(planner.Acquire))
	Deposits = stream.Declare[AccountID, Deposited](2, stream.WithReduce(algebra.Sum(
		func(d Deposited) int64 { return d.Amount },
		func(d Deposited, n int64) Deposited { d.Amount = n; return d })))
	Withdraws = stream.Declare[AccountID, Withdrawn](3)
	Closed    = stream.Declare[AccountID, AccountClosed](4, stream.WithFence(planner.Release))
)

func accounts() (*topology.Topology, *topology.Table[AccountID, Account]) {
	t := topology.New("accounts")
	src := topology.Source[AccountID](t, "bank/accounts")
	balances := topology.NewTable[AccountID, Account](t, "balances", stream.JSON[Account]())
	topology.Project(topology.On(src, Opened), balances, func(a *Account, e AccountOpened) error {
		a.Owner, a.Open = e.Owner, true
		a.Opens++
		return nil
	})
	topology.Project(topology.On(src, Deposits), balances, func(a *Account, e Deposited) error {
		if !a.Open {
			return errors.New("deposit to a closed account")
		}
		a.Balance += e.Amount
		return nil
	})
	topology.Project(topology.On(src, Withdraws), balances, func(a *Account, e Withdrawn) error {
		a.Balance -= e.Amount
		return nil
	})
	topology.Project(topology.On(src, Closed), balances, func(a *Account, e AccountClosed) error {
		a.Open = false
		return nil
	})
	return t, balances
}

func TestDriverAccounts(t *testing.T) {
	topo, balances := accounts()
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2), topologytest.WithBatchSize(3))
	topologytest.Pipe(d, Opened, AccountOpened{Account: 42, Owner: "ada"}, AccountOpened{Account: 7, Owner: "bob"})
	topologytest.Pipe(d, Deposits, Deposited{42, 100}, Deposited{7, 5}, Deposited{42, 20})
	topologytest.Pipe(d, Withdraws, Withdrawn{42, 30})
	topologytest.Pipe(d, Closed, AccountClosed{42})
	d.Advance()
	ctx := context.Background()
	a, ok, err := balances.Get(ctx, 42)
	if err != nil || !ok {
		t.Fatalf("Get(42) = %v, %v", ok, err)
	}
	if a.Balance != 90 || a.Open || a.Owner != "ada" {
		t.Fatalf("account 42 = %+v", a)
	}
	d.Restart()
	topologytest.Pipe(d, Deposits, Deposited{7, 1})
	d.Advance()
	b, _, _ := balances.Get(ctx, 7)
	if b.Balance != 6 || !b.Open {
		t.Fatalf("account 7 = %+v", b)
	}
	if d.Lag() != 0 {
		t.Fatalf("lag %d", d.Lag())
	}
}
