package stream_test

import (
	"context"
	"fmt"
	"os"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/state"
)

type Opened struct {
	Account AccountID
	Owner   string
}

func (o Opened) Key() AccountID { return o.Account }

// Example declares two event types, compiles a program by hand (package
// topology does this for you) and processes one batch of one partition
// with a Task: plan, execute, and one commit of table writes and checkpoint.
func Example() {
	opened := stream.Declare[AccountID, Opened](1, stream.Fence(planner.Acquire))
	deposits := stream.Declare[AccountID, Deposited](2, stream.Reduce(algebra.Sum(
		func(d Deposited) int64 { return d.Amount },
		func(d Deposited, n int64) Deposited { d.Amount = n; return d })))

	type Account struct {
		Owner   string
		Balance int64
	}
	keys, _ := stream.DefaultKeyCodec[AccountID]()
	balances := state.NewTable[AccountID, Account]("balances", keys, stream.JSON[Account]())
	prog, err := stream.NewProgram(stream.Spec{
		Name: "accounts",
		Sources: []stream.SourceSpec{{
			Name: "bank/accounts",
			Handlers: []stream.Handler{
				stream.Project(opened, balances, func(a *Account, e Opened) error { a.Owner = e.Owner; return nil }),
				stream.Project(deposits, balances, func(a *Account, e Deposited) error { a.Balance += e.Amount; return nil }),
				stream.Handle(deposits, "audit", 100, func(ctx context.Context, id AccountID, ds []Deposited) error {
					fmt.Printf("audit: account %d, %d reduced deposit(s), %d in total\n", id, len(ds), ds[0].Amount)
					return nil
				}),
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	dir, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(dir)
	db, _ := state.Open(dir)
	defer db.Close()
	if err := prog.Attach(db); err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	task, _ := prog.NewTask(ctx, db, "bank/accounts", 0)

	// A batch as a PartitionReader would return it: headers parsed, payloads
	// still encoded.
	r0, _ := opened.Record(0, 0, Opened{Account: 42, Owner: "ada"})
	r1, _ := deposits.Record(0, 1, Deposited{Account: 42, Amount: 100})
	r2, _ := deposits.Record(0, 2, Deposited{Account: 42, Amount: 20})
	res, err := task.Process(ctx, []stream.Record{r0, r1, r2})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("applied", res.Applied, "next offset", res.Next)
	a, _, _ := balances.Get(ctx, 42)
	fmt.Printf("%s has %d\n", a.Owner, a.Balance)
	// Output:
	// audit: account 42, 1 reduced deposit(s), 120 in total
	// applied [0 1 2] next offset 3
	// ada has 120
}

// ExampleDeclare shows the envelope a publisher sends for one event.
func ExampleDeclare() {
	deposits := stream.Declare[AccountID, Deposited](2)
	env, err := deposits.Envelope(Deposited{Account: 7, Amount: 5})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("key %x tag %d %s %s payload %s\n", env.Headers.Key, env.Headers.Tag,
		env.Headers.Ordering, env.Headers.Algebra, env.Payload)
	// Output: key 0000000000000007 tag 2 Relaxed NonAssociative payload {"Account":7,"Amount":5}
}
