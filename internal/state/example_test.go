package state_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/strand-io/strand/internal/state"
)

type Account struct {
	Owner   string `json:"owner"`
	Balance int64  `json:"balance"`
}

// A partition pipeline folds a batch of events into a Txn and commits the
// new state together with the checkpoint; queries read committed state.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "strand-state-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Tables are declared before the database is open.
	balances := state.NewTable("balances", state.String(), state.JSON[Account]())

	db, err := state.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := db.EnsureFingerprint([]byte("accounts-v1")); err != nil {
		log.Fatal(err)
	}
	if err := db.Attach(balances); err != nil {
		log.Fatal(err)
	}

	// One batch of partition 0: deposits at offsets 0..2.
	tx := db.NewTxn()
	defer tx.Discard() // does nothing after Commit
	for _, amount := range []int64{100, 50, 25} {
		acct, _, err := balances.Read(tx, 0, []byte("alice")) // sees this Txn's writes
		if err != nil {
			log.Fatal(err)
		}
		acct.Owner = "alice"
		acct.Balance += amount
		if err := balances.Write(tx, 0, []byte("alice"), acct); err != nil {
			log.Fatal(err)
		}
	}
	tx.SetCheckpoint("bank/accounts", 0, 3)
	if err := tx.Commit(ctx); err != nil { // state and checkpoint, atomically
		log.Fatal(err)
	}

	acct, ok, err := balances.Get(ctx, "alice")
	if err != nil {
		log.Fatal(err)
	}
	next, _, err := db.Checkpoint("bank/accounts", 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(acct.Owner, acct.Balance, ok)
	fmt.Println("resume partition 0 at offset", next)
	// Output:
	// alice 175 true
	// resume partition 0 at offset 3
}
