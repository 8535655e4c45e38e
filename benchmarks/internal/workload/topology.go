package workload

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// Source is the name of the accounts log ("stream/topic"), as
// connectors/iggy names the example's topic.
const Source = bank.Stream + "/" + bank.Topic

// Topo is the example's balances program for one codec, compiled for the
// engine directly: the benchmarks drive its Tasks and processors without
// the front door, to measure the core itself.
type Topo struct {
	Program  *executor.Program
	Balances *state.Table[AccountID, Account]
	Decls    Decls
}

// NewTopology returns the program of bank.NewTopology for d's codec,
// reading Source, with the same name, table and folds (so the same
// fingerprint).
func NewTopology(d Decls, workers int) (*Topo, error) { return NewTopologyVersion(d, workers, 0) }

// NewTopologyVersion is NewTopology with the balances table declared at
// version (0: none): a store written by another version rebuilds the
// table in the background (docs/design.md §19).
func NewTopologyVersion(d Decls, workers int, version uint32) (*Topo, error) {
	ev := d.Events
	keys, err := stream.DefaultKeyCodec[AccountID]()
	if err != nil {
		return nil, err
	}
	var values stream.Codec[Account] = stream.JSON[Account]()
	if ev.Codec == bank.Binary {
		values = stream.Binary[Account]()
	}
	bal := state.NewTable[AccountID, Account]("balances", keys, values)
	bal.SetVersion(version)
	prog, err := executor.NewProgram(executor.Spec{
		Name:    bank.TopologyName(ev.Codec),
		Workers: workers,
		Sources: []executor.SourceSpec{{Name: Source, Handlers: []executor.Handler{
			executor.Project(ev.Opened, bal, bank.ApplyOpened),
			executor.Project(ev.Deposits, bal, bank.ApplyDeposited),
			executor.Project(ev.Withdrawals, bal, bank.ApplyWithdrawn),
			executor.Project(ev.Closed, bal, bank.ApplyClosed),
		}}},
	})
	if err != nil {
		return nil, fmt.Errorf("workload: accounts program: %w", err)
	}
	return &Topo{Program: prog, Balances: bal, Decls: d}, nil
}

// SetPartitions tells the balances table how many partitions the source
// has, so Get finds rows in their key's partition first.
func (t *Topo) SetPartitions(n uint32) { t.Balances.SetPartitions(n) }

// ReadBalances scans the committed balances table.
func ReadBalances(ctx context.Context, t *state.Table[AccountID, Account]) (map[AccountID]Account, error) {
	got := map[AccountID]Account{}
	err := t.Scan(ctx, func(k AccountID, v Account) bool {
		got[k] = v
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("workload: scan balances: %w", err)
	}
	return got, nil
}
