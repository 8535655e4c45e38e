package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// Failover of a SIGKILLed instance that is restarted at once (issue 28,
// item 3): with static membership (-static, the default: the instance id
// accounts-N) the restarted process takes its previous incarnation's place
// in the group at its join, so its partitions are served again after a
// process start, an Open and a restore that reuses its store; without it,
// the group waits for the session timeout to declare the dead incarnation
// dead first.

// servedBy returns, per partition, the instance serving it now.
func (c *cluster) servedBy() map[uint32]int {
	by := map[uint32]int{}
	for _, gs := range c.statuses() {
		for _, p := range gs.Partitions {
			if p.Phase == "serving" {
				by[p.Partition] = gs.Instance
			}
		}
	}
	return by
}

// waitBalanced waits until every live instance serves at least its even
// share of the partitions, and the producer published at least events.
func (c *cluster) waitBalanced(timeout time.Duration, events int64) map[uint32]int {
	c.t.Helper()
	var by map[uint32]int
	crashtest.WaitFor(c.t, timeout, func() error {
		by = c.servedBy()
		count := map[int]int{}
		for _, n := range by {
			count[n]++
		}
		live := c.live()
		ok := len(by) == len(allPartitions) && c.prod.published.Load() >= events
		for _, in := range live {
			ok = ok && count[in.N] >= len(allPartitions)/len(live)
		}
		if !ok {
			return fmt.Errorf("the group did not balance (served: %v, published %d)", by, c.prod.published.Load())
		}
		return nil
	})
	return by
}

// killRestart SIGKILLs instance n, starts it again at once (same number:
// same store, same instance id) and returns how long after the kill every
// partition was served again: the wait's budget is what is left of within
// after the kill and the start, so within is measured from the kill.
func (c *cluster) killRestart(n int, within time.Duration) time.Duration {
	c.t.Helper()
	c.mu.Lock()
	in := c.insts[n]
	c.mu.Unlock()
	at := time.Now()
	in.Kill()
	c.start(n)
	crashtest.WaitFor(c.t, within-time.Since(at), func() error {
		if by := c.servedBy(); len(by) != len(allPartitions) {
			return fmt.Errorf("instance %d restarted: partitions not all served within %v of the SIGKILL: %v", n, within, by)
		}
		return nil
	})
	return time.Since(at)
}

// TestScaleOutStaticRestart: an instance SIGKILLed and restarted at once
// gets its partitions back without waiting for the session timeout (30s
// here, so a takeover that waited for it cannot pass), and the accounts,
// the dead letters and the changelog are right afterwards.
func TestScaleOutStaticRestart(t *testing.T) {
	t.Parallel()
	const session = 30 * time.Second
	c := newCluster(t, clusterConfig{accounts: 500, rate: 1000, poisonSpacing: 100, snapshotEvery: 20, session: session})
	for n := 1; n <= 3; n++ {
		c.start(n)
	}
	c.produce()
	before := c.waitBalanced(time.Minute, 500)
	var had []uint32
	for p, n := range before {
		if n == 3 {
			had = append(had, p)
		}
	}
	slices.Sort(had)
	took := c.killRestart(3, session-time.Second)
	t.Logf("instance 3 (partitions %v) SIGKILLed and restarted: every partition served again after %v (session timeout %v)",
		had, took.Round(time.Millisecond), session)
	var has []uint32
	for p, n := range c.servedBy() {
		if n == 3 {
			has = append(has, p)
		}
	}
	slices.Sort(has)
	if !slices.Equal(has, had) {
		t.Errorf("the restarted instance serves %v, its previous incarnation %v", has, had)
	}
	c.waitBalanced(time.Minute, c.prod.published.Load()+500)
	verify(t, c.finish(c.live()[0]))
}

// TestScaleOutFailoverFigures measures the failover of a SIGKILLed and at
// once restarted instance, with and without static membership, over
// STRAND_FAILOVER_ROUNDS rounds (default 8) with a 4s session timeout
// (benchmarks/HISTORY.md §23). Only with STRAND_SOAK=1.
func TestScaleOutFailoverFigures(t *testing.T) {
	if os.Getenv("STRAND_SOAK") != "1" {
		t.Skip("a measurement: STRAND_SOAK=1")
	}
	rounds := 8
	if n, err := strconv.Atoi(os.Getenv("STRAND_FAILOVER_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	const session = 4 * time.Second
	for _, dynamic := range []bool{false, true} {
		name := "static"
		if dynamic {
			name = "dynamic"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, clusterConfig{accounts: 2000, rate: 1500, poisonSpacing: 400, snapshotEvery: 200, session: session, dynamic: dynamic})
			for n := 1; n <= 3; n++ {
				c.start(n)
			}
			c.produce()
			c.waitBalanced(time.Minute, 1000)
			var tooks []time.Duration
			for r := range rounds {
				n := 1 + r%3
				tooks = append(tooks, c.killRestart(n, 3*session))
				c.waitBalanced(time.Minute, 0) // the next kill hits a steady group
			}
			slices.Sort(tooks)
			t.Logf("%s membership, session timeout %v, %d SIGKILL+restart rounds: failover p50 %v, max %v, all %v",
				name, session, rounds, tooks[len(tooks)/2].Round(time.Millisecond), tooks[len(tooks)-1].Round(time.Millisecond), fmt.Sprint(tooks))
			verify(t, c.finish(c.live()[0]))
		})
	}
	// An instance killed for good: the others take its partitions over
	// after the session timeout and restore them from the changelog.
	t.Run("no-restart", func(t *testing.T) {
		c := newCluster(t, clusterConfig{accounts: 2000, rate: 1500, poisonSpacing: 400, snapshotEvery: 200, session: session})
		next := 1
		for ; next <= 3; next++ {
			c.start(next)
		}
		c.produce()
		c.waitBalanced(time.Minute, 1000)
		var tooks []time.Duration
		for range rounds {
			live := c.live()
			victim := live[0]
			at := time.Now()
			victim.Kill()
			crashtest.WaitFor(t, 3*session-time.Since(at), func() error {
				if by := c.servedBy(); len(by) < len(allPartitions) || c.servedByDead(victim.N) {
					return fmt.Errorf("partitions not all served within %v of the SIGKILL: %v", 3*session, by)
				}
				return nil
			})
			tooks = append(tooks, time.Since(at))
			c.start(next) // a new instance, so the next round kills one of three again
			next++
			c.waitBalanced(time.Minute, 0)
		}
		slices.Sort(tooks)
		t.Logf("SIGKILL without restart, session timeout %v, %d rounds: failover p50 %v, max %v, all %v",
			session, rounds, tooks[len(tooks)/2].Round(time.Millisecond), tooks[len(tooks)-1].Round(time.Millisecond), fmt.Sprint(tooks))
		verify(t, c.finish(c.live()[0]))
	})
}

// servedByDead reports whether the statuses still name instance n, which
// was killed, as serving a partition (a status read before it died).
func (c *cluster) servedByDead(n int) bool {
	for _, by := range c.servedBy() {
		if by == n {
			return true
		}
	}
	return false
}

// restartBroker stops the broker, leaves it down for down (the outage
// itself, not a wait for anything), and starts it again on the same
// address and data directory.
func (c *cluster) restartBroker(down time.Duration) {
	c.t.Helper()
	addr := c.srv.Addr()
	if err := c.srv.Close(); err != nil {
		c.t.Fatal(err)
	}
	time.Sleep(down)
	srv, err := iggytest.NewServer(iggytest.WithDataDir(filepath.Join(c.root, "broker")), iggytest.WithAddr(addr))
	if err != nil {
		c.t.Fatal(err)
	}
	c.srv = srv
}

// TestScaleOutBrokerRestart: the broker goes down for longer than the
// session timeout, three times; every instance's lease expires, it loses
// its partitions, joins again (the same instance id) and regains them
// under new epochs — the sequence that left a partition processed by
// nobody in issue 28. After each restart every partition is served again,
// and at the end the accounts, the dead letters and the changelog are
// right. Only with STRAND_SOAK=1 (about a minute).
func TestScaleOutBrokerRestart(t *testing.T) {
	if os.Getenv("STRAND_SOAK") != "1" {
		t.Skip("a long chaos run: STRAND_SOAK=1")
	}
	c := newCluster(t, clusterConfig{accounts: 1000, rate: 1000, poisonSpacing: 100, snapshotEvery: 50})
	for n := 1; n <= 3; n++ {
		c.start(n)
	}
	c.produce()
	c.waitBalanced(time.Minute, 2000)
	events, poison := c.stopProducing()
	for r := range 3 {
		at := time.Now()
		c.restartBroker(3 * sessionTimeout)
		by := c.waitBalanced(2*time.Minute, 0)
		t.Logf("broker restart %d: every partition served again %v after it went down (down %v): %v",
			r+1, time.Since(at).Round(time.Millisecond), 3*sessionTimeout, by)
	}
	f := c.finish(c.live()[0])
	if f.events != events || f.poison != poison {
		t.Fatalf("the producer's counts moved after it stopped: %d/%d, %d/%d", f.events, events, f.poison, poison)
	}
	verify(t, f)
	c.mu.Lock()
	defer c.mu.Unlock()
	for n, in := range c.insts {
		if in.Exited() {
			t.Errorf("instance %d exited during the broker's restarts:\n%s", n, in.Tail(40))
		}
	}
}
