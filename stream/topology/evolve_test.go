package topology_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// fatalTB records the failure of a Driver that could not open and ends the
// goroutine that met it.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// openRefused opens topo on dir and returns the message of its refusal ("":
// it opened).
func openRefused(t *testing.T, topo *topology.Topology, dir string) string {
	t.Helper()
	ftb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d := topologytest.NewDriver(ftb, topo, topologytest.WithDir(dir), topologytest.WithOpenOptions(topology.WithInPlaceChanges(false)))
		d.Close()
	}()
	<-done
	return ftb.msg
}

// TestRefusalListsChanges: a start of another topology on a store lists
// every difference, with whether it is safe and what to rebuild.
func TestRefusalListsChanges(t *testing.T) {
	dir := t.TempDir()
	topo, _ := accounts()
	d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir))
	topologytest.Pipe(d, Opened, AccountOpened{Account: 1, Owner: "ada"})
	d.Advance()
	d.Close()
	if msg := openRefused(t, func() *topology.Topology { topo, _ := accounts(); return topo }(), dir); msg != "" {
		t.Fatalf("the same topology was refused: %s", msg)
	}

	// Changed: a new table fed by a new projection, a new To step, a
	// projection of Withdraws into balances dropped, a table's codec
	// changed.
	changed := topology.New("accounts")
	src := topology.Source[AccountID](changed, "bank/accounts")
	balances := topology.NewTable[AccountID, Account](changed, "balances", stream.JSON[Account]())
	topology.Project(topology.On(src, Opened), balances, func(a *Account, e AccountOpened) error { return nil })
	topology.Project(topology.On(src, Deposits), balances, func(a *Account, e Deposited) error { return nil })
	topology.Project(topology.On(src, Closed), balances, func(a *Account, e AccountClosed) error { return nil })
	owners := topology.NewTable[AccountID, string](changed, "owners", stream.JSON[string]())
	topology.Project(topology.On(src, Opened), owners, func(o *string, e AccountOpened) error { *o = e.Owner; return nil })
	topology.To(topology.On(src, Closed), "closings", "bank/closings", Closed,
		func(_ context.Context, _ AccountID, e AccountClosed, emit func(AccountClosed)) error {
			emit(e)
			return nil
		})

	msg := openRefused(t, changed, dir)
	for _, want := range []string{
		"incompatible topology",
		`added table "owners" (topology_test.AccountID→string): safe`,
		`removed projection of type tag 3 on source "bank/accounts" into table "balances": needs a rebuild of table "balances"`,
		`added step "closings" on source "bank/accounts"`,
		`tables to rebuild: "balances"`,
		"strand reset -dir " + dir,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, `projection of type tag 1 on source "bank/accounts" into table "owners"`) &&
		!strings.Contains(msg, `into table "owners": safe`) {
		t.Errorf("a projection into a new table is not safe:\n%s", msg)
	}

	codec := topology.New("accounts")
	csrc := topology.Source[AccountID](codec, "bank/accounts")
	cbal := topology.NewTable[AccountID, Account](codec, "balances", stream.CodecFunc(stream.JSON[Account]().Append, stream.JSON[Account]().Decode))
	for _, p := range []func(){
		func() {
			topology.Project(topology.On(csrc, Opened), cbal, func(*Account, AccountOpened) error { return nil })
		},
		func() {
			topology.Project(topology.On(csrc, Deposits), cbal, func(*Account, Deposited) error { return nil })
		},
		func() {
			topology.Project(topology.On(csrc, Withdraws), cbal, func(*Account, Withdrawn) error { return nil })
		},
		func() {
			topology.Project(topology.On(csrc, Closed), cbal, func(*Account, AccountClosed) error { return nil })
		},
	} {
		p()
	}
	msg = openRefused(t, codec, dir)
	if !strings.Contains(msg, `changed table "balances" codecs`) || !strings.Contains(msg, `needs a rebuild of table "balances"`) {
		t.Errorf("a new value codec is not listed as a rebuild:\n%s", msg)
	}
	if n := strings.Count(msg, "\n  - "); n != 1 {
		t.Errorf("%d changes listed for a codec change, want 1:\n%s", n, msg)
	}

	// A new version of a table: the only change, a rebuild.
	versioned := topology.New("accounts")
	vsrc := topology.Source[AccountID](versioned, "bank/accounts")
	vbal := topology.NewTable[AccountID, Account](versioned, "balances", stream.JSON[Account](), topology.WithTableVersion(2))
	topology.Project(topology.On(vsrc, Opened), vbal, func(*Account, AccountOpened) error { return nil })
	topology.Project(topology.On(vsrc, Deposits), vbal, func(*Account, Deposited) error { return nil })
	topology.Project(topology.On(vsrc, Withdraws), vbal, func(*Account, Withdrawn) error { return nil })
	topology.Project(topology.On(vsrc, Closed), vbal, func(*Account, AccountClosed) error { return nil })
	msg = openRefused(t, versioned, dir)
	if !strings.Contains(msg, `changed table "balances" version (was none, now 2): needs a rebuild of table "balances"`) ||
		strings.Count(msg, "\n  - ") != 1 {
		t.Errorf("a new table version is not listed as the one rebuild:\n%s", msg)
	}
}
