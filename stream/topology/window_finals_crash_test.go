package topology_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The windows' final results across kills (docs/design.md §18): the parent
// owns an embedded Iggy broker and publishes a log of 2,000 events of 40
// keys with rising event times, then one event per key far in the future,
// which closes every earlier window. A child process connects over TCP,
// aggregates the log into tumbling windows with EmitFinal, and is
// SIGKILLed at random moments; each run restarts from its store on the same
// broker. The last run checks the windows' contents; the parent then reads
// the output topic and checks that every window's final result is there
// exactly once with the reference's value, none missing. 3 kills by
// default; STRAND_SOAK=1 makes it 50.

const (
	finalsCrashKeys   = 40
	finalsCrashEvents = 2000
	finalsFuture      = 1_000_000              // the last events' time, seconds from grouptest.WBase
	finalsFutureStart = finalsFuture / 30 * 30 // their window's start
)

func finalsCrashLog() []grouptest.WEv {
	r := rand.New(rand.NewPCG(17, 1))
	log := make([]grouptest.WEv, 0, finalsCrashEvents+finalsCrashKeys)
	for i := range finalsCrashEvents {
		log = append(log, grouptest.WEv{K: fmt.Sprintf("key-%d", r.IntN(finalsCrashKeys)), At: int64(i / 10), N: int64(1 + r.IntN(9)), Seq: i})
	}
	for k := range finalsCrashKeys {
		log = append(log, grouptest.WEv{K: fmt.Sprintf("key-%d", k), At: finalsFuture, N: 1, Seq: finalsCrashEvents + k})
	}
	return log
}

// finalsWant is the reference: each key's windows below the future ones.
func finalsWant() (map[string]map[int64]grouptest.WAgg, int) {
	return grouptest.WindowReference(finalsCrashLog(), finalsFuture)
}

func finalsTopology() (*topology.Topology, *topology.WindowTable[string, grouptest.WAgg]) {
	return grouptest.WTopology(topology.Tumbling(30*time.Second), topology.WithGrace(5*time.Second),
		topology.WithRetention(1000*time.Hour)) // the future events do not remove the windows
}

func TestWindowFinalsCrashChild(t *testing.T) {
	crashtest.Child(t, "window-finals-crash")
	ctx := context.Background()
	cl, err := iggy.Connect(ctx, os.Getenv("STRAND_FINALS_BROKER"), iggy.WithCredentials("iggy", "iggy"),
		iggy.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topo, wt := finalsTopology()
	app, err := topology.Open(ctx, topo, cl, os.Getenv("STRAND_FINALS_DIR"), topology.WithDurability(topology.Sync),
		topology.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(rctx) }()
	fmt.Println(grouptest.CrashReady)
	want, _ := finalsWant()
	// Every window closed and every final result published (most runs are
	// killed before).
	testrun.WaitFor(t, 2*time.Minute, func() error {
		ok := true
		for _, st := range app.Stats() {
			for _, ps := range st.Partitions {
				ok = ok && ps.OutboxPending == 0
			}
		}
		for k, ws := range want {
			rs, err := wt.Range(ctx, k, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range rs {
				if grouptest.WSec(r.Start) < finalsFutureStart && r.Final {
					n++
				}
			}
			ok = ok && n == len(ws)
		}
		if !ok {
			return errors.New("the windows did not all close and publish")
		}
		return nil
	})
	if os.Getenv("STRAND_FINALS_CHECK") != "" {
		for k, ws := range want {
			rs, err := wt.Range(ctx, k, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if s := grouptest.WSec(r.Start); s < finalsFutureStart {
					if w := ws[s]; r.Value != w || !r.Final {
						t.Errorf("%s window at %ds = %+v, final %v; want %+v, final", k, s, r.Value, r.Final, w)
					}
				}
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if err := app.Close(); err != nil {
		t.Error(err)
	}
}

func TestWindowFinalsOnceAcrossKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	kills := crashtest.Kills(3, 50)
	const parts = 2
	addr, cl, pub := grouptest.WindowBroker(t, parts)
	grouptest.PublishWindows(t, pub, finalsCrashLog())
	dir := t.TempDir()
	run := func(i int, killAfter time.Duration, env ...string) (finished bool) {
		env = append(env, "STRAND_FINALS_BROKER="+addr, "STRAND_FINALS_DIR="+dir, "STRAND_CRASH_RUN="+strconv.Itoa(i))
		return crashtest.Run(t, crashtest.Spec{Role: "window-finals-crash", Test: "TestWindowFinalsCrashChild", Ready: grouptest.CrashReady,
			Env: env}, killAfter).Finished
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	window := 300 // ms after the child started its App; grows when a run finishes first
	finished := 0
	for i := range kills {
		if run(i, time.Duration(1+r.IntN(window))*time.Millisecond) {
			finished++
			window = window * 3 / 2
		}
	}
	run(kills, 0, "STRAND_FINALS_CHECK=1")
	t.Logf("%d runs, %d finished before their kill", kills, finished)

	want, nWindows := finalsWant()
	grouptest.CheckFinalsOnce(t, cl, parts, want, nWindows)
}
