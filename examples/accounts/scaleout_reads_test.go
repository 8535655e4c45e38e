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

// readOrder checks answers to reads of one key against the read guarantee
// (docs/design.md §2): an answer is at least as new as every answer that
// was received before its request was sent, and two answers at the same
// checkpoint are equal. Two reads that overlap in time are not ordered:
// each takes its view at some moment while it runs, so the one sent
// later may take an older view and be answered first or last (a gate's
// wait, a forward, a scheduler's pause). Comparing answers in the order
// they arrive, as the first version of TestScaleOutReadsNeverGoBack did,
// reports such pairs as going back: every "went back" it saw came from
// two reads answered within ~2 ms of each other, several by the same
// owner under the same epoch.
//
// Begin is called before a request is sent; Answer once its answer is
// in. It is safe for concurrent use.
type readOrder struct {
	mu    sync.Mutex
	clock uint64 // counts answers
	keys  map[string]*keyAnswers
	// overlapped counts answers older than one that arrived before them
	// from a read that overlapped theirs: allowed, counted for the log.
	overlapped int
}

type keyAnswers struct {
	done []doneAnswer      // by arrival (at rising)
	at   map[uint64]string // checkpoint → body
}

type doneAnswer struct {
	at, cp uint64
	who    string
}

// Begin returns the ticket of a read about to be sent.
func (o *readOrder) Begin() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.clock
}

// Answer records the answer of the read with ticket begun, and returns a
// description of how it breaks the guarantee, or "".
func (o *readOrder) Answer(key string, begun, cp uint64, body, who string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keys == nil {
		o.keys = map[string]*keyAnswers{}
	}
	k := o.keys[key]
	if k == nil {
		k = &keyAnswers{at: map[uint64]string{}}
		o.keys[key] = k
	}
	o.clock++
	var msg string
	var before, after *doneAnswer // the newest answer received before the read was sent, and after
	for i := range k.done {
		d := &k.done[i]
		switch {
		case d.at <= begun && (before == nil || d.cp > before.cp):
			before = d
		case d.at > begun && (after == nil || d.cp > after.cp):
			after = d
		}
	}
	switch {
	case before != nil && cp < before.cp:
		msg = fmt.Sprintf("%s answered at checkpoint %d (%s), below the answer at %d that %s gave before the read was sent",
			who, cp, body, before.cp, before.who)
	case after != nil && cp < after.cp:
		o.overlapped++
	}
	if prev, ok := k.at[cp]; ok && prev != body && msg == "" {
		msg = fmt.Sprintf("%s answered %s at checkpoint %d, an earlier answer there was %s", who, body, cp, prev)
	}
	k.at[cp] = body
	k.done = append(k.done, doneAnswer{at: o.clock, cp: cp, who: who})
	return msg
}

// TestReadOrder: the checker flags an answer older than one received
// before its read was sent, and two different answers at one checkpoint;
// it allows reads that overlap to be answered in either order.
func TestReadOrder(t *testing.T) {
	var o readOrder
	a := o.Begin()
	b := o.Begin()
	if msg := o.Answer("1", b, 20, "x20", "b"); msg != "" {
		t.Fatal(msg)
	}
	if msg := o.Answer("1", a, 10, "x10", "a"); msg != "" { // overlapped b
		t.Fatalf("overlapping reads answered out of order were flagged: %s", msg)
	}
	if o.overlapped != 1 {
		t.Fatalf("overlapped = %d, want 1", o.overlapped)
	}
	c := o.Begin() // after both answers
	if msg := o.Answer("1", c, 15, "x15", "c"); !strings.Contains(msg, "below the answer at 20") {
		t.Fatalf("an answer older than one received before the read was sent: %q", msg)
	}
	if msg := o.Answer("1", o.Begin(), 20, "y20", "d"); !strings.Contains(msg, "an earlier answer there was x20") {
		t.Fatalf("two answers at one checkpoint that differ: %q", msg)
	}
	if msg := o.Answer("2", c, 5, "z5", "e"); msg != "" { // another key
		t.Fatal(msg)
	}
}

// TestScaleOutReadsNeverGoBack (issue 24): three instances share 8
// partitions while the producer publishes; instances are SIGKILLed and
// restarted at random moments; readers poll a few hot accounts through
// every live instance's query server. An answer carries its partition's
// checkpoint: no answer may show a checkpoint below one an answer
// received before its request was sent showed (readOrder), and two
// answers at the same checkpoint must be equal. At the end every account
// equals the sequential fold of the log.
//
// The default run kills and restarts for 4 seconds; STRAND_SOAK=1 for 40
// seconds (kills every 0.5–1.5 s) with goroutines burning every CPU
// beside it (the windows open under load).
//
// History (issue 24): on main before the read gate, 19 of 4,840 answers
// went back and the final check read 6 of 1,957 accounts wrong (the query
// server's GetRecent answered from a view taken before a restore replaced
// the partition's rows). With reads gated by the changelog, a view
// holding every returned write and the lease checked before answering,
// the final check passed but 8–17 of 3,200–5,600 answers still seemed to
// go back: all were pairs of overlapping reads compared in arrival order
// (see readOrder), not answers a failover took back.
func TestScaleOutReadsNeverGoBack(t *testing.T) {
	t.Parallel()
	soak := os.Getenv("STRAND_SOAK") != ""
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
	if soak {
		for range runtime.NumCPU() { // CPU hogs: the windows open under load
			wg.Go(func() {
				for x := uint64(1); ctx.Err() == nil; x = x*6364136223846793005 + 1 {
				}
			})
		}
	}
	var order readOrder
	var answers, wentBack atomic.Int64
	for r := range 4 {
		wg.Go(func() {
			hc := &http.Client{Timeout: 2 * time.Second}
			defer hc.CloseIdleConnections()
			rr := rand.New(rand.NewPCG(uint64(r), 1))
			for ctx.Err() == nil {
				live := c.live()
				if len(live) == 0 {
					time.Sleep(10 * time.Millisecond) // a poll: until an instance runs again
					continue
				}
				in := live[rr.IntN(len(live))]
				id := 1 + rr.IntN(50) // a few hot accounts
				begun := order.Begin()
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
				who := fmt.Sprintf("instance %d (owner %q, epoch %q, at %s)", in.N, resp.Header.Get(queryserver.HeaderOwner),
					resp.Header.Get(queryserver.HeaderEpoch), time.Now().Format("15:04:05.000"))
				if msg := order.Answer(strconv.Itoa(id), begun, cp, strings.TrimSpace(string(body)), who); msg != "" {
					wentBack.Add(1)
					t.Errorf("account %d: %s", id, msg)
				}
			}
		})
	}

	run, pause := 4*time.Second, func() time.Duration { return time.Duration(600+rng.IntN(400)) * time.Millisecond }
	if soak {
		run, pause = 40*time.Second, func() time.Duration { return time.Duration(500+rng.IntN(1000)) * time.Millisecond }
	}
	deadline := time.Now().Add(run)
	var actions []string
	for time.Now().Before(deadline) {
		time.Sleep(pause()) // pacing: the next kill or restart at a random moment while the readers read
		live := c.live()
		// The short run alternates: kill one, restart it.
		if len(live) >= 2 && (soak && rng.IntN(2) == 0 || !soak && len(live) == 3) {
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
	order.mu.Lock()
	overlapped := order.overlapped
	order.mu.Unlock()
	t.Logf("%d answers, %d went back, %d answered below an overlapping read's answer (allowed); actions: %v",
		answers.Load(), wentBack.Load(), overlapped, actions)
	if answers.Load() == 0 {
		t.Error("no read was answered")
	}
	if len(c.live()) == 0 {
		c.start(1)
	}
	live := c.live()
	verify(t, c.finish(live[0]))
	for _, in := range c.live() {
		in.Stop(15 * time.Second)
	}
}
