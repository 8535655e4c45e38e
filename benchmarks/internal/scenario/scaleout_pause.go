package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/stream/topology"
)

// The pause measurement's variants.
const (
	// PauseKill: the instance serving the most partitions is killed
	// (SIGKILL); the others take its partitions over once its session
	// times out.
	PauseKill = "kill"
	// PauseLeave: it is stopped (it leaves the group cleanly): the
	// baseline of a handover without a timeout.
	PauseLeave = "leave"
)

// pauseTracker follows, from the instances' status lines, when each
// partition's checkpoint moves.
type pauseTracker struct {
	mu     sync.Mutex
	t0     time.Time // the kill; zero before
	victim string
	parts  []pausePart
}

type pausePart struct {
	owner    string    // the instance that last reported it Serving
	next     uint64    // the checkpoint it reported
	lastMove time.Time // when a report last showed it moving
	maxGap   time.Duration

	victims      bool // the killed instance served it at t0
	restoring    time.Time
	serving      time.Time // first Serving on a survivor after t0
	moved        time.Time // first move on a survivor after t0
	took         time.Duration
	snapshot     bool
	reused       bool
	lastBeforeT0 time.Time // victims: the last move before t0
}

func (t *pauseTracker) observe(name string, st InstanceStatus) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	after := !t.t0.IsZero()
	if after && name == t.victim {
		return // a last line of the victim, read after the kill
	}
	for i, ps := range st.Parts {
		pp := &t.parts[i]
		if after && pp.victims && ps.Phase == topology.Restoring && pp.restoring.IsZero() {
			pp.restoring = now
		}
		if ps.Phase != topology.Serving {
			continue
		}
		if pp.owner != name {
			// A new owner: its first report is the baseline.
			pp.owner, pp.next = name, ps.Next
			if after && pp.victims && pp.serving.IsZero() {
				pp.serving, pp.took, pp.snapshot, pp.reused = now, ps.Took, ps.Snapshot, ps.Reused
				if pp.restoring.IsZero() {
					pp.restoring = now
				}
			}
			continue
		}
		if ps.Next <= pp.next {
			continue
		}
		pp.next = ps.Next
		if after && !pp.lastMove.IsZero() {
			pp.maxGap = max(pp.maxGap, now.Sub(pp.lastMove))
		}
		if after && pp.victims && pp.moved.IsZero() && !pp.serving.IsZero() {
			pp.moved = now
		}
		pp.lastMove = now
	}
}

// victimsMoved reports whether every partition of the victim moved on a
// survivor.
func (t *pauseTracker) victimsMoved() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.parts {
		if t.parts[i].victims && t.parts[i].moved.IsZero() {
			return false
		}
	}
	return true
}

// ScaleoutPause measures the rebalance pause: o.Instances instance
// processes (at least 2) share the partitions of the accounts topic while
// a producer publishes at o.Rate events/s; the instance serving the most
// partitions is killed with SIGKILL (kill) or stopped cleanly (leave), and
// the clock runs until every partition it served is Serving on another
// instance with its checkpoint moving (a commit there). The group's
// session timeout (o.Session) bounds how long a killed instance keeps its
// partitions. At the end every account is read through one instance's query
// server and compared with the reference.
func ScaleoutPause(ctx context.Context, o ScaleoutOptions, variant string) (Result, error) {
	res := Result{Scenario: "scaleout-pause", Variant: variant, Codec: string(o.Codec), Extra: map[string]float64{}}
	if variant != PauseKill && variant != PauseLeave {
		return res, fmt.Errorf("scaleout: pause: unknown variant %q", variant)
	}
	n := max(o.Instances, 2)
	session := o.Session
	if session <= 0 {
		session = 10 * time.Second
	}
	rate := o.Rate
	if rate <= 0 {
		rate = 20_000
	}
	w := o.base()
	base := w.Events
	steady, tail := cmp.Or(o.Steady, 2*time.Second), cmp.Or(o.Tail, 3*time.Second)
	paced := int(rate * (steady + 3*session + 10*time.Second + tail).Seconds())
	w.Events = base + paced
	log, err := workload.Encode(w, workload.NewDecls(o.Codec))
	if err != nil {
		return res, err
	}
	res.Events = log.Len()
	res.Extra["session_s"], res.Extra["instances"], res.Extra["rate"] = session.Seconds(), float64(n), rate
	dir, err := os.MkdirTemp(o.Dir, "scaleout-pause-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	b, err := startScaleoutBroker(ctx, w.Partitions)
	if err != nil {
		return res, err
	}
	defer b.close()
	if err := publish(ctx, b.pub, log, 0, base); err != nil {
		return res, err
	}
	baseEnds := endsUpTo(log, base)

	tr := &pauseTracker{parts: make([]pausePart, w.Partitions)}
	ps := make([]*instProc, n)
	defer func() { _ = stopAll(ps) }()
	t := time.Now()
	err = startGroup(ctx, o, ps, w.Partitions, baseEnds, 2*time.Minute+3*session, func(i int) (InstanceConfig, func(InstanceStatus)) {
		name := fmt.Sprintf("i%d", i)
		return InstanceConfig{Broker: b.cl.Addr(), Dir: filepath.Join(dir, name), Name: name, Codec: o.Codec, Group: true,
				Session: session, SnapshotEvery: -1, StatusEvery: 10 * time.Millisecond, Router: o.router()},
			func(st InstanceStatus) { tr.observe(name, st) }
	})
	if err != nil {
		return res, err
	}
	res.Extra["settle_s"] = time.Since(t).Seconds()

	// The producer runs until the end; the group works in steady state for
	// a while before the kill.
	hurry := make(chan struct{})
	var hurried sync.Once
	defer hurried.Do(func() { close(hurry) })
	perr := make(chan error, 1)
	go func() { perr <- publishPaced(ctx, b.pub, log, base, log.Len(), rate, hurry) }()
	select {
	case <-time.After(steady):
	case err := <-perr:
		if err == nil {
			err = errors.New("published the whole log before the kill")
		}
		return res, fmt.Errorf("producer: %w", err)
	}
	own, ok := owners(ps, w.Partitions)
	if !ok {
		return res, errors.New("the group is not settled before the kill")
	}
	count := map[*instProc]int{}
	var victim *instProc
	for _, p := range own {
		count[p]++
		if victim == nil || count[p] > count[victim] {
			victim = p
		}
	}
	tr.mu.Lock()
	for i, p := range own {
		tr.parts[i].victims = p == victim
		tr.parts[i].lastBeforeT0 = tr.parts[i].lastMove
	}
	tr.victim = victim.name
	tr.t0 = time.Now()
	t0 := tr.t0
	tr.mu.Unlock()
	res.Extra["moved"] = float64(count[victim])
	stopped := make(chan error, 1)
	if variant == PauseKill {
		victim.kill()
		stopped <- nil
	} else {
		go func() { stopped <- victim.stop() }()
	}

	// Wait until every partition of the victim moves on a survivor.
	limit := 3*session + time.Minute
	for !tr.victimsMoved() {
		for _, p := range ps {
			if p == victim {
				continue
			}
			if err := p.failed(); err != nil {
				return res, err
			}
		}
		if time.Since(t0) > limit {
			return res, fmt.Errorf("the victim's partitions did not move within %v", limit)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case err := <-perr:
			if err != nil {
				return res, fmt.Errorf("producer: %w", err)
			}
			perr <- nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := <-stopped; err != nil {
		return res, err
	}
	// The tail of steady state after the move, then the rest of the log.
	time.Sleep(tail)
	tr.mu.Lock()
	var pause, detect, serve, took, victimGap, survivorGap time.Duration
	var snaps, reuses float64
	for i := range tr.parts {
		pp := &tr.parts[i]
		if pp.victims {
			pause = max(pause, pp.moved.Sub(t0))
			detect = max(detect, pp.restoring.Sub(t0))
			serve = max(serve, pp.serving.Sub(t0))
			took = max(took, pp.took)
			victimGap = max(victimGap, pp.moved.Sub(pp.lastBeforeT0))
			if pp.snapshot {
				snaps++
			}
			if pp.reused {
				reuses++
			}
		} else {
			survivorGap = max(survivorGap, pp.maxGap)
		}
	}
	tr.mu.Unlock()
	res.Seconds = pause.Seconds()
	res.Extra["detect_s"], res.Extra["serving_s"], res.Extra["restore_max_s"] = detect.Seconds(), serve.Seconds(), took.Seconds()
	res.Extra["victim_gap_s"], res.Extra["survivor_max_gap_s"] = victimGap.Seconds(), survivorGap.Seconds()
	res.Extra["from_snapshot"], res.Extra["reused"] = snaps, reuses

	// The rest of the log at once, then check every account.
	hurried.Do(func() { close(hurry) })
	if err := <-perr; err != nil {
		return res, fmt.Errorf("producer: %w", err)
	}
	var live []*instProc
	for _, p := range ps {
		if p != victim {
			live = append(live, p)
		}
	}
	if err := waitSettled(ctx, live, w.Partitions, ends(log), 2*time.Minute); err != nil {
		return res, err
	}
	if err := verifyThroughQuery(ctx, live[0].addr, log); err != nil {
		return res, err
	}
	res.Verified = true
	res.Note = fmt.Sprintf("%d instances, session timeout %v, producer at %.0f events/s; pause = from the %s to the first commit of every partition it served on its new owner",
		n, session, rate, map[string]string{PauseKill: "SIGKILL", PauseLeave: "clean stop"}[variant])
	return res, nil
}

// router is the InstanceConfig.Router of the measurements.
func (o ScaleoutOptions) router() string {
	if o.Router == "" {
		return "own"
	}
	return o.Router
}
