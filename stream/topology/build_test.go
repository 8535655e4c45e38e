package topology_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

func TestBuildRefuses(t *testing.T) {
	nop := func(ctx context.Context, key string, events []grouptest.Ev) error { return nil }
	fold := func(v *int, e grouptest.Ev) error { return nil }
	cases := []struct {
		name  string
		build func(t *topology.Topology)
		want  []string
	}{
		{
			name: "duplicate type tags",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				topology.On(src, stream.DeclareFunc(1, grouptest.EvKey)).ForEach("a", nop)
				topology.On(src, stream.DeclareFunc(1, func(e AccountOpened) string { return e.Owner })).
					ForEach("b", func(context.Context, string, []AccountOpened) error { return nil })
			},
			want: []string{`duplicate type tag 1`, "grouptest.Ev", "topology_test.AccountOpened"},
		},
		{
			name: "a handler for an undeclared type",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				topology.On[string, grouptest.Ev](src, nil).ForEach("orphan", nop)
			},
			want: []string{`ForEach "orphan" for an undeclared type`},
		},
		{
			name: "a bad declaration",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				topology.On(src, stream.DeclareFunc(3, grouptest.EvKey, stream.WithFence(9))).ForEach("a", nop)
			},
			want: []string{"type tag 3", "Fence(9)"},
		},
		{
			name: "a Project without a table",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				topology.Project[string, grouptest.Ev, int](topology.On(src, stream.DeclareFunc(1, grouptest.EvKey)), nil, fold)
			},
			want: []string{"type tag 1", "a projection without a table"},
		},
		{
			name: "a table with no codec",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				tab := topology.NewTable[string, int](t, "counts", nil)
				topology.Project(topology.On(src, stream.DeclareFunc(1, grouptest.EvKey)), tab, fold)
			},
			want: []string{`table "counts" has no value codec`},
		},
		{
			name: "a table whose key codec differs from its events'",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				tab := topology.NewTable[string, int](t, "counts", stream.JSON[int](), topology.WithTableKeys(stream.CodecFunc(
					func(dst []byte, k string) ([]byte, error) { return append(dst, k...), nil },
					func(b []byte) (string, error) { return string(b), nil })))
				topology.Project(topology.On(src, stream.DeclareFunc(1, grouptest.EvKey)), tab, fold)
			},
			want: []string{`table "counts" encodes keys with`},
		},
		{
			name: "two sources with conflicting key types",
			build: func(t *topology.Topology) {
				a := topology.Source[string](t, "log")
				topology.On(a, stream.DeclareFunc(1, grouptest.EvKey)).ForEach("a", nop)
				b := topology.Source[AccountID](t, "log")
				topology.On(b, Deposits).ForEach("b", func(context.Context, AccountID, []Deposited) error { return nil })
			},
			want: []string{`source "log" declared with conflicting key types string and topology_test.AccountID`},
		},
		{
			name: "duplicate table names",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				a := topology.NewTable[string, int](t, "counts", stream.JSON[int]())
				topology.NewTable[string, int](t, "counts", stream.JSON[int]())
				topology.Project(topology.On(src, stream.DeclareFunc(1, grouptest.EvKey)), a, fold)
			},
			want: []string{`table "counts" declared twice`},
		},
		{
			name:  "no source",
			build: func(t *topology.Topology) {},
			want:  []string{"has no source"},
		},
		{
			name: "a type projected twice into one table",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				tab := topology.NewTable[string, int](t, "counts", stream.JSON[int]())
				on := topology.On(src, stream.DeclareFunc(1, grouptest.EvKey))
				topology.Project(on, tab, fold)
				topology.Project(on, tab, fold)
			},
			want: []string{`projects into table "counts" twice`},
		},
		{
			name: "a tag both handled and skipped",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log").Skip(1)
				topology.On(src, stream.DeclareFunc(1, grouptest.EvKey)).ForEach("a", nop)
			},
			want: []string{"type tag 1 is both handled and skipped"},
		},
		{
			name: "a sink with a nil function",
			build: func(t *topology.Topology) {
				src := topology.Source[string](t, "log")
				topology.On(src, stream.DeclareFunc(1, grouptest.EvKey)).ForEach("a", nil)
			},
			want: []string{`ForEach "a" has a nil function`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			topo := topology.New("refused")
			c.build(topo)
			prog, err := topo.Build()
			if err == nil {
				t.Fatalf("Build succeeded: %v", prog.Name())
			}
			if !errors.Is(err, topology.ErrBuild) || !errors.Is(err, topology.ErrBuild) {
				t.Fatalf("error %v does not wrap ErrBuild and topology.ErrBuild", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	build := func(mod func(*topology.Topology, *topology.SourceNode[AccountID])) []byte {
		topo := topology.New("accounts")
		src := topology.Source[AccountID](topo, "bank/accounts")
		balances := topology.NewTable[AccountID, Account](topo, "balances", stream.JSON[Account]())
		topology.Project(topology.On(src, Deposits), balances, func(a *Account, e Deposited) error { return nil })
		if mod != nil {
			mod(topo, src)
		}
		p, err := topo.Build()
		if err != nil {
			t.Fatal(err)
		}
		return p.Fingerprint()
	}
	base := build(nil)
	if !bytes.Equal(base, build(nil)) {
		t.Fatal("fingerprint is not deterministic")
	}
	withSink := build(func(_ *topology.Topology, src *topology.SourceNode[AccountID]) {
		topology.On(src, Closed).ForEach("notify", func(context.Context, AccountID, []AccountClosed) error { return nil })
	})
	if !bytes.Equal(base, withSink) {
		t.Fatal("adding a sink changed the fingerprint")
	}
	withProjection := build(func(topo *topology.Topology, src *topology.SourceNode[AccountID]) {
		other := topology.NewTable[AccountID, int](topo, "opened", stream.JSON[int]())
		topology.Project(topology.On(src, Opened), other, func(v *int, e AccountOpened) error { return nil })
	})
	if bytes.Equal(base, withProjection) {
		t.Fatal("adding a projection did not change the fingerprint")
	}
	refenced := stream.Declare[AccountID, Deposited](2, stream.WithFence(planner.Acquire))
	topo := topology.New("accounts")
	src := topology.Source[AccountID](topo, "bank/accounts")
	balances := topology.NewTable[AccountID, Account](topo, "balances", stream.JSON[Account]())
	topology.Project(topology.On(src, refenced), balances, func(a *Account, e Deposited) error { return nil })
	p, err := topo.Build()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(base, p.Fingerprint()) {
		t.Fatal("changing a type's fence did not change the fingerprint")
	}
	_ = state.ErrIncompatibleTopology
}
