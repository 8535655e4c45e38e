package topology_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The build crash test (docs/design.md §19): a child process runs version
// 1 of the evolving topology over a log to the end; then version 2 (a new
// version of "balances", whose fold changed, and a new table "owners") is
// started on the store over the same log and more events, and SIGKILLed at
// random moments while its tables are built in the background; each
// restart resumes the builds. The last run checks that both tables equal
// the reference folds of the whole log and that the outbox committed one
// receipt per deposit: the builds published nothing, and no event was
// applied twice or missed across the hand-overs. 4 kills by default;
// STRAND_SOAK=1 makes it 60.

const (
	buildCrashFirst  = 1500 // events version 1 applies
	buildCrashSecond = 1000 // events piped with version 2
	buildCrashParts  = 3
)

// buildCrashLog returns the events of the log and the reference.
func buildCrashLog() ([]any, *evolveModel) {
	r := rand.New(rand.NewPCG(26, 26))
	m := newEvolveModel()
	var log []any
	for range buildCrashFirst + buildCrashSecond {
		acct := AccountID(r.IntN(40))
		if r.IntN(4) == 0 {
			owner := fmt.Sprintf("o%d", r.IntN(100))
			log = append(log, AccountOpened{Account: acct, Owner: owner})
			m.owners[acct] += owner + ";"
			continue
		}
		amt := int64(r.IntN(50) + 1)
		log = append(log, Deposited{Account: acct, Amount: amt})
		for v := 1; v < 3; v++ {
			m.balances[v][acct] += int64(v) * amt
		}
		m.deposits++
	}
	return log, m
}

func pipeBuildLog(d *topologytest.Driver, log []any) {
	for _, e := range log {
		switch e := e.(type) {
		case AccountOpened:
			topologytest.Pipe(d, Opened, e)
		case Deposited:
			topologytest.Pipe(d, Deposits, e)
		}
	}
}

func TestBuildCrashChild(t *testing.T) {
	crashtest.Child(t, "build-crash")
	dir := os.Getenv("STRAND_BUILD_CRASH_DIR")
	version, _ := strconv.Atoi(os.Getenv("STRAND_BUILD_CRASH_VERSION"))
	seed, _ := strconv.ParseUint(os.Getenv("STRAND_CRASH_RUN"), 10, 64)
	r := rand.New(rand.NewPCG(seed, 7))
	log, m := buildCrashLog()
	if version == 1 {
		log = log[:buildCrashFirst]
	}
	topo, balances, owners := evolving(version)
	d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(buildCrashParts),
		topologytest.WithBatchSizes(func() int { return 1 + r.IntN(60) }),
		topologytest.WithOpenOptions(topology.WithDurability(topology.Sync)))
	pipeBuildLog(d, log)
	fmt.Println(grouptest.CrashReady)
	d.Advance()
	if os.Getenv("STRAND_BUILD_CRASH_CHECK") == "" {
		return
	}
	ctx := context.Background()
	for acct := range AccountID(40) {
		a, _, err := balances.Get(ctx, acct)
		if err != nil || a.Balance != m.balances[2][acct] {
			t.Errorf("balances.Get(%d) = %d, %v; want version 2's fold %d", acct, a.Balance, err, m.balances[2][acct])
		}
		o, _, err := owners.Get(ctx, acct)
		if err != nil || o != m.owners[acct] {
			t.Errorf("owners.Get(%d) = %q, %v; want %q", acct, o, err, m.owners[acct])
		}
	}
	d.Close()
	// The outbox's sequence numbers count every receipt ever committed.
	deposits := uint64(0)
	for _, e := range log {
		if _, ok := e.(Deposited); ok {
			deposits++
		}
	}
	db, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	committed := uint64(0)
	for p := range uint32(buildCrashParts) {
		v, ok, err := db.Row(state.FamilyOutbox, p, rows.OutboxNextKey("bank/accounts"))
		if err != nil || !ok || len(v) != 8 {
			t.Fatalf("partition %d: outbox sequence row %x, %v, %v", p, v, ok, err)
		}
		committed += binary.BigEndian.Uint64(v) - 1
	}
	if committed != deposits {
		t.Errorf("%d receipts committed to the outbox, want %d (one per deposit)", committed, deposits)
	}
}

func TestBuildAcrossKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	kills := crashtest.Kills(4, 60)
	dir := t.TempDir()
	run := func(i, version int, killAfter time.Duration, check bool) bool {
		env := []string{"STRAND_BUILD_CRASH_DIR=" + dir, "STRAND_CRASH_RUN=" + strconv.Itoa(i),
			"STRAND_BUILD_CRASH_VERSION=" + strconv.Itoa(version)}
		if check {
			env = append(env, "STRAND_BUILD_CRASH_CHECK=1")
		}
		return crashtest.Run(t, crashtest.Spec{Role: "build-crash", Test: "TestBuildCrashChild", Ready: grouptest.CrashReady, Env: env}, killAfter).Finished
	}
	run(0, 1, 0, false)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	window := 300 // ms after the child has piped its log; grows when a run finishes first
	for i := 1; i <= kills; i++ {
		if run(i, 2, time.Duration(1+r.IntN(window))*time.Millisecond, false) {
			window = window * 3 / 2
		}
	}
	run(kills+1, 2, 0, true)
}
