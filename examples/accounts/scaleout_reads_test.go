package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/topology/queryserver"
)

// checkpointOf sums the next offsets of a Strand-Checkpoint header
// ("3/bank/accounts=7940, ..."); ok is false without one.
func checkpointOf(h string) (uint64, bool) {
	if h == "" {
		return 0, false
	}
	var sum uint64
	for _, item := range strings.Split(h, ", ") {
		_, n, ok := strings.Cut(item, "=")
		v, err := strconv.ParseUint(n, 10, 64)
		if !ok || err != nil {
			return 0, false
		}
		sum += v
	}
	return sum, true
}

// TestScaleOutReadsNeverGoBack (STRAND_SOAK=1; issue 24): three instances
// share 8 partitions while the producer publishes; instances are
// SIGKILLed and restarted at random moments, with goroutines burning CPU
// beside them; readers poll accounts through every live instance's query
// server. An answer carries its partition's checkpoint: no answer may show
// a checkpoint below one an earlier answer for the same account showed,
// and two answers at the same checkpoint must be equal. At the end every
// account equals the sequential fold of the log.
//
// Known to fail (issue 24, found by this test), seed 1796176079203811428,
// kills every 0.5–1.5 s with the hogs: on main before this branch, 19 of
// 4,840 answers went back and the final check read 6 of 1,957 accounts
// wrong (the query server's GetRecent answered from a view taken before a
// restore replaced the partition's rows). With reads gated by the
// changelog, a view holding every returned write, and the lease checked
// before answering, the final check passes (3 runs) but 8–11 of about
// 3,200 answers still go back by a few to a hundred offsets: not explained
// yet.
func TestScaleOutReadsNeverGoBack(t *testing.T) {
	if os.Getenv("STRAND_SOAK") == "" {
		t.Skip("a soak test: STRAND_SOAK=1")
	}
	rng := rand.New(rand.NewPCG(seed(t), 24))
	const accounts = 2000
	c := newCluster(t, clusterConfig{accounts: accounts, rate: 1500, poisonSpacing: 400, snapshotEvery: 20})
	for n := 1; n <= 3; n++ {
		c.start(n)
	}
	c.produce()
	c.waitServed(time.Minute, allPartitions)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range runtime.NumCPU() { // CPU hogs: the windows open under load
		wg.Go(func() {
			for x := uint64(1); ctx.Err() == nil; x = x*6364136223846793005 + 1 {
			}
		})
	}
	type answer struct {
		cp   uint64
		body string
	}
	var mu sync.Mutex
	seen := map[int]answer{}
	var answers, wentBack atomic.Int64
	for r := range 4 {
		wg.Go(func() {
			hc := &http.Client{Timeout: 2 * time.Second}
			defer hc.CloseIdleConnections()
			rr := rand.New(rand.NewPCG(uint64(r), 1))
			for ctx.Err() == nil {
				live := c.live()
				if len(live) == 0 {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				in := live[rr.IntN(len(live))]
				id := 1 + rr.IntN(50) // a few hot accounts
				resp, err := hc.Get(fmt.Sprintf("http://%s/tables/balances/%d", in.Addr(), id))
				if err != nil {
					continue // killed meanwhile
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				cp, ok := checkpointOf(resp.Header.Get(queryserver.HeaderCheckpoint))
				if resp.StatusCode != http.StatusOK || !ok {
					continue
				}
				answers.Add(1)
				mu.Lock()
				prev, had := seen[id]
				switch {
				case had && cp < prev.cp:
					wentBack.Add(1)
					t.Errorf("account %d: instance %d answered at checkpoint %d (%s) after an answer at %d (%s)", id, in.N, cp, body, prev.cp, prev.body)
				case had && cp == prev.cp && string(body) != prev.body:
					t.Errorf("account %d: two answers at checkpoint %d differ: %s and %s", id, cp, prev.body, body)
				}
				if !had || cp >= prev.cp {
					seen[id] = answer{cp, string(body)}
				}
				mu.Unlock()
			}
		})
	}

	deadline := time.Now().Add(40 * time.Second)
	var actions []string
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
		live := c.live()
		if len(live) >= 2 && rng.IntN(2) == 0 {
			in := live[rng.IntN(len(live))]
			in.Kill()
			actions = append(actions, fmt.Sprintf("kill %d", in.N))
			continue
		}
		c.mu.Lock()
		var dead []int
		for n, in := range c.insts {
			if in.Exited() {
				dead = append(dead, n)
			}
		}
		c.mu.Unlock()
		if len(dead) > 0 {
			n := dead[rng.IntN(len(dead))]
			c.start(n)
			actions = append(actions, fmt.Sprintf("restart %d", n))
		}
	}
	stop()
	wg.Wait()
	t.Logf("%d answers, %d went back; actions: %v", answers.Load(), wentBack.Load(), actions)
	if len(c.live()) == 0 {
		c.start(1)
	}
	live := c.live()
	verify(t, c.finish(live[0]))
	for _, in := range c.live() {
		in.Stop(15 * time.Second)
	}
}
