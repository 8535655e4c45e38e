package workload

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/state"
	"github.com/strand-io/strand/stream/topology"
)

// Source is the name of the accounts log ("stream/topic").
const Source = "bank/accounts"

// Topo is the balances topology for one codec.
type Topo struct {
	Topology *topology.Topology
	Balances *state.Table[AccountID, Account]
	Decls    Decls
}

// NewTopology declares the balances read model: every event type projects
// into one table, as in DESIGN.md §11.
func NewTopology(d Decls, opts ...topology.Option) *Topo {
	t := topology.New("accounts-bench", opts...)
	src := topology.Source[AccountID](t, Source)
	bal := topology.Table[AccountID, Account](t, "balances", d.Values)
	topology.Project(topology.On(src, d.Opened), bal, FoldOpened)
	topology.Project(topology.On(src, d.Deposited), bal, FoldDeposited)
	topology.Project(topology.On(src, d.Withdrawn), bal, FoldWithdrawn)
	topology.Project(topology.On(src, d.Closed), bal, FoldClosed)
	return &Topo{Topology: t, Balances: bal, Decls: d}
}

// Locator returns the state locator for n partitions: the partition of a
// key's bytes, as the publisher and Iggy choose it.
func Locator(n uint32) state.Option {
	return state.WithLocator(func(key []byte) uint32 { return xxh32.Partition(key, n) })
}

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

// Ensure the declarations encode as stream.Encoder.
var _ stream.Encoder[Opened] = (*stream.Event[AccountID, Opened])(nil)
