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
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

const tpTTL = 300 * time.Second

// tpModel is the reference: one key's row, its last write and its timer,
// folded one event at a time on the documented rules.
type tpModel struct {
	v         grouptest.TVal
	present   bool
	lastWrite time.Time
	timer     time.Time // zero: none
}

// step applies one step of the reference at clock now: rows not written
// for the TTL expire (and lose their timer), then due timers fire (the
// handler counts and schedules once more, 1000s later, after its first
// firing), then the step's events are folded in log order.
func tpStep(m map[string]*tpModel, now time.Time, events []grouptest.TPEv) {
	for k, s := range m {
		if s.present && !s.lastWrite.Add(tpTTL).After(now) {
			m[k] = &tpModel{}
		}
	}
	for _, s := range m {
		if s.timer.IsZero() || s.timer.After(now) {
			continue
		}
		at := s.timer
		s.timer = time.Time{}
		s.v.Fired++
		if s.v.Fired < 2 {
			s.timer = at.Add(1000 * time.Second)
		}
		s.present, s.lastWrite = true, now
	}
	for _, e := range events {
		s := m[e.K]
		if s == nil {
			s = &tpModel{}
			m[e.K] = s
		}
		switch e.Op {
		case 1:
			*s = tpModel{}
			continue
		case 3:
			s.v.Events++
			s.timer = time.Time{}
		default:
			s.v.Sum += e.N
			s.v.Events++
			if e.Op == 2 {
				s.timer = e.At
			}
		}
		s.present, s.lastWrite = true, now
	}
}

// TestPropertyDeletesTTLTimers runs random logs of adds, deletes, timer
// schedules and cancels, with clock advances, through the driver with
// random batch sizes, partitions and restarts (between steps and between
// the batches of one step), and checks the table and the timers' firings
// against the reference: each timer fires exactly once, expired rows are
// gone, deleted rows answer not found. 12 cases by default, 300 with
// STRAND_SOAK=1; STRAND_TIME_SEED=N replays one.
func TestPropertyDeletesTTLTimers(t *testing.T) {
	t.Parallel()
	cases, first := 12, uint64(1)
	if os.Getenv("STRAND_SOAK") != "" {
		cases = 300
	}
	if s := os.Getenv("STRAND_TIME_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STRAND_TIME_SEED=%q: %v", s, err)
		}
		cases, first = 1, n
	}
	for seed := first; seed < first+uint64(cases); seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { timeProperty(t, seed) })
	}
}

func timeProperty(rt *testing.T, seed uint64) {
	t := rt
	r := rand.New(rand.NewPCG(seed, 31))
	in := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	{
		nkeys := in(1, 5)
		nsteps := in(1, 8)
		partitions := uint32(in(1, 3))
		sizes := make([]int, in(1, 10))
		for i := range sizes {
			sizes[i] = in(1, 6)
		}
		restart := in(0, 5)

		dir, err := os.MkdirTemp("", "strand-time-property-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		topo := topology.New("time-property")
		src := topology.Source[string](topo, "t/events")
		tab := topology.NewTable[string, grouptest.TVal](topo, "vals", stream.JSON[grouptest.TVal](), topology.WithTTL(tpTTL))
		topology.ProjectContext(topology.On(src, grouptest.TPEvents), tab, func(ctx context.Context, v *grouptest.TVal, e grouptest.TPEv) error {
			switch e.Op {
			case 1:
				return topology.Delete(ctx)
			case 3:
				v.Events++
				return topology.CancelTimer(ctx)
			}
			v.Sum += e.N
			v.Events++
			if e.Op == 2 {
				return topology.Schedule(ctx, e.At)
			}
			return nil
		})
		topology.OnTimer(src, tab, func(ctx context.Context, _ string, v *grouptest.TVal, at time.Time) error {
			v.Fired++
			if v.Fired < 2 {
				return topology.Schedule(ctx, at.Add(1000*time.Second))
			}
			return nil
		})
		next := 0
		d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(partitions),
			topologytest.WithBatchSizes(func() int { s := sizes[next%len(sizes)]; next++; return s }))
		defer d.Close()

		model := map[string]*tpModel{}
		steps := 0
		for range nsteps {
			// Advances stay below the handler's 1000s, so that what it
			// schedules is never already due when it is set.
			d.AdvanceClock(time.Duration(in(0, 400)) * time.Second)
			now := d.Now()
			var events []grouptest.TPEv
			for range in(0, 8) {
				e := grouptest.TPEv{K: fmt.Sprintf("k%d", in(0, nkeys-1)),
					Op: in(0, 3), N: int64(in(1, 9))}
				e.At = now.Add(time.Duration(in(1, 600)) * time.Second)
				events = append(events, e)
			}
			tpStep(model, now, events)
			topologytest.Pipe(d, grouptest.TPEvents, events...)
			for d.Step() {
				steps++
				if restart > 0 && steps%restart == 0 {
					d.Restart()
				}
			}
			ctx := context.Background()
			for k, s := range model {
				v, ok, err := tab.Get(ctx, k)
				if err != nil {
					rt.Fatal(err)
				}
				if ok != s.present || v != s.v {
					rt.Fatalf("seed %d (STRAND_TIME_SEED=%[1]d replays it): at %v key %s: table %+v (found %v), reference %+v (present %v)", seed, now.Sub(grouptest.TBase), k, v, ok, s.v, s.present)
				}
			}
		}
	}
}
