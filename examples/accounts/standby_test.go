package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// Warm standbys (issue 28, item 4; docs/design.md §15, "Standbys"): with
// -standbys 1, each partition's rows are kept current on the instance it
// goes to if its owner dies, so a SIGKILLed owner's partitions are
// promoted there (a restore that reuses the rows and reads only the
// changelog's tail) as soon as the group declares the owner dead.

// failover is one SIGKILL of an owner, as the survivors saw it.
type failover struct {
	total  time.Duration // SIGKILL → every partition served again
	detect time.Duration // SIGKILL → no survivor lists the dead member
	moved  []uint32      // the dead instance's partitions
	reused int           // of them, restored on the standby's rows
	gets   getCounts
}

// afterDetect is how long the partitions took to be served again once the
// dead member was detected.
func (f failover) afterDetect() time.Duration { return max(f.total-f.detect, 0) }

type getCounts struct{ ok, stale, failed int64 }

// getter reads random accounts through a query server until stopped,
// counting answers: 200 or 404 from the owner (ok), from a standby copy
// (stale, only with consent), and anything else (failed).
type getter struct {
	ok, stale, failed atomic.Int64
	stop              context.CancelFunc
	done              chan struct{}
}

func startGetter(hc *http.Client, via string, accounts int, consent string) *getter {
	ctx, cancel := context.WithCancel(context.Background())
	g := &getter{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		r := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/tables/balances/%d", via, 1+r.IntN(accounts)), nil)
			if consent != "" {
				req.Header.Set("Strand-Max-Staleness", consent)
			}
			resp, err := hc.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					g.failed.Add(1)
				}
				continue
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound:
				g.failed.Add(1)
			case resp.Header.Get("Strand-Staleness") != "":
				g.stale.Add(1)
			default:
				g.ok.Add(1)
			}
		}
	}()
	return g
}

func (g *getter) counts() getCounts {
	return getCounts{ok: g.ok.Load(), stale: g.stale.Load(), failed: g.failed.Load()}
}

func (g *getter) close() { g.stop(); <-g.done }

// waitStandbys waits until every partition has a standby copy on a live
// instance that caught up with its changelog.
func (c *cluster) waitStandbys(timeout time.Duration) {
	c.t.Helper()
	crashtest.WaitFor(c.t, timeout, func() error {
		sts := c.statuses()
		have := map[uint32]bool{}
		for _, gs := range sts {
			for _, sb := range gs.Standbys {
				if sb.StalenessMS >= 0 {
					have[sb.Partition] = true
				}
			}
		}
		if len(have) == len(allPartitions) {
			return nil
		}
		var b strings.Builder
		for _, gs := range sts {
			fmt.Fprintf(&b, "\ninstance %d (member %d): partitions %+v; standbys %+v; members %+v", gs.Instance, gs.Member, gs.Partitions, gs.Standbys, gs.Members)
		}
		return fmt.Errorf("not every partition has a current standby copy: %v%s", have, b.String())
	})
}

// killOwner SIGKILLs victim (for good) and follows the survivors until
// they serve every partition, reading accounts through one of them with
// consent to stale answers (consent "" for none).
func (c *cluster) killOwner(victim *instance, within time.Duration, consent string) failover {
	c.t.Helper()
	var member uint64
	var f failover
	for _, gs := range c.statuses() {
		if gs.Instance == victim.N {
			member = gs.Member
			for _, p := range gs.Partitions {
				f.moved = append(f.moved, p.Partition)
			}
		}
	}
	slices.Sort(f.moved)
	var via string
	for _, in := range c.live() {
		if in != victim {
			via = in.Addr()
			break
		}
	}
	g := startGetter(c.pa.httpClient(), via, c.pa.cfg.accounts, consent)
	at := time.Now()
	victim.Kill()
	// The wait's budget is what is left of within after the kill: within
	// is measured from the SIGKILL, as f.detect and f.total are.
	crashtest.WaitFor(c.t, within-time.Since(at), func() error {
		sts := c.statuses(victim)
		now := time.Since(at)
		listed := false
		by := map[uint32]bool{}
		reused := 0
		for _, gs := range sts {
			for _, m := range gs.Members {
				listed = listed || m.ID == member
			}
			for _, p := range gs.Partitions {
				if p.Phase == "serving" {
					by[p.Partition] = true
					if slices.Contains(f.moved, p.Partition) && p.Restore != nil && p.Restore.Reused {
						reused++
					}
				}
			}
		}
		if !listed && f.detect == 0 && len(sts) > 0 {
			f.detect = now
		}
		if f.detect != 0 && len(by) == len(allPartitions) {
			f.total, f.reused = now, reused
			return nil
		}
		return fmt.Errorf("partitions not all served within %v of the SIGKILL (detected after %v): %v", within, f.detect, by)
	})
	g.close()
	f.gets = g.counts()
	return f
}

// TestScaleOutStandbyPromotion: three instances with one standby of each
// partition; the owner of some partitions is SIGKILLed for good: once the
// group declares it dead, its partitions are served by their standbys,
// each restored on the rows its standby kept (not from the changelog's
// start: there are no snapshots here); the accounts, the dead letters and
// the changelog are right afterwards.
func TestScaleOutStandbyPromotion(t *testing.T) {
	t.Parallel()
	const session = 2 * time.Second
	c := newCluster(t, clusterConfig{accounts: 300, rate: 800, poisonSpacing: 100, snapshotEvery: 0, session: session, standbys: 1})
	for n := 1; n <= 3; n++ {
		c.start(n)
	}
	c.produce()
	c.waitBalanced(time.Minute, 500)
	c.waitStandbys(time.Minute)
	f := c.killOwner(c.live()[0], 10*session, "5s")
	t.Logf("SIGKILL of the owner of %v: served again %v after it, %v after the group declared it dead (at %v); %d of %d restored on a standby's rows; gets with consent: %+v",
		f.moved, f.total.Round(time.Millisecond), f.afterDetect().Round(time.Millisecond), f.detect.Round(time.Millisecond), f.reused, len(f.moved), f.gets)
	if f.reused != len(f.moved) {
		t.Errorf("%d of the dead owner's %d partitions were restored on a standby copy, want all", f.reused, len(f.moved))
	}
	verify(t, c.finish(c.live()[0]))
}

// TestScaleOutStandbyFigures measures the failover of an owner SIGKILLed
// for good, with and without standbys, over STRAND_FAILOVER_ROUNDS rounds
// (default 8) with a 4s session timeout (benchmarks/HISTORY.md §29). Only
// with STRAND_SOAK=1.
func TestScaleOutStandbyFigures(t *testing.T) {
	if os.Getenv("STRAND_SOAK") != "1" {
		t.Skip("a measurement: STRAND_SOAK=1")
	}
	rounds := 8
	if n, err := strconv.Atoi(os.Getenv("STRAND_FAILOVER_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	snapEvery := 200
	if n, err := strconv.Atoi(os.Getenv("STRAND_FAILOVER_SNAPSHOT_EVERY")); err == nil && n >= 0 {
		snapEvery = n
	}
	const session = 4 * time.Second
	for _, standbys := range []int{0, 1} {
		t.Run(fmt.Sprintf("standbys=%d", standbys), func(t *testing.T) {
			c := newCluster(t, clusterConfig{accounts: 2000, rate: 1500, poisonSpacing: 400, snapshotEvery: snapEvery, session: session, standbys: standbys})
			next := 1
			for ; next <= 3; next++ {
				c.start(next)
			}
			c.produce()
			c.waitBalanced(time.Minute, 1000)
			var totals, after []time.Duration
			var gets getCounts
			reused, moved := 0, 0
			var mu sync.Mutex
			for range rounds {
				if standbys > 0 {
					c.waitStandbys(time.Minute)
				}
				consent := ""
				if standbys > 0 {
					consent = "10s"
				}
				f := c.killOwner(c.live()[0], 4*session, consent)
				mu.Lock()
				totals, after = append(totals, f.total), append(after, f.afterDetect())
				gets.ok, gets.stale, gets.failed = gets.ok+f.gets.ok, gets.stale+f.gets.stale, gets.failed+f.gets.failed
				reused, moved = reused+f.reused, moved+len(f.moved)
				mu.Unlock()
				c.start(next) // a new instance: the next round kills one of three again
				next++
				c.waitBalanced(time.Minute, 0)
			}
			slices.Sort(totals)
			slices.Sort(after)
			t.Logf("standbys=%d, session timeout %v, snapshot every %d, %d SIGKILLs: served again after the kill p50 %v max %v; after detection p50 %v max %v (all %v); restored on a standby's rows %d of %d; gets during the failovers: %d ok, %d stale, %d failed",
				standbys, session, snapEvery, rounds, totals[len(totals)/2].Round(time.Millisecond), totals[len(totals)-1].Round(time.Millisecond),
				after[len(after)/2].Round(time.Millisecond), after[len(after)-1].Round(time.Millisecond), fmt.Sprint(after), reused, moved, gets.ok, gets.stale, gets.failed)
			verify(t, c.finish(c.live()[0]))
		})
	}
}
