package grouptest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// manualClock is a topology.Clock moved by the test.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiterAt
}

type waiterAt struct {
	at time.Time
	c  chan time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) At(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !t.After(c.now) {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiterAt{t, ch})
	return ch
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.c <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// Deletes and timers move with their partitions: instance a applies
// deletes and fires the early timers, then leaves; b restores the
// partitions from the changelog (snapshots every 2 commits) and must
// answer not found for the deleted rows and fire each remaining timer
// once, and none that a fired.
func TestGroupCarriesDeletesAndTimers(t *testing.T) {
	ctx := context.Background()
	cl := Broker(t)
	const parts, keys = 2, 24
	if err := cl.EnsureTopic(ctx, "s", "tlog", parts); err != nil {
		t.Fatal(err)
	}
	clock := &manualClock{now: TBase}
	start := func(name, dir string) (*instance, *topology.Table[string, TVal]) {
		topo := topology.New("tgrp")
		src := topology.Source[string](topo, "s/tlog")
		tab := topology.NewTable[string, TVal](topo, "vals", stream.JSON[TVal]())
		topology.ProjectContext(topology.On(src, TPEvents), tab, func(ctx context.Context, v *TVal, e TPEv) error {
			if e.Op == 1 {
				return topology.Delete(ctx)
			}
			v.Sum += e.N
			v.Events++
			if e.Op == 2 {
				return topology.Schedule(ctx, e.At)
			}
			return nil
		})
		topology.OnTimer(src, tab, func(_ context.Context, _ string, v *TVal, _ time.Time) error {
			v.Fired++
			return nil
		})
		app, err := topology.Open(ctx, topo, cl, dir, topology.WithGroup(cl.Group("s", iggy.WithSessionTimeout(2*time.Second))),
			topology.WithClock(clock), topology.WithSnapshotEvery(2), topology.WithLogger(testLogger(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		return runInstance(t, name, dir, app), tab
	}
	pub, err := iggy.NewPublisher(ctx, cl, "s", "tlog")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close(ctx) }()
	publish := func(events ...TPEv) {
		for _, e := range events {
			if err := iggy.Publish(ctx, pub, TPEvents, e); err != nil {
				t.Fatal(err)
			}
		}
		if err := pub.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Every key: an add; keys 0 mod 4 are deleted; odd keys get a timer,
	// early (10s) for 1 mod 4, late (60s) for 3 mod 4.
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		switch {
		case k%4 == 0:
			publish(TPEv{K: key, N: 1}, TPEv{K: key, Op: 1})
		case k%4 == 1:
			publish(TPEv{K: key, Op: 2, N: 1, At: TBase.Add(10 * time.Second)})
		case k%4 == 3:
			publish(TPEv{K: key, Op: 2, N: 1, At: TBase.Add(60 * time.Second)})
		default:
			publish(TPEv{K: key, N: 1})
		}
	}
	a, tabA := start("a", t.TempDir())
	settled(t, parts, a)
	clock.advance(20 * time.Second) // the early timers fire on a
	waitUntil(t, "the early timers to fire on a", 30*time.Second, func() bool {
		for k := 1; k < keys; k += 4 {
			if v, _, _ := tabA.Get(ctx, fmt.Sprintf("k%d", k)); v.Fired != 1 {
				return false
			}
		}
		return true
	})
	a.close(t)

	b, tabB := start("b", t.TempDir())
	defer b.close(t)
	settled(t, parts, b)
	clock.advance(50 * time.Second) // 70s: the late timers fire on b
	waitUntil(t, "the late timers to fire on b", 30*time.Second, func() bool {
		for k := 3; k < keys; k += 4 {
			if v, _, _ := tabB.Get(ctx, fmt.Sprintf("k%d", k)); v.Fired != 1 {
				return false
			}
		}
		return true
	})
	clock.advance(time.Hour)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.app.WaitCaughtUp(cctx); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		v, ok, err := tabB.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want := TVal{Sum: 1, Events: 1}
		if k%2 == 1 {
			want.Fired = 1
		}
		switch {
		case k%4 == 0 && ok:
			t.Errorf("%s: %+v after its delete, want not found", key, v)
		case k%4 != 0 && (!ok || v != want):
			t.Errorf("%s = %+v (found %v), want %+v", key, v, ok, want)
		}
	}
	var fired uint64
	for _, st := range b.app.Stats() {
		fired += st.Total.TimersFired
	}
	if fired != keys/4 {
		t.Errorf("b fired %d timers, want %d (the late ones only)", fired, keys/4)
	}
}
