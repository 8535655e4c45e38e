package grouptest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The global tables' crash test in a group: a child process, the one
// (static) instance of a group over an embedded broker that the parent
// runs, converts payments (4 partitions) with the rates of a global table
// (3 partitions, in the instance's store of global tables) and counts the
// rate records per currency in a second global table; before each run the
// parent publishes a share of both logs, the child is SIGKILLed at random
// moments, and each restart resumes both stores. The last run
// checks every total and every count against a reference: every payment
// and every rate record applied exactly once across the kills. 2 kills by
// default; STRAND_SOAK=1 makes it 40.

const (
	ggCrashRates      = 2400
	ggCrashPayments   = 2400
	ggCrashCurrencies = 10
	ggCrashAccounts   = 40
)

func ggCrashTopology() (*topology.Topology, *topology.Table[string, int64], *topology.Table[string, int64]) {
	topo := topology.New("ggcrash", topology.WithRetry(1000, 5*time.Millisecond, 50*time.Millisecond))
	rates := topology.NewTable[string, int64](topo, "rates", stream.JSON[int64]())
	seen := topology.NewTable[string, int64](topo, "rate-records", stream.JSON[int64]())
	totals := topology.NewTable[string, int64](topo, "totals", stream.JSON[int64]())
	topology.ProjectContext(topology.On(topology.Source[string](topo, "g/payments"), gPayDecl).Reads(rates), totals,
		func(ctx context.Context, v *int64, e Payment) error {
			r, ok, err := topology.Lookup(ctx, rates, e.Currency)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("no rate for %s yet", e.Currency)
			}
			*v += e.Amount * r
			return nil
		})
	global := topology.On(topology.Source[string](topo, "g/rates").Global(), gRateDecl)
	topology.Project(global, rates, func(v *int64, e RateSet) error { *v = e.Rate; return nil })
	topology.Project(global, seen, func(v *int64, _ RateSet) error { *v++; return nil })
	return topo, totals, seen
}

// ggCrashWant returns the reference: totals by account, rate records by
// currency (rates never change: currency i's rate is i+1).
func ggCrashWant() (totals, seen map[string]int64) {
	totals, seen = map[string]int64{}, map[string]int64{}
	for i := range ggCrashRates {
		seen[fmt.Sprintf("cur%d", i%ggCrashCurrencies)]++
	}
	for i := range ggCrashPayments {
		totals[fmt.Sprintf("acct%d", i%ggCrashAccounts)] += int64(i%7+1) * int64(i%ggCrashCurrencies+1)
	}
	return totals, seen
}

func TestGlobalGroupCrashChild(t *testing.T) {
	crashtest.Child(t, "global-group-crash")
	ctx := context.Background()
	cl, err := iggy.Connect(ctx, os.Getenv("STRAND_GG_ADDR"), iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Close() }()
	topo, totals, seen := ggCrashTopology()
	g := cl.Group("g", iggy.WithInstanceID("solo"), iggy.WithSessionTimeout(2*time.Second))
	app, err := topology.Open(ctx, topo, cl, os.Getenv("STRAND_GG_DIR"), topology.WithGroup(g),
		topology.WithSnapshotEvery(20), topology.WithDurability(topology.Sync))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Close() }()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(rctx) }()
	fmt.Println(CrashReady) // the parent starts its kill timer now
	testrun.WaitFor(t, 2*time.Minute, func() error {
		serving := 0
		for p := range uint32(4) {
			if app.Phase(p) == topology.Serving {
				serving++
			}
		}
		if serving == 4 && caughtUp(app) {
			return nil
		}
		return fmt.Errorf("not caught up: %+v", app.Ownership())
	})
	if os.Getenv("STRAND_GG_CHECK") != "" {
		wantTotals, wantSeen := ggCrashWant()
		for k, w := range wantTotals {
			if got, ok, err := totals.Get(ctx, k); err != nil || !ok || got != w {
				t.Errorf("totals[%s] = %d, %v, %v; want %d (every payment applied once)", k, got, ok, err, w)
			}
		}
		for k, w := range wantSeen {
			if got, ok, err := seen.Get(ctx, k); err != nil || !ok || got != w {
				t.Errorf("rate records of %s = %d, %v, %v; want %d (every rate record applied once)", k, got, ok, err, w)
			}
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestGlobalTablesInAGroupAcrossKills(t *testing.T) {
	t.Parallel() // see doc.go
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	ctx := context.Background()
	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	if err := cl.EnsureTopic(ctx, "g", "payments", 4); err != nil {
		t.Fatal(err)
	}
	if err := cl.EnsureTopic(ctx, "g", "rates", 3); err != nil {
		t.Fatal(err)
	}
	var rs []RateSet
	for i := range ggCrashRates {
		c := i % ggCrashCurrencies
		rs = append(rs, RateSet{Currency: fmt.Sprintf("cur%d", c), Rate: int64(c + 1)})
	}
	var ps []Payment
	for i := range ggCrashPayments {
		ps = append(ps, Payment{Account: fmt.Sprintf("acct%d", i%ggCrashAccounts), Currency: fmt.Sprintf("cur%d", i%ggCrashCurrencies), Amount: int64(i%7 + 1)})
	}
	kills := crashtest.Kills(2, 40)
	// Run i publishes its share of both logs first, so that every kill
	// lands while there is work.
	publish := func(i int) {
		from, to := i*len(rs)/(kills+1), (i+1)*len(rs)/(kills+1)
		publishAll(t, cl, "rates", gRateDecl, rs[from:to]...)
		from, to = i*len(ps)/(kills+1), (i+1)*len(ps)/(kills+1)
		publishAll(t, cl, "payments", gPayDecl, ps[from:to]...)
	}

	dir := t.TempDir()
	env := []string{"STRAND_GG_ADDR=" + srv.Addr(), "STRAND_GG_DIR=" + dir}
	spec := func(extra ...string) crashtest.Spec {
		return crashtest.Spec{Role: "global-group-crash", Test: "TestGlobalGroupCrashChild", Ready: CrashReady, Env: append(env, extra...)}
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 4))
	window := 600 // ms after the child started its App; grows when a run finishes first
	for i := range kills {
		publish(i)
		after := time.Duration(1+r.IntN(window)) * time.Millisecond
		finished := crashtest.Run(t, spec("STRAND_CRASH_RUN="+strconv.Itoa(i)), after).Finished
		t.Logf("run %d: kill after %v; finished first: %v", i, after, finished)
		if finished {
			window = window * 3 / 2
		}
	}
	publish(kills)
	crashtest.Run(t, spec("STRAND_GG_CHECK=1"), 0)
}
