package rebalance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/stream/connector"
)

// The sequence through the real Loop (goroutines, channels), with
// the membership, changelog and processors replaced by recorders and the
// clock by one the test fires: the generation that processed partition 4
// under epoch 1146 ends with a fenced commit of 1146 only after the
// membership regained 4 under 1179. On today's main, that error marked the
// partition lost whatever its epoch and nobody processed it any more.

type fenceErr struct {
	p uint32
	e Epoch
}

func (f fenceErr) Error() string {
	return fmt.Sprintf("commit of partition %d with epoch %d: fenced", f.p, f.e)
}

type membership struct {
	out  chan connector.Assignment
	mu   sync.Mutex
	owns map[uint32]Epoch
}

func (m *membership) Assignments() <-chan connector.Assignment { return m.out }
func (m *membership) Owns(p uint32) (Epoch, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.owns[p]
	return e, ok
}
func (m *membership) set(p uint32, e Epoch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e == 0 {
		delete(m.owns, p)
	} else {
		m.owns[p] = e
	}
}
func (m *membership) HandBack(context.Context, uint32) error { return nil }
func (m *membership) Members() []connector.Member            { return nil }
func (m *membership) Owner(uint32) (connector.Member, Epoch, bool) {
	return connector.Member{}, 0, false
}
func (m *membership) ID() connector.MemberID { return 1 }
func (m *membership) Err() error             { return nil }
func (m *membership) Close() error           { return nil }

// journal records the calls the loop makes, in order.
type journal struct {
	mu    sync.Mutex
	calls []string
	added chan struct{}
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	j.calls = append(j.calls, fmt.Sprintf(format, args...))
	j.mu.Unlock()
	select {
	case j.added <- struct{}{}:
	default:
	}
}

// wait waits until call is in the journal (no sleeps: woken by add).
func (j *journal) wait(t *testing.T, call string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		j.mu.Lock()
		found := slices.Contains(j.calls, call)
		j.mu.Unlock()
		if found {
			return
		}
		select {
		case <-j.added:
		case <-deadline:
			j.mu.Lock()
			defer j.mu.Unlock()
			t.Fatalf("no call %q; calls: %q", call, j.calls)
		}
	}
}

func (j *journal) index(call string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Index(j.calls, call)
}

type changelog struct{ j *journal }

func (c changelog) Restore(_ context.Context, p uint32, e Epoch) error {
	c.j.add("restore %d@%d", p, e)
	return nil
}
func (c changelog) Serve(ctx context.Context, p uint32, e Epoch) error {
	c.j.add("serve %d@%d", p, e)
	<-ctx.Done()
	return ctx.Err()
}
func (c changelog) Flush(_ context.Context, p uint32, e Epoch) error {
	c.j.add("flush %d@%d", p, e)
	return nil
}
func (c changelog) Lost(p uint32, e Epoch) { c.j.add("lost %d@%d", p, e) }

// clock fires timers when the test says so.
type clock struct {
	mu     sync.Mutex
	timers []func()
	added  chan struct{}
}

func (c *clock) AfterFunc(_ time.Duration, f func()) func() bool {
	c.mu.Lock()
	c.timers = append(c.timers, f)
	c.mu.Unlock()
	select {
	case c.added <- struct{}{}:
	default:
	}
	return func() bool { return false }
}

// fireAll waits until a timer is set, then fires every timer set so far.
func (c *clock) fireAll(t *testing.T) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		ts := c.timers
		c.timers = nil
		c.mu.Unlock()
		if len(ts) > 0 {
			for _, f := range ts {
				f()
			}
			return
		}
		select {
		case <-c.added:
		case <-deadline:
			t.Fatal("no timer was set")
		}
	}
}

// loopRig is a Loop running over the recorders above: the journal, the
// membership, the clock the test fires, and the partitions' states as the
// loop last reported them (each report is journaled too: "states [...]").
// Generation g is journaled as "gen g [parts]" when it starts and "gen g
// ended" when stopped, and then returns genErr(g).
type loopRig struct {
	j   *journal
	m   *membership
	clk *clock

	mu     sync.Mutex
	states []PartitionState
	gens   int

	cancel context.CancelFunc
	done   chan error
}

// startLoop starts a Loop over the changelog cl makes (of the rig's
// journal) and returns the rig; genErr may be nil (every generation ends
// with nil).
func startLoop(t *testing.T, cl func(*journal) Changelog, genErr func(g int) error) *loopRig {
	t.Helper()
	r := &loopRig{
		j:   &journal{added: make(chan struct{}, 1)},
		m:   &membership{out: make(chan connector.Assignment), owns: map[uint32]Epoch{}},
		clk: &clock{added: make(chan struct{}, 1)},
	}
	loop, err := NewLoop(Config{
		Membership: r.m,
		Changelog:  cl(r.j),
		Clock:      r.clk,
		Run: func(ctx context.Context, parts []uint32) error {
			r.mu.Lock()
			r.gens++
			g := r.gens
			r.mu.Unlock()
			r.j.add("gen %d %v", g, parts)
			<-ctx.Done()
			r.j.add("gen %d ended", g)
			if genErr != nil {
				return genErr(g)
			}
			return nil
		},
		Fenced: func(err error) (uint32, Epoch, bool) {
			var f fenceErr
			if errors.As(err, &f) {
				return f.p, f.e, true
			}
			return 0, 0, false
		},
		OnChange: func(s []PartitionState) {
			r.mu.Lock()
			r.states = s
			r.mu.Unlock()
			r.j.add("states %v", s)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- loop.Run(ctx) }()
	return r
}

// assign sets the epoch the membership owns p with (owns 0: it does not)
// and hands the loop the assignment of kind for p under e.
func (r *loopRig) assign(kind connector.AssignmentKind, p uint32, e Epoch, owns Epoch) {
	r.m.set(p, owns)
	a := connector.Assignment{Kind: kind, Partition: p, Epoch: e}
	if kind == connector.Lost {
		a.Reason = connector.Expired
	}
	r.m.out <- a
}

// lastStates returns the states the loop last reported.
func (r *loopRig) lastStates() []PartitionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

// stop ends Run and checks that it returned nil.
func (r *loopRig) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestLoopStaleFencedErrorDoesNotEndTheNewEpoch(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := startLoop(t, func(j *journal) Changelog { return changelog{j} }, func(g int) error {
		if g == 1 {
			// Its last commit of 4 failed: epoch 1146 was lost.
			return fenceErr{4, 1146}
		}
		return nil
	})
	j := r.j

	r.assign(connector.Gained, 4, 1146, 1146)
	j.wait(t, "serve 4@1146")
	r.clk.fireAll(t) // the burst timer
	j.wait(t, "gen 1 [4]")

	r.assign(connector.Lost, 4, 1146, 0)
	r.assign(connector.Gained, 4, 1179, 1179)
	j.wait(t, "serve 4@1179")
	if gEnd, rs := j.index("gen 1 ended"), j.index("restore 4@1179"); gEnd < 0 || gEnd > rs {
		t.Errorf("epoch 1179 was restored before the generation of 1146 stopped: %q", j.calls)
	}
	r.clk.fireAll(t) // the burst timer
	j.wait(t, "gen 2 [4]")
	if i := j.index("lost 4@1179"); i >= 0 {
		t.Errorf("the fenced error of epoch 1146 ended epoch 1179: %q", j.calls)
	}
	if got, want := r.lastStates(), []PartitionState{{P: 4, Phase: Serving, Epoch: 1179, Current: true}}; !slices.Equal(got, want) {
		t.Errorf("states %v, want %v", got, want)
	}
	r.stop(t)
	j.wait(t, "flush 4@1179")
	j.wait(t, "lost 4@1179") // at the stop, not before
}
