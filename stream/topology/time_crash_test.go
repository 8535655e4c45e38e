package topology_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The timers' crash test: a child process runs a topology whose keys each
// schedule one timer, whose handler fires and schedules again twice, and
// is SIGKILLed at random moments while the driver's clock moves through
// the timers; each restart resumes from the store. The last run checks
// that every key's timer fired exactly three times (and its events were
// applied once): no firing lost, none repeated. Before the last run the
// handler fails (an error or a panic) on about a third of its tries, so
// timers are retried with their keys parked behind them across the kills
// (docs/design.md §18, failed timers): a failed try leaves no trace. 5
// kills by default; STRAND_SOAK=1 makes it 100.

const (
	timerCrashKeys  = 200
	timerCrashAdds  = 4 // adds per key besides its schedule
	timerCrashFires = 3
)

func timerCrashLog() []grouptest.TPEv {
	r := rand.New(rand.NewPCG(11, 1))
	var log []grouptest.TPEv
	for range timerCrashKeys * (timerCrashAdds + 1) {
		log = append(log, grouptest.TPEv{})
	}
	// Each key: one schedule (at 1..40s) and adds, shuffled.
	i := 0
	for k := range timerCrashKeys {
		key := fmt.Sprintf("key-%d", k)
		log[i] = grouptest.TPEv{K: key, Op: 2, N: 1, At: grouptest.TBase.Add(time.Duration(1+r.IntN(40)) * time.Second)}
		i++
		for range timerCrashAdds {
			log[i] = grouptest.TPEv{K: key, N: 1}
			i++
		}
	}
	r.Shuffle(len(log), func(a, b int) { log[a], log[b] = log[b], log[a] })
	return log
}

func timerCrashTopology(fail func() int) (*topology.Topology, *topology.Table[string, grouptest.TVal]) {
	topo := topology.New("timer-crash", topology.WithRetry(1000, time.Second, time.Second))
	src := topology.Source[string](topo, "t/events")
	tab := topology.NewTable[string, grouptest.TVal](topo, "vals", stream.JSON[grouptest.TVal]())
	topology.ProjectContext(topology.On(src, grouptest.TPEvents), tab, func(ctx context.Context, v *grouptest.TVal, e grouptest.TPEv) error {
		v.Sum += e.N
		v.Events++
		if e.Op == 2 {
			return topology.Schedule(ctx, e.At)
		}
		return nil
	})
	topology.OnTimer(src, tab, func(ctx context.Context, _ string, v *grouptest.TVal, at time.Time) error {
		v.Fired++
		switch fail() {
		case 1:
			return errors.New("a failed try")
		case 2:
			panic("a failed try")
		}
		if v.Fired < timerCrashFires {
			return topology.Schedule(ctx, at.Add(5*time.Second))
		}
		return nil
	})
	return topo, tab
}

func TestTimerCrashChild(t *testing.T) {
	crashtest.Child(t, "timer-crash")
	dir := os.Getenv("STRAND_TIMER_CRASH_DIR")
	seed, _ := strconv.ParseUint(os.Getenv("STRAND_CRASH_RUN"), 10, 64)
	r := rand.New(rand.NewPCG(seed, 2))
	check := os.Getenv("STRAND_TIMER_CRASH_CHECK") != ""
	fails := rand.New(rand.NewPCG(seed, 4))
	var mu sync.Mutex // the partitions sweep concurrently
	topo, tab := timerCrashTopology(func() int {
		mu.Lock()
		defer mu.Unlock()
		if check || fails.IntN(3) != 0 {
			return 0
		}
		return 1 + fails.IntN(2)
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(2),
		topologytest.WithBatchSizes(func() int { return 1 + r.IntN(60) }),
		topologytest.WithOpenOptions(topology.WithDurability(topology.Sync)))
	topologytest.Pipe(d, grouptest.TPEvents, timerCrashLog()...)
	fmt.Println(grouptest.CrashReady)
	// The clock starts at grouptest.TBase in every run: timers already
	// fired are gone, the others fire as it passes them again.
	for range 60 {
		for d.Step() {
		}
		d.AdvanceClock(time.Second)
	}
	d.Advance()
	if !check {
		return
	}
	d.AdvanceClock(time.Minute) // the retries of tries failed at the end of a run
	d.Advance()
	if keys, _ := d.Parked(); keys != 0 {
		t.Fatalf("%d keys still parked at the end", keys)
	}
	ctx := context.Background()
	for k := range timerCrashKeys {
		key := fmt.Sprintf("key-%d", k)
		v, ok, err := tab.Get(ctx, key)
		if err != nil || !ok {
			t.Fatalf("%s: found %v, err %v", key, ok, err)
		}
		if want := (grouptest.TVal{Sum: timerCrashAdds + 1, Events: timerCrashAdds + 1, Fired: timerCrashFires}); v != want {
			t.Errorf("%s = %+v, want %+v (each event applied once, the timer fired %d times)", key, v, want, timerCrashFires)
		}
	}
	var fired uint64
	for _, st := range d.App().Stats() {
		fired += st.Total.TimersFired
	}
	t.Logf("timers fired in the last run: %d", fired)
}

func TestTimersFireOnceAcrossKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	kills := crashtest.Kills(5, 100)
	dir := t.TempDir()
	runCrashChild := func(i int, killAfter time.Duration, env ...string) (finished bool) {
		return crashtest.Run(t, crashtest.Spec{Role: "timer-crash", Test: "TestTimerCrashChild", Ready: grouptest.CrashReady,
			Env: env}, killAfter).Finished
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	window := 400 // ms after the child has piped its log; grows when a run finishes first
	for i := 0; i < kills; i++ {
		if runCrashChild(i, time.Duration(1+r.IntN(window))*time.Millisecond,
			"STRAND_TIMER_CRASH_DIR="+dir, "STRAND_CRASH_RUN="+strconv.Itoa(i)) {
			window = window * 3 / 2
		}
	}
	runCrashChild(kills, 0,
		"STRAND_TIMER_CRASH_DIR="+dir, "STRAND_CRASH_RUN="+strconv.Itoa(kills), "STRAND_TIMER_CRASH_CHECK=1")
}
