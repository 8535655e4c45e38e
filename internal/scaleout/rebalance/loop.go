package rebalance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/strand-io/strand/stream/connector"
)

// Clock makes timers. Loop takes one so that tests can fire timers when
// they choose; SystemClock is the real one.
type Clock interface {
	// AfterFunc calls f in its own goroutine after d; stop cancels it
	// (reporting whether it did).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the Clock of package time.
type SystemClock struct{}

// AfterFunc implements Clock with time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Changelog is what Loop needs of the changelog of the partitions the
// instance owns (internal/scaleout/changelog's Changelog). Every call names the epoch
// it acts for; a call for an epoch the partition is not kept under any
// more does nothing (Lost) or fails as fenced.
type Changelog interface {
	// Restore rebuilds p's rows under epoch e (docs/design.md §15).
	Restore(ctx context.Context, p uint32, e Epoch) error
	// Serve publishes and confirms p's commits under e until ctx ends or
	// it is fenced.
	Serve(ctx context.Context, p uint32, e Epoch) error
	// Flush waits until every commit of p under e is confirmed.
	Flush(ctx context.Context, p uint32, e Epoch) error
	// Lost ends p's logging under e: its commits fail as fenced from now
	// on, and it is forgotten. A newer epoch's is untouched.
	Lost(p uint32, e Epoch)
}

// Config is what a Loop drives.
type Config struct {
	// Membership is the instance's membership of its group.
	Membership connector.Membership
	// Changelog keeps the owned partitions' changelogs.
	Changelog Changelog
	// Run runs the processors over parts until ctx ends (nil) or they
	// fail.
	Run func(ctx context.Context, parts []uint32) error
	// Fenced reports whether err (Run's, Restore's or Serve's, one of
	// the errors it joins) says the partition's work ended because it is
	// fenced, for which partition, and with the epoch the error belongs
	// to (0: it does not say).
	Fenced func(err error) (p uint32, e Epoch, ok bool)
	// Retryable reports whether a generation's failure err (not a
	// fencing) is worth another generation, such as a source that could
	// not be opened during a broker outage (may be nil: none is).
	Retryable func(err error) bool
	// Clock makes the timers (default SystemClock).
	Clock Clock
	// Log gets the loop's diagnostics (default slog.Default).
	Log *slog.Logger
	// OnChange is told the partitions' states after every change (may
	// be nil). It is called from the loop's goroutine.
	OnChange func([]PartitionState)
	// FlushTimeout bounds the flush of a revoked partition's changelog
	// (default 10s); HandBackTimeout its hand-back (default 10s);
	// LeaveTimeout the flush of every partition when the loop stops
	// (default 5s).
	FlushTimeout, HandBackTimeout, LeaveTimeout time.Duration
	// Standbys is how many standby copies of each partition the group
	// keeps (docs/design.md §15, "Standbys"); 0: none. With Standbys,
	// Changelog must be a StandbyChangelog and Partitions the group's
	// partition count.
	Standbys   int
	Partitions uint32
	// StandbyEvery is how often the standby assignment is computed again
	// from the membership besides every assignment (default 250ms).
	StandbyEvery time.Duration
}

// Loop drives a Node: it feeds it the membership's assignments and the
// results of the work it started, and carries out its actions, owning
// every goroutine and timer.
type Loop struct {
	cfg  Config
	node *Node
	log  *slog.Logger

	events chan Event
	done   chan struct{} // closed when Run returns: posts stop
	wg     sync.WaitGroup

	tasks  map[uint32]*task // the restore, changelog or standby task of each partition
	gen    *runningGen
	timers map[Timer]func() bool

	// standbys: the set last handed to the node (loop_standby.go);
	// tick stops the standby timer.
	standbys []uint32
	tick     func() bool
}

type task struct {
	epoch  Epoch
	cancel context.CancelFunc
	done   chan struct{}
}

type runningGen struct {
	id     uint64
	cancel context.CancelFunc
	ended  chan Event // GenerationEnded, once
}

// flushed is a Loop-internal event: a revoked partition's flush ended.
const flushed EventKind = 200

// NewLoop returns a Loop over cfg.
func NewLoop(cfg Config) (*Loop, error) {
	if cfg.Membership == nil || cfg.Changelog == nil || cfg.Run == nil || cfg.Fenced == nil {
		return nil, errors.New("strand: NewLoop needs a Membership, a Changelog, Run and Fenced")
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 10 * time.Second
	}
	if cfg.HandBackTimeout <= 0 {
		cfg.HandBackTimeout = 10 * time.Second
	}
	if cfg.LeaveTimeout <= 0 {
		cfg.LeaveTimeout = 5 * time.Second
	}
	if cfg.Standbys < 0 {
		return nil, fmt.Errorf("strand: %d standbys, want 0 or more", cfg.Standbys)
	}
	if cfg.Standbys > 0 {
		if _, ok := cfg.Changelog.(StandbyChangelog); !ok {
			return nil, fmt.Errorf("strand: standbys need a changelog that keeps standby copies (%T does not)", cfg.Changelog)
		}
		if cfg.Partitions == 0 {
			return nil, errors.New("strand: standbys need the group's partition count")
		}
	}
	if cfg.StandbyEvery <= 0 {
		cfg.StandbyEvery = 250 * time.Millisecond
	}
	return &Loop{cfg: cfg, node: NewNode(), log: cfg.Log, events: make(chan Event, 64),
		done: make(chan struct{}), tasks: map[uint32]*task{}, timers: map[Timer]func() bool{}}, nil
}

// post hands an event to the loop, unless it returned.
func (l *Loop) post(ev Event) {
	select {
	case l.events <- ev:
	case <-l.done:
	}
}

// Run drives the node until ctx ends (nil), the membership ends (its Err)
// or a generation fails (its error). Before it returns, the generation
// stops (batches in flight commit), every serving partition's changelog is
// flushed (bounded by LeaveTimeout) and every partition's work ends. Run
// may be called once.
func (l *Loop) Run(ctx context.Context) (err error) {
	defer func() {
		close(l.done)
		for _, stop := range l.timers {
			stop()
		}
		if l.tick != nil {
			l.tick()
		}
		l.leave()
		l.wg.Wait()
	}()
	asg := l.cfg.Membership.Assignments()
	if err := l.startStandbys(ctx); err != nil {
		return err
	}
	for {
		var genEnded chan Event
		if l.gen != nil {
			genEnded = l.gen.ended
		}
		select {
		case <-ctx.Done():
			return nil
		case ev := <-genEnded:
			l.gen = nil
			if err := l.step(ctx, ev); err != nil {
				return err
			}
		case a, ok := <-asg:
			if !ok {
				if merr := l.cfg.Membership.Err(); merr != nil {
					return fmt.Errorf("the group membership ended: %w", merr)
				}
				return nil
			}
			l.log.Info("strand: assignment", "kind", a.Kind.String(), "partition", a.Partition, "epoch", a.Epoch, "reason", a.Reason.String())
			var k EventKind
			switch a.Kind {
			case connector.Gained:
				k = Gained
			case connector.Revoking:
				k = Revoking
			case connector.Lost:
				k = Lost
			default:
				continue
			}
			if err := l.step(ctx, Event{Kind: k, P: a.Partition, Epoch: a.Epoch}); err != nil {
				return err
			}
			if err := l.refreshStandbys(ctx); err != nil {
				return err
			}
		case ev := <-l.events:
			if ev.Kind == flushed {
				l.handBack(ctx, ev.P, ev.Epoch)
				continue
			}
			if ev.Kind == standbyTick {
				if err := l.refreshStandbys(ctx); err != nil {
					return err
				}
				l.armTick()
				continue
			}
			if ev.Kind == TimerFired {
				delete(l.timers, ev.Timer)
				if ev.Timer.Kind != Burst {
					e, ok := l.cfg.Membership.Owns(ev.Timer.P)
					ev.StillOwned = ok && e == ev.Timer.Epoch
				}
			}
			if err := l.step(ctx, ev); err != nil {
				return err
			}
		}
	}
}

// step steps the node and carries out what it asks for.
func (l *Loop) step(ctx context.Context, ev Event) error {
	l.node.Step(ev)
	var failed error
	for _, a := range l.node.Ready() {
		l.log.Debug("strand: rebalance", "event", ev.Kind.String(), "action", a.String())
		if err := l.act(ctx, a); err != nil && failed == nil {
			failed = err
		}
	}
	if l.cfg.OnChange != nil {
		l.cfg.OnChange(l.node.Partitions())
	}
	return failed
}

func (l *Loop) act(ctx context.Context, a Action) error {
	switch a.Kind {
	case StartRestore:
		l.startRestore(ctx, a.P, a.Epoch)
	case StartServe:
		l.startServe(ctx, a.P, a.Epoch)
	case StopPartition:
		l.stopPartition(a.P, a.Epoch)
	case HandBack:
		l.startHandBack(ctx, a.P, a.Epoch, a.Flush)
	case StartGeneration:
		l.startGen(ctx, a.Gen, a.Parts)
	case StopGeneration:
		if l.gen != nil && l.gen.id == a.Gen {
			l.gen.cancel()
		}
	case SetTimer:
		t := a.Timer
		if stop := l.timers[t]; stop != nil {
			stop()
		}
		l.timers[t] = l.cfg.Clock.AfterFunc(a.After, func() { l.post(Event{Kind: TimerFired, Timer: t}) })
	case Fail:
		return a.Err
	case StartStandby:
		l.startStandby(ctx, a.P)
	case StopStandby:
		l.stopTask(a.P, 0)
	}
	return nil
}

// stopTask cancels p's task of epoch e and waits for it.
func (l *Loop) stopTask(p uint32, e Epoch) {
	if t := l.tasks[p]; t != nil && t.epoch == e {
		t.cancel()
		<-t.done
		delete(l.tasks, p)
	}
}

func (l *Loop) stopPartition(p uint32, e Epoch) {
	t := l.tasks[p]
	if t != nil && t.epoch == e {
		t.cancel() // first, so that the task does not report the loss below
	}
	l.cfg.Changelog.Lost(p, e)
	l.stopTask(p, e)
	// A restore that finished while it was being cancelled may have kept
	// p under e after the Lost above: end that too (else the changelog
	// keeps a partition the node dropped, and its standby copy cannot
	// start).
	l.cfg.Changelog.Lost(p, e)
}

func (l *Loop) startTask(parent context.Context, p uint32, e Epoch, fn func(ctx context.Context) Event) {
	if t := l.tasks[p]; t != nil {
		// The node stops a partition's work before it starts new work
		// on it; a task still here is of the same epoch (a serve after
		// its restore) and has ended.
		t.cancel()
		<-t.done
	}
	ctx, cancel := context.WithCancel(parent)
	t := &task{epoch: e, cancel: cancel, done: make(chan struct{})}
	l.tasks[p] = t
	l.wg.Go(func() {
		defer close(t.done)
		ev := fn(ctx)
		// A task cancelled by the loop reports nothing: the loop may be
		// waiting for it to end (stopTask).
		select {
		case <-ctx.Done():
		default:
			select {
			case l.events <- ev:
			case <-ctx.Done():
			case <-l.done:
			}
		}
	})
}

func (l *Loop) classify(err error) (fenced bool, rest error) {
	if err == nil {
		return false, nil
	}
	var others []error
	for _, e := range flatten(err) {
		if _, _, ok := l.cfg.Fenced(e); ok {
			fenced = true
			continue
		}
		others = append(others, e)
	}
	return fenced, errors.Join(others...)
}

func (l *Loop) startRestore(ctx context.Context, p uint32, e Epoch) {
	l.startTask(ctx, p, e, func(ctx context.Context) Event {
		err := l.cfg.Changelog.Restore(ctx, p, e)
		fenced, rest := l.classify(err)
		switch {
		case fenced:
			l.log.Warn("strand: partition fenced while restoring", "partition", p, "epoch", e, "err", err)
		case rest != nil && ctx.Err() == nil:
			l.log.Error("strand: restore failed; trying again", "partition", p, "epoch", e, "err", err)
		}
		return Event{Kind: Restored, P: p, Epoch: e, Fenced: fenced, Err: rest}
	})
}

func (l *Loop) startServe(ctx context.Context, p uint32, e Epoch) {
	// A partition's changelog outlives Run's context: at a stop it is
	// flushed after the processors stopped (leave), then cancelled.
	l.startTask(context.WithoutCancel(ctx), p, e, func(ctx context.Context) Event {
		err := l.cfg.Changelog.Serve(ctx, p, e)
		fenced, rest := l.classify(err)
		if ctx.Err() != nil {
			// stopped by the loop: nothing to report
		} else if fenced {
			l.log.Warn("strand: partition fenced; dropping it", "partition", p, "epoch", e, "err", err)
		} else {
			l.log.Error("strand: changelog of a partition failed; restoring it again", "partition", p, "epoch", e, "err", err)
		}
		return Event{Kind: ServeEnded, P: p, Epoch: e, Fenced: fenced, Err: rest}
	})
}

// startHandBack flushes p's changelog (if flush) in the background; the
// loop then stops p's work and hands it back (handBack).
func (l *Loop) startHandBack(ctx context.Context, p uint32, e Epoch, flush bool) {
	if !flush {
		l.handBack(ctx, p, e)
		return
	}
	l.wg.Go(func() {
		fctx, cancel := context.WithTimeout(ctx, l.cfg.FlushTimeout)
		defer cancel()
		if err := l.cfg.Changelog.Flush(fctx, p, e); err != nil {
			l.log.Warn("strand: changelog of a revoked partition not confirmed in time; its last commits are redone by the next owner", "partition", p, "epoch", e, "err", err)
		} else {
			l.log.Info("strand: changelog of a revoked partition flushed", "partition", p, "epoch", e)
		}
		l.post(Event{Kind: flushed, P: p, Epoch: e})
	})
}

// handBack stops p's work under e and hands p back in the membership, in the
// background; HandedBack follows.
func (l *Loop) handBack(ctx context.Context, p uint32, e Epoch) {
	st := l.node.Partition(p)
	if st.Phase != HandingBack || st.Epoch != e {
		// lost meanwhile: nothing of e to hand back (logged: a partition
		// left listed after a revoke must be traceable, issue 34)
		l.log.Info("strand: revoked partition flushed; its hand-back is no longer wanted", "partition", p, "epoch", e,
			"phase", st.Phase.String(), "phase_epoch", st.Epoch)
		return
	}
	l.stopPartition(p, e)
	l.wg.Go(func() {
		if cur, ok := l.cfg.Membership.Owns(p); ok && cur == e {
			rctx, cancel := context.WithTimeout(ctx, l.cfg.HandBackTimeout)
			if err := l.cfg.Membership.HandBack(rctx, p); err != nil {
				l.log.Warn("strand: hand back failed", "partition", p, "epoch", e, "err", err)
			}
			cancel()
		} else {
			l.log.Info("strand: revoked partition stopped; the membership no longer grants it, nothing to hand back", "partition", p, "epoch", e)
		}
		l.post(Event{Kind: HandedBack, P: p, Epoch: e})
	})
}

func (l *Loop) startGen(ctx context.Context, id uint64, parts []PartitionEpoch) {
	gctx, cancel := context.WithCancel(ctx)
	g := &runningGen{id: id, cancel: cancel, ended: make(chan Event, 1)}
	l.gen = g
	ps := make([]uint32, len(parts))
	epochs := map[uint32]Epoch{}
	for i, pe := range parts {
		ps[i] = pe.P
		epochs[pe.P] = pe.Epoch
	}
	l.log.Info("strand: processing partitions", "generation", id, "partitions", ps)
	l.wg.Go(func() {
		err := l.cfg.Run(gctx, ps)
		cancel()
		ev := Event{Kind: GenerationEnded, Gen: id}
		var rest []error
		for _, e := range flattenNonNil(err) {
			if p, ep, ok := l.cfg.Fenced(e); ok {
				if _, in := epochs[p]; in {
					if ep == 0 {
						ep = epochs[p]
					}
					if ep == epochs[p] {
						l.log.Warn("strand: partition fenced while processing", "partition", p, "epoch", ep, "generation", id)
					} else {
						l.log.Info("strand: a fenced error of an older epoch; ignored", "partition", p, "epoch", ep, "generation", id)
					}
					ev.FencedParts = append(ev.FencedParts, PartitionEpoch{P: p, Epoch: ep})
					continue
				}
			}
			rest = append(rest, e)
		}
		ev.Err = errors.Join(rest...)
		if len(rest) > 0 && l.cfg.Retryable != nil {
			ev.Retryable = true
			for _, e := range rest {
				ev.Retryable = ev.Retryable && l.cfg.Retryable(e)
			}
			if ev.Retryable {
				l.log.Warn("strand: a generation could not start; starting it again", "generation", id, "err", ev.Err)
			}
		}
		g.ended <- ev
	})
}

// leave ends the loop's work: the generation stops (its batches commit),
// every partition whose rows are current has its changelog flushed
// (bounded), and every partition's work ends.
func (l *Loop) leave() {
	if l.gen != nil {
		l.gen.cancel()
		if ev := <-l.gen.ended; ev.Err != nil {
			l.log.Warn("strand: the last generation failed while stopping", "err", ev.Err)
		}
		l.gen = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.LeaveTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, st := range l.node.Partitions() {
		p, e := st.P, st.Epoch
		flush := st.Current
		t := l.tasks[p]
		delete(l.tasks, p)
		wg.Go(func() {
			if flush {
				if err := l.cfg.Changelog.Flush(ctx, p, e); err != nil {
					l.log.Warn("strand: changelog not confirmed at stop; the next owner redoes the last commits", "partition", p, "err", err)
				}
			}
			if t != nil {
				t.cancel()
			}
			l.cfg.Changelog.Lost(p, e)
			if t != nil {
				<-t.done
			}
		})
	}
	wg.Wait()
	for p, t := range l.tasks {
		t.cancel()
		<-t.done
		delete(l.tasks, p)
	}
}

func flattenNonNil(err error) []error {
	if err == nil {
		return nil
	}
	return flatten(err)
}

// flatten returns the errors err joins (itself if it joins none).
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
