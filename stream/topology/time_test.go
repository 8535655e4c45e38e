package topology_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// tEv is the time tests' event: Op says what the fold does.
type tEv struct {
	K   string
	Op  int // 0 add N, 1 delete, 2 add N and schedule a timer in N seconds, 3 cancel the timer
	N   int64
	Seq int // for a reference of the fold order
}

var tEvents = stream.DeclareFunc(1, func(e tEv) string { return e.K })

func tFold(ctx context.Context, v *grouptest.TVal, e tEv) error {
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
		return topology.Schedule(ctx, grouptest.TBase.Add(time.Duration(e.N)*time.Second))
	}
	return nil
}

func TestDeleteRemovesTheRow(t *testing.T) {
	topo := topology.New("del")
	src := topology.Source[string](topo, "t/events")
	tab := topology.NewTable[string, grouptest.TVal](topo, "vals", stream.JSON[grouptest.TVal]())
	topology.ProjectContext(topology.On(src, tEvents), tab, tFold)
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2), topologytest.WithBatchSize(2))
	ctx := context.Background()

	topologytest.Pipe(d, tEvents, tEv{K: "a", N: 1}, tEv{K: "b", N: 2}, tEv{K: "a", Op: 1})
	d.Advance()
	if _, ok, err := tab.Get(ctx, "a"); err != nil || ok {
		t.Fatalf("a after its delete: ok %v, err %v; want not found", ok, err)
	}
	if v, ok, _ := tab.Get(ctx, "b"); !ok || v.Sum != 2 {
		t.Fatalf("b = %+v, %v; want Sum 2", v, ok)
	}
	// A delete then an event in one run: the event folds into the zero value.
	topologytest.Pipe(d, tEvents, tEv{K: "b", Op: 1}, tEv{K: "b", N: 5})
	d.Advance()
	if v, ok, _ := tab.Get(ctx, "b"); !ok || v.Sum != 5 || v.Events != 1 {
		t.Fatalf("b = %+v, %v; want Sum 5 Events 1 (folded after its delete)", v, ok)
	}
	d.Restart()
	if _, ok, _ := tab.Get(ctx, "a"); ok {
		t.Fatal("a is back after a restart")
	}
	n := 0
	if err := tab.Scan(ctx, func(string, grouptest.TVal) bool { n++; return true }); err != nil || n != 1 {
		t.Fatalf("scan: %d rows, err %v; want 1", n, err)
	}
}

func TestDeleteOutsideAFold(t *testing.T) {
	if err := topology.Delete(context.Background()); !errors.Is(err, topology.ErrNoFold) {
		t.Fatalf("Delete outside a fold: %v, want ErrNoFold", err)
	}
	if err := topology.Schedule(context.Background(), time.Now()); !errors.Is(err, topology.ErrNoFold) {
		t.Fatalf("Schedule outside a fold: %v, want ErrNoFold", err)
	}
}

func TestTTLExpiresRows(t *testing.T) {
	topo := topology.New("ttl")
	src := topology.Source[string](topo, "t/events")
	tab := topology.NewTable[string, grouptest.TVal](topo, "vals", stream.JSON[grouptest.TVal](), topology.WithTTL(time.Hour))
	topology.ProjectContext(topology.On(src, tEvents), tab, tFold)
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2))
	ctx := context.Background()

	topologytest.Pipe(d, tEvents, tEv{K: "a", N: 1}, tEv{K: "b", N: 2})
	d.Advance()
	d.AdvanceClock(40 * time.Minute)
	topologytest.Pipe(d, tEvents, tEv{K: "b", N: 3}) // b is written again: it lives 1h from now
	d.Advance()
	d.AdvanceClock(30 * time.Minute) // a is 70 minutes old, b 30
	d.Advance()
	if _, ok, _ := tab.Get(ctx, "a"); ok {
		t.Fatal("a not expired 70 minutes after its last write")
	}
	if v, ok, _ := tab.Get(ctx, "b"); !ok || v.Sum != 5 {
		t.Fatalf("b = %+v, %v; want Sum 5, kept", v, ok)
	}
	d.Restart()
	d.AdvanceClock(31 * time.Minute)
	d.Advance()
	if _, ok, _ := tab.Get(ctx, "b"); ok {
		t.Fatal("b not expired after a restart, 61 minutes after its last write")
	}
	var expired uint64
	for _, st := range d.App().Stats() {
		expired += st.Total.Expired
	}
	if expired != 1 { // counters start again at a restart
		t.Fatalf("Expired = %d since the restart, want 1", expired)
	}
}

func TestWithTTLRefusesBadDurations(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		topo := topology.New("ttl")
		src := topology.Source[string](topo, "t/events")
		tab := topology.NewTable[string, grouptest.TVal](topo, "vals", stream.JSON[grouptest.TVal](), topology.WithTTL(d))
		topology.ProjectContext(topology.On(src, tEvents), tab, tFold)
		if _, err := topo.Build(); err == nil || !errors.Is(err, topology.ErrBuild) {
			t.Fatalf("WithTTL(%v): Build = %v, want a refusal", d, err)
		}
	}
}

func TestTimersFire(t *testing.T) {
	topo := topology.New("timers")
	src := topology.Source[string](topo, "t/events")
	tab := topology.NewTable[string, grouptest.TVal](topo, "vals", stream.JSON[grouptest.TVal]())
	topology.ProjectContext(topology.On(src, tEvents), tab, tFold)
	var fired []string
	topology.OnTimer(src, tab, func(ctx context.Context, k string, v *grouptest.TVal, at time.Time) error {
		fired = append(fired, k)
		v.Fired++
		if v.Fired < 2 { // once more, 10s later
			return topology.Schedule(ctx, at.Add(10*time.Second))
		}
		return nil
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2))
	ctx := context.Background()

	topologytest.Pipe(d, tEvents, tEv{K: "a", Op: 2, N: 30}, tEv{K: "b", Op: 2, N: 60}, tEv{K: "c", Op: 2, N: 30}, tEv{K: "c", Op: 3})
	d.Advance()
	d.AdvanceClock(29 * time.Second)
	d.Advance()
	if len(fired) != 0 {
		t.Fatalf("fired %v before their time", fired)
	}
	d.AdvanceClock(time.Second)
	d.Advance()
	if v, _, _ := tab.Get(ctx, "a"); v.Fired != 1 {
		t.Fatalf("a: %+v, want fired once at 30s", v)
	}
	d.Restart()
	d.AdvanceClock(10 * time.Second)
	d.Advance()
	if v, _, _ := tab.Get(ctx, "a"); v.Fired != 2 {
		t.Fatalf("a: %+v, want fired twice at 40s (across a restart)", v)
	}
	d.AdvanceClock(time.Hour)
	d.Advance()
	for k, want := range map[string]int64{"a": 2, "b": 2, "c": 0} {
		if v, _, _ := tab.Get(ctx, k); v.Fired != want {
			t.Errorf("%s: fired %d times, want %d", k, v.Fired, want)
		}
	}
	var n uint64
	for _, st := range d.App().Stats() {
		n += st.Total.TimersFired
	}
	if n != 3 { // a at 40s, b at 60s and 70s since the restart
		t.Errorf("TimersFired = %d since the restart, want 3", n)
	}
}

type tAlert struct {
	K     string
	Fired int64
}

var tAlerts = stream.DeclareFunc(1, func(a tAlert) string { return a.K })

func TestTimerHandlerEmits(t *testing.T) {
	topo := topology.New("timer-emits")
	src := topology.Source[string](topo, "t/events")
	tab := topology.NewTable[string, grouptest.TVal](topo, "vals", stream.JSON[grouptest.TVal]())
	topology.ProjectContext(topology.On(src, tEvents), tab, tFold)
	topology.OnTimerTo(src, tab, "t/alerts", tAlerts, func(ctx context.Context, k string, v *grouptest.TVal, at time.Time, emit func(tAlert)) error {
		v.Fired++
		emit(tAlert{K: k, Fired: v.Fired})
		if v.Fired < 2 {
			return topology.Schedule(ctx, at.Add(time.Minute))
		}
		return nil
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2))
	topologytest.Pipe(d, tEvents, tEv{K: "a", Op: 2, N: 10}, tEv{K: "b", Op: 2, N: 20})
	d.Advance()
	d.AdvanceClock(30 * time.Second)
	d.Advance()
	d.Restart()
	d.AdvanceClock(2 * time.Minute)
	d.Advance()
	d.AdvanceClock(2 * time.Minute)
	d.Advance()
	got := map[tAlert]int{}
	for _, a := range topologytest.Outputs(d, "t/alerts", tAlerts) {
		got[a]++
	}
	want := map[tAlert]int{{"a", 1}: 1, {"a", 2}: 1, {"b", 1}: 1, {"b", 2}: 1}
	if len(got) != len(want) {
		t.Fatalf("alerts %v, want %v", got, want)
	}
	for a, n := range want {
		if got[a] != n {
			t.Fatalf("alerts %v, want each of %v once", got, want)
		}
	}
}
