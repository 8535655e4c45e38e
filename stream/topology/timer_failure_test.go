package topology_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// Failed timers (docs/design.md §18): a timer handler that fails follows the
// failure policy of an event: it is retried with the retry policy, its key's
// later events wait behind it, and after its last try it is dead-lettered
// (PassPoison) or blocks its key with its timer kept (BlockPoisonedKey).

// ftVal is the failed-timer tests' value: the sum of the events, how often
// the timer fired, and the sum when it fired (which events it came after).
type ftVal struct {
	Sum       int64
	Fired     int64
	SumAtFire int64
}

// ftFold adds N; Op 2 also schedules the key's timer at grouptest.TBase +
// N seconds.
func ftFold(ctx context.Context, v *ftVal, e tEv) error {
	v.Sum += e.N
	if e.Op == 2 {
		return topology.Schedule(ctx, grouptest.TBase.Add(time.Duration(e.N)*time.Second))
	}
	return nil
}

// ftFailer makes a timer handler fail for a key until allowed to go on.
type ftFailer struct {
	mu    sync.Mutex
	tries map[string]int
	fail  func(key string, try int) error
}

func (f *ftFailer) handler(ctx context.Context, k string, v *ftVal, at time.Time) error {
	f.mu.Lock()
	f.tries[k]++
	try := f.tries[k]
	f.mu.Unlock()
	v.Fired++ // undone when the handler fails
	v.SumAtFire = v.Sum
	if err := f.fail(k, try); err != nil {
		return err
	}
	return nil
}

func (f *ftFailer) triesOf(k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tries[k]
}

func ftTopology(f *ftFailer, opts ...topology.Option) (*topology.Topology, *topology.Table[string, ftVal]) {
	opts = append([]topology.Option{topology.WithRetry(3, time.Second, 4*time.Second)}, opts...)
	topo := topology.New("timer-failures", opts...)
	src := topology.Source[string](topo, "t/events")
	tab := topology.NewTable[string, ftVal](topo, "vals", stream.JSON[ftVal]())
	topology.ProjectContext(topology.On(src, tEvents), tab, ftFold)
	topology.OnTimer(src, tab, f.handler)
	return topo, tab
}

func timerFailures(d *topologytest.Driver) uint64 {
	var n uint64
	for _, st := range d.App().Stats() {
		n += st.Total.TimerFailures
	}
	return n
}

// A timer whose handler fails twice is retried with the backoff and fires
// on its third try, across a restart; an event of its key that comes while
// it waits is applied after it, and another key goes on meanwhile.
func TestFailedTimerIsRetried(t *testing.T) {
	f := &ftFailer{tries: map[string]int{}, fail: func(k string, try int) error {
		if k == "a" && try < 3 {
			return errors.New("the alerting service is down")
		}
		return nil
	}}
	topo, tab := ftTopology(f)
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(1))
	ctx := context.Background()

	topologytest.Pipe(d, tEvents, tEv{K: "a", Op: 2, N: 10}, tEv{K: "b", Op: 2, N: 10})
	d.Advance()
	d.AdvanceClock(10 * time.Second)
	d.Advance() // a fails (try 1), b fires
	if got := f.triesOf("a"); got != 1 {
		t.Fatalf("a's handler ran %d times at its due time, want 1", got)
	}
	if v, _, _ := tab.Get(ctx, "a"); v.Fired != 0 {
		t.Fatalf("a = %+v after its failed try; want its writes undone", v)
	}
	// An event of a after the failed try waits behind the timer; b's goes on.
	topologytest.Pipe(d, tEvents, tEv{K: "a", N: 5}, tEv{K: "b", N: 5})
	d.Advance()
	if v, _, _ := tab.Get(ctx, "a"); v.Sum != 10 {
		t.Fatalf("a = %+v; want its new event waiting behind its failing timer (Sum 10)", v)
	}
	if v, _, _ := tab.Get(ctx, "b"); v.Sum != 15 || v.Fired != 1 {
		t.Fatalf("b = %+v; want Sum 15 Fired 1 (other keys go on)", v)
	}
	if keys, _ := d.Parked(); keys != 1 {
		t.Fatalf("%d parked keys, want a's", keys)
	}
	d.Restart()
	d.AdvanceClock(time.Second)
	d.Advance() // try 2 fails
	if got := f.triesOf("a"); got != 2 {
		t.Fatalf("a's handler ran %d times after one backoff, want 2", got)
	}
	d.AdvanceClock(2 * time.Second)
	d.Advance() // try 3 fires, then a's event
	v, _, _ := tab.Get(ctx, "a")
	if v.Fired != 1 || v.SumAtFire != 10 || v.Sum != 15 {
		t.Fatalf("a = %+v; want fired once, before its later event (SumAtFire 10, Sum 15)", v)
	}
	if keys, _ := d.Parked(); keys != 0 {
		t.Fatalf("%d parked keys after the timer fired, want 0", keys)
	}
	d.AdvanceClock(time.Hour)
	d.Advance()
	if got := f.triesOf("a"); got != 3 {
		t.Fatalf("a's handler ran %d times, want 3", got)
	}
	if dls := d.DeadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %v, want none", dls)
	}
	if n := timerFailures(d); n != 1 { // counters start again at a restart
		t.Fatalf("TimerFailures = %d since the restart, want 1", n)
	}
}

// Under PassPoison a timer that fails on its last try is dead-lettered: one
// dead letter describing its table, key, due time and error, the key goes
// on with its later events, and the timer never fires again. A Permanent
// error dead-letters it at once.
func TestFailedTimerIsDeadLettered(t *testing.T) {
	f := &ftFailer{tries: map[string]int{}, fail: func(k string, try int) error {
		switch k {
		case "a":
			return errors.New("the alerting service is down")
		case "p":
			return stream.Permanent(errors.New("no such alert"))
		}
		return nil
	}}
	topo, tab := ftTopology(f)
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2))
	ctx := context.Background()

	topologytest.Pipe(d, tEvents, tEv{K: "a", Op: 2, N: 10}, tEv{K: "p", Op: 2, N: 20})
	d.Advance()
	d.AdvanceClock(10 * time.Second)
	d.Advance() // a: try 1
	topologytest.Pipe(d, tEvents, tEv{K: "a", N: 5})
	d.Advance()
	d.AdvanceClock(time.Second)
	d.Advance() // a: try 2
	d.Restart()
	d.AdvanceClock(2 * time.Second)
	d.Advance() // a: try 3, dead-lettered; its event goes on
	d.AdvanceClock(10 * time.Second)
	d.Advance() // p: permanent at once
	d.AdvanceClock(time.Hour)
	d.Advance()

	if got := f.triesOf("a"); got != 3 {
		t.Fatalf("a's handler ran %d times, want 3 (WithRetry(3, …))", got)
	}
	if got := f.triesOf("p"); got != 1 {
		t.Fatalf("p's handler ran %d times, want 1 (a Permanent error)", got)
	}
	if v, _, _ := tab.Get(ctx, "a"); v.Sum != 15 || v.Fired != 0 {
		t.Fatalf("a = %+v; want Sum 15 (its event went on) and never fired", v)
	}
	if keys, _ := d.Parked(); keys != 0 {
		t.Fatalf("%d parked keys, want 0", keys)
	}
	dls := d.DeadLetters()
	if len(dls) != 2 {
		t.Fatalf("%d dead letters %v, want 2 (a's and p's timers)", len(dls), dls)
	}
	got := map[string]deadletter.Letter{}
	for _, dl := range dls {
		if dl.Reason != deadletter.ReasonTimer {
			t.Fatalf("dead letter %v: reason %v, want %v", dl, dl.Reason, deadletter.ReasonTimer)
		}
		tm, err := dl.Timer()
		if err != nil {
			t.Fatalf("dead letter %v: %v", dl, err)
		}
		if tm.Table != "vals" {
			t.Fatalf("dead letter %v: table %q, want vals", dl, tm.Table)
		}
		got[string(tm.Key)] = dl
		switch string(tm.Key) {
		case "a":
			if !tm.At.Equal(grouptest.TBase.Add(10*time.Second)) || dl.Attempts != 3 {
				t.Fatalf("a's timer dead letter: at %v, %d attempts; want %v, 3", tm.At, dl.Attempts, grouptest.TBase.Add(10*time.Second))
			}
		case "p":
			if !tm.At.Equal(grouptest.TBase.Add(20*time.Second)) || dl.Attempts != 1 {
				t.Fatalf("p's timer dead letter: at %v, %d attempts; want %v, 1", tm.At, dl.Attempts, grouptest.TBase.Add(20*time.Second))
			}
		}
		if dl.Err == nil {
			t.Fatalf("dead letter %v without its error", dl)
		}
	}
	if len(got) != 2 {
		t.Fatalf("dead letters for keys %v, want a and p once each", got)
	}
}

// Under BlockPoisonedKey a timer that fails on its last try blocks its key
// as a poison event would: no dead letter, the timer kept, the key's later
// events held; after App.Unblock the timer fires, then the blocked events.
func TestFailedTimerBlocksTheKey(t *testing.T) {
	var mu sync.Mutex
	down := true
	f := &ftFailer{tries: map[string]int{}, fail: func(k string, try int) error {
		mu.Lock()
		defer mu.Unlock()
		if k == "a" && down {
			return errors.New("the alerting service is down")
		}
		return nil
	}}
	topo, tab := ftTopology(f, topology.WithPoisonPolicy(stream.BlockPoisonedKey))
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(1))
	ctx := context.Background()

	topologytest.Pipe(d, tEvents, tEv{K: "a", Op: 2, N: 10})
	d.Advance()
	for range 3 {
		d.AdvanceClock(5 * time.Second)
		d.Advance()
	}
	topologytest.Pipe(d, tEvents, tEv{K: "a", N: 5})
	d.Restart()
	d.AdvanceClock(time.Hour)
	d.Advance()
	if got := f.triesOf("a"); got != 3 {
		t.Fatalf("a's handler ran %d times, want 3, then blocked", got)
	}
	if v, _, _ := tab.Get(ctx, "a"); v.Sum != 10 || v.Fired != 0 {
		t.Fatalf("a = %+v; want its event waiting behind the blocked timer", v)
	}
	if keys, records := d.Parked(); keys != 1 || records != 1 {
		t.Fatalf("parked %d keys, %d records; want a blocked with its event", keys, records)
	}
	if dls := d.DeadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %v, want none (the key is blocked, the timer kept)", dls)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	if err := d.App().Unblock(ctx, "t/events", 0, []byte("a")); err != nil {
		t.Fatal(err)
	}
	d.Advance()
	v, _, _ := tab.Get(ctx, "a")
	if v.Fired != 1 || v.SumAtFire != 10 || v.Sum != 15 {
		t.Fatalf("a = %+v after Unblock; want the timer fired before the waiting event (Fired 1, SumAtFire 10, Sum 15)", v)
	}
	if keys, _ := d.Parked(); keys != 0 {
		t.Fatalf("%d parked keys after Unblock, want 0", keys)
	}
}
