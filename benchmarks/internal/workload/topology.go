package workload

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/topology"
)

// Source is the name of the accounts log ("stream/topic"), as
// connectors/iggy names the example's topic.
const Source = bank.Stream + "/" + bank.Topic

// Topo is the example's balances topology for one codec.
type Topo struct {
	Topology *topology.Topology
	Balances *state.Table[AccountID, Account]
	Decls    Decls
}

// NewTopology returns bank.NewTopology for d's codec, reading Source.
func NewTopology(d Decls, opts ...topology.Option) *Topo {
	t, bal := bank.NewTopology(d.Events, Source, opts...)
	return &Topo{Topology: t, Balances: bal, Decls: d}
}

// Locator returns the state locator for n partitions (stream.Locator):
// the partition of a key's bytes, as the publisher and Iggy choose it.
func Locator(n uint32) state.Option { return stream.Locator(n) }

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
