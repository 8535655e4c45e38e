package topology_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The windows' crash test: a child process aggregates a log of 4,000
// events of 100 keys into tumbling windows (event times rising in log
// order, so none is late), is SIGKILLed at random moments, and restarts
// from its store; at the end its clock moves past the idleness, so every
// window closes on the idle partitions. The last run checks that every
// window holds exactly its events (none applied twice or lost) and is
// final, and that no event was counted late. 5 kills by default;
// STRAND_SOAK=1 makes it 100.

const (
	windowCrashKeys   = 100
	windowCrashEvents = 4000
)

func windowCrashLog() []grouptest.WEv {
	r := rand.New(rand.NewPCG(13, 1))
	log := make([]grouptest.WEv, windowCrashEvents)
	for i := range log {
		log[i] = grouptest.WEv{K: fmt.Sprintf("key-%d", r.IntN(windowCrashKeys)), At: int64(i / 10), N: int64(1 + r.IntN(9)), Seq: i}
	}
	return log
}

func TestWindowCrashChild(t *testing.T) {
	crashtest.Child(t, "window-crash")
	dir := os.Getenv("STRAND_WINDOW_CRASH_DIR")
	seed, _ := strconv.ParseUint(os.Getenv("STRAND_CRASH_RUN"), 10, 64)
	r := rand.New(rand.NewPCG(seed, 2))
	topo, wt := grouptest.WTopology(topology.Tumbling(30*time.Second), topology.WithGrace(5*time.Second), topology.WithIdleness(time.Minute))
	d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(2),
		topologytest.WithBatchSizes(func() int { return 1 + r.IntN(60) }),
		topologytest.WithOpenOptions(topology.WithDurability(topology.Sync)))
	log := windowCrashLog()
	topologytest.Pipe(d, grouptest.WEvents, log...)
	fmt.Println(grouptest.CrashReady)
	d.Advance()
	d.AdvanceClock(2 * time.Hour) // idle: every window closes
	d.Advance()
	if os.Getenv("STRAND_WINDOW_CRASH_CHECK") == "" {
		return
	}
	want := map[string]map[int64]grouptest.WAgg{}
	for _, e := range log {
		if want[e.K] == nil {
			want[e.K] = map[int64]grouptest.WAgg{}
		}
		a := want[e.K][e.At/30*30]
		a.Sum += e.N
		a.Count++
		want[e.K][e.At/30*30] = a
	}
	ctx := context.Background()
	for k, ws := range want {
		got, err := wt.Range(ctx, k, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ws) {
			t.Fatalf("%s: %d windows, want %d", k, len(got), len(ws))
		}
		for _, g := range got {
			if w := ws[grouptest.WSec(g.Start)]; g.Value != w || !g.Final {
				t.Errorf("%s window at %ds = %+v, final %v; want %+v, final", k, grouptest.WSec(g.Start), g.Value, g.Final, w)
			}
		}
	}
	if c := wCounters(d); c.LateEvents != 0 {
		t.Errorf("%d late events counted in the last run, want 0", c.LateEvents)
	}
}

func TestWindowsExactAcrossKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	kills := crashtest.Kills(5, 100)
	dir := t.TempDir()
	run := func(killAfter time.Duration, env ...string) bool {
		return crashtest.Run(t, crashtest.Spec{Role: "window-crash", Test: "TestWindowCrashChild", Ready: grouptest.CrashReady, Env: env}, killAfter).Finished
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	window := 400 // ms after the child has piped its log; grows when a run finishes first
	for i := 0; i < kills; i++ {
		if run(time.Duration(1+r.IntN(window))*time.Millisecond, "STRAND_WINDOW_CRASH_DIR="+dir, "STRAND_CRASH_RUN="+strconv.Itoa(i)) {
			window = window * 3 / 2
		}
	}
	run(0, "STRAND_WINDOW_CRASH_DIR="+dir, "STRAND_CRASH_RUN="+strconv.Itoa(kills), "STRAND_WINDOW_CRASH_CHECK=1")
}
