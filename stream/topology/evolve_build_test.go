package topology_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// evolving is the accounts topology of version v: v 1 folds balances as
// accounts() does and publishes every deposit to "bank/receipts"; v 2
// declares balances with version 2 whose fold counts deposits twice
// (a fixed fold), and adds the table "owners"; v 3 is v 2 without owners.
func evolving(v int) (*topology.Topology, *topology.Table[AccountID, Account], *topology.Table[AccountID, string]) {
	t := topology.New("accounts")
	src := topology.Source[AccountID](t, "bank/accounts")
	var opts []topology.TableOption
	if v > 1 {
		opts = append(opts, topology.WithTableVersion(2))
	}
	balances := topology.NewTable[AccountID, Account](t, "balances", stream.JSON[Account](), opts...)
	factor := int64(min(v, 2))
	topology.Project(topology.On(src, Opened), balances, func(a *Account, e AccountOpened) error {
		a.Owner, a.Open = e.Owner, true
		a.Opens++
		return nil
	})
	topology.Project(topology.On(src, Deposits), balances, func(a *Account, e Deposited) error {
		a.Balance += factor * e.Amount
		return nil
	})
	topology.To(topology.On(src, Deposits), "receipts", "bank/receipts", Deposits,
		func(_ context.Context, _ AccountID, e Deposited, emit func(Deposited)) error {
			emit(e)
			return nil
		})
	var owners *topology.Table[AccountID, string]
	if v == 2 {
		owners = topology.NewTable[AccountID, string](t, "owners", stream.JSON[string]())
		topology.Project(topology.On(src, Opened), owners, func(o *string, e AccountOpened) error {
			*o += e.Owner + ";"
			return nil
		})
	}
	return t, balances, owners
}

// evolveModel is the reference: the folds of every event piped, by
// version.
type evolveModel struct {
	owners   map[AccountID]string
	balances [3]map[AccountID]int64
	deposits int
}

func newEvolveModel() *evolveModel {
	m := &evolveModel{owners: map[AccountID]string{}}
	for i := range m.balances {
		m.balances[i] = map[AccountID]int64{}
	}
	return m
}

func (m *evolveModel) pipe(d *topologytest.Driver, rng *rand.Rand, n int) {
	for range n {
		acct := AccountID(rng.IntN(20))
		if rng.IntN(4) == 0 {
			owner := fmt.Sprintf("o%d", rng.IntN(100))
			topologytest.Pipe(d, Opened, AccountOpened{Account: acct, Owner: owner})
			m.owners[acct] += owner + ";"
			continue
		}
		amt := int64(rng.IntN(50) + 1)
		topologytest.Pipe(d, Deposits, Deposited{Account: acct, Amount: amt})
		for v := 1; v < 3; v++ {
			m.balances[v][acct] += int64(v) * amt
		}
		m.deposits++
	}
}

// TestBuildInBackground: a store written by version 1 is opened by
// version 2, which adds a table and declares a new version of another.
// Both are built in the background while new events arrive; until the
// switch, reads of the new table are refused with ErrTableBuilding and
// reads of the rebuilt one answer version 1's values; afterwards both
// equal the reference folds of every event, and every deposit was
// published once.
func TestBuildInBackground(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(26, 1))
	m := newEvolveModel()
	dir := t.TempDir()

	topo1, _, _ := evolving(1)
	d := topologytest.NewDriver(t, topo1, topologytest.WithDir(dir), topologytest.WithPartitions(3), topologytest.WithBatchSize(7))
	m.pipe(d, rng, 300)
	d.Advance()
	topo2, balances, owners := evolving(2)
	d.Evolve(topo2)
	// While building: a refusal or version 1's value, never anything else.
	for acct := range AccountID(20) {
		if _, _, err := owners.Get(ctx, acct); err != nil && !errors.Is(err, topology.ErrTableBuilding) {
			t.Fatalf("owners.Get(%d) while building = %v, want ErrTableBuilding or a value", acct, err)
		}
		a, _, err := balances.Get(ctx, acct)
		if err != nil {
			t.Fatalf("balances.Get(%d) while rebuilding = %v", acct, err)
		}
		if a.Balance != m.balances[1][acct] && a.Balance != m.balances[2][acct] {
			t.Fatalf("balances.Get(%d) while rebuilding = %d, neither version 1's %d nor 2's %d", acct, a.Balance, m.balances[1][acct], m.balances[2][acct])
		}
	}
	m.pipe(d, rng, 300)
	d.Advance()
	if b := d.App().Builds(); len(b) != 2 || b[0].Table != "balances" || !b[0].Replacing || b[1].Table != "owners" || b[1].Replacing {
		t.Fatalf("builds = %+v, want balances (replacing) and owners (new)", b)
	}
	if st := d.App().Stats(); len(st) != 1 || len(st[0].Builds) != 2 || !st[0].Builds[0].Done || st[0].Builds[0].Built != st[0].Builds[0].Target {
		t.Errorf("Stats builds = %+v, want balances and owners done", st)
	}
	for _, bp := range d.App().Builds() {
		if !bp.Done || bp.Left != 0 {
			t.Fatalf("build of %q not done after Advance: %+v", bp.Table, bp)
		}
	}
	for acct := range AccountID(20) {
		o, _, err := owners.Get(ctx, acct)
		if err != nil || o != m.owners[acct] {
			t.Errorf("owners.Get(%d) = %q, %v; want %q", acct, o, err, m.owners[acct])
		}
		a, _, err := balances.Get(ctx, acct)
		if err != nil || a.Balance != m.balances[2][acct] {
			t.Errorf("balances.Get(%d) = %d, %v; want version 2's %d", acct, a.Balance, err, m.balances[2][acct])
		}
	}
	if got := len(topologytest.Outputs(d, "bank/receipts", Deposits)); got != m.deposits {
		t.Errorf("%d receipts published, want %d (one per deposit)", got, m.deposits)
	}
	// A restart after the switch serves the built rows without a build.
	d.Restart()
	if b := d.App().Builds(); len(b) != 0 {
		t.Errorf("builds after a restart past the switch: %+v", b)
	}
	a, _, err := balances.Get(ctx, 3)
	if err != nil || a.Balance != m.balances[2][3] {
		t.Errorf("after restart balances.Get(3) = %d, %v; want %d", a.Balance, err, m.balances[2][3])
	}
	// A table removed from the topology is dropped at Open.
	topo3, _, _ := evolving(3)
	d.Evolve(topo3)
	d.Close()
	db, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.RegisteredTables(); !slices.Equal(got, []string{"balances"}) {
		t.Errorf("tables after owners was removed: %v, want balances alone", got)
	}
}

// TestInPlaceRefusedSaysWhy: a change Open cannot make in place (a new
// version of a table with a TTL: a build cannot replay expiries) is
// refused with the differences and why not in place; the store is left
// as it was (the old topology opens it again).
func TestInPlaceRefusedSaysWhy(t *testing.T) {
	dir := t.TempDir()
	topo1, _, _ := evolving(1)
	d := topologytest.NewDriver(t, topo1, topologytest.WithDir(dir))
	topologytest.Pipe(d, Deposits, Deposited{Account: 1, Amount: 5})
	d.Advance()
	d.Close()

	ttl := topology.New("accounts")
	src := topology.Source[AccountID](ttl, "bank/accounts")
	bal := topology.NewTable[AccountID, Account](ttl, "balances", stream.JSON[Account](), topology.WithTableVersion(2), topology.WithTTL(time.Hour))
	topology.Project(topology.On(src, Opened), bal, func(*Account, AccountOpened) error { return nil })
	topology.Project(topology.On(src, Deposits), bal, func(*Account, Deposited) error { return nil })
	topology.To(topology.On(src, Deposits), "receipts", "bank/receipts", Deposits,
		func(_ context.Context, _ AccountID, e Deposited, emit func(Deposited)) error {
			emit(e)
			return nil
		})
	ftb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		topologytest.NewDriver(ftb, ttl, topologytest.WithDir(dir)).Close()
	}()
	<-done
	for _, want := range []string{`changed table "balances" version`, `not made in place: table "balances" cannot be built in the background: it has a TTL or timers`, "strand reset"} {
		if !strings.Contains(ftb.msg, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, ftb.msg)
		}
	}
	if msg := openRefused(t, func() *topology.Topology { t, _, _ := evolving(1); return t }(), dir); msg != "" {
		t.Errorf("the old topology cannot open the store after a refused change: %s", msg)
	}
}
