// Package rebalance is what one instance of a group does with the
// partitions the group gives it (docs/design.md §15): restore a partition it
// gains from the partition's changelog, process it, flush and hand it back
// when it is revoked, drop it when it is lost, and run the processors over
// the partitions it serves, one generation at a time.
//
// Node is a pure state machine in the shape of etcd raft's RawNode: events
// go in (Step: an assignment of the membership, a restore or a changelog
// task that ended, a generation of the processors that ended, a timer that
// fired), actions come out (Ready: start a restore, stop a partition's
// tasks, start or stop a generation, set a timer, fail). It does no I/O,
// starts no goroutine and reads no clock, so every scenario can be scripted
// and replayed deterministically (node_test.go). Loop drives a Node: it owns
// the goroutines, the timers (through a Clock) and the calls into the
// changelog, the processors and the membership.
//
// The rule that keeps a partition from being processed by nobody (issue 28,
// item 1): everything that ends a partition's work carries the epoch it
// belongs to, and an event of an older epoch never ends a newer one's work.
// The rule that keeps two epochs from mixing: a partition is restored under
// a new epoch only once no generation that processes it under an older one
// runs any more.
package rebalance

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/strand-io/strand/stream/connector"
)

// Epoch is connector.Epoch.
type Epoch = connector.Epoch

// Phase is what the instance does with one partition.
type Phase uint8

const (
	// NotOwned: the partition is not this instance's (or it dropped it).
	NotOwned Phase = iota
	// Pending: gained (or to be restored again), waiting for a generation
	// that still processes it under an older epoch to stop.
	Pending
	// Restoring: its rows are being rebuilt from its changelog.
	Restoring
	// Retrying: a restore or its changelog task failed; it is restored
	// again after RetryAfter if the membership still grants it.
	Retrying
	// Serving: restored; its changelog task runs and the generations
	// process it.
	Serving
	// HandingBack: revoked; once no generation processes it, its
	// changelog is flushed and it is handed back.
	HandingBack
)

func (p Phase) String() string {
	switch p {
	case NotOwned:
		return "not-owned"
	case Pending:
		return "pending"
	case Restoring:
		return "restoring"
	case Retrying:
		return "retrying"
	case Serving:
		return "serving"
	case HandingBack:
		return "handing-back"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Delays the Node asks timers for.
const (
	// BurstAfter lets a burst of changes in before the generation
	// changes (one stop per burst).
	BurstAfter = 20 * time.Millisecond
	// RetryAfter is the pause before a failed restore or changelog task
	// of a partition still owned is tried again, before a partition
	// dropped because its changelog said it was fenced is checked again,
	// and before a generation that failed to start is started again.
	RetryAfter = time.Second
)

// MaxGenerationRetries is how many generations in a row may fail with a
// retryable error (Event.Retryable: the source could not be opened, as
// during a broker outage) before the Node fails. A broker outage longer
// than the session timeout ends every claim anyway, after which no
// generation runs until the partitions are regained.
const MaxGenerationRetries = 30

// EventKind says what an Event reports.
type EventKind uint8

const (
	// Gained: the membership granted P with Epoch.
	Gained EventKind = iota + 1
	// Revoking: the membership asks to give P (held with Epoch) up.
	Revoking
	// Lost: P, held with Epoch, is no longer this instance's.
	Lost
	// Restored: the restore of P under Epoch ended (Fenced, Err: how).
	Restored
	// ServeEnded: the changelog task of P under Epoch ended on its own.
	ServeEnded
	// HandedBack: the hand-back of P under Epoch (action HandBack) is done.
	HandedBack
	// GenerationEnded: generation Gen ended (stopped or failed); Fenced
	// lists the partitions whose work it ended because their changelog
	// said they were fenced, each with the epoch the error belongs to;
	// Err is any other failure.
	GenerationEnded
	// TimerFired: the timer Timer fired; StillOwned is whether the
	// membership grants Timer.P with Timer.Epoch now.
	TimerFired
	// StandbySet: Standby lists every partition this instance is to keep
	// a standby copy of now (membership.Standbys); it replaces the last.
	StandbySet
	// StandbyEnded: the standby task of P ended on its own (Err).
	StandbyEnded
)

func (k EventKind) String() string {
	switch k {
	case Gained:
		return "gained"
	case Revoking:
		return "revoking"
	case Lost:
		return "lost"
	case Restored:
		return "restored"
	case ServeEnded:
		return "serve-ended"
	case HandedBack:
		return "handed-back"
	case GenerationEnded:
		return "generation-ended"
	case TimerFired:
		return "timer"
	case StandbySet:
		return "standbys"
	case StandbyEnded:
		return "standby-ended"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// PartitionEpoch is a partition and the epoch it is held with.
type PartitionEpoch struct {
	P     uint32
	Epoch Epoch
}

func (pe PartitionEpoch) String() string { return fmt.Sprintf("%d@%d", pe.P, pe.Epoch) }

// Event is one input of a Node.
type Event struct {
	Kind  EventKind
	P     uint32
	Epoch Epoch
	// Fenced (Restored, ServeEnded): the work ended because the
	// partition's changelog holds a newer fence or the membership no
	// longer grants it with Epoch.
	Fenced bool
	// Err (Restored, ServeEnded, GenerationEnded): a failure other than
	// fencing.
	Err error
	// Retryable (GenerationEnded): Err is worth another generation (the
	// source could not be opened), up to MaxGenerationRetries in a row.
	Retryable bool
	// Gen and FencedParts: GenerationEnded.
	Gen         uint64
	FencedParts []PartitionEpoch
	// Timer and StillOwned: TimerFired.
	Timer      Timer
	StillOwned bool
	// Standby: StandbySet.
	Standby []uint32
}

// TimerKind says what a timer is for.
type TimerKind uint8

const (
	// Burst: a burst of changes is in; change the generation.
	Burst TimerKind = iota + 1
	// Retry: restore P again (phase Retrying) if still owned.
	Retry
	// Recheck: P was dropped because its changelog said it was fenced;
	// if the membership still grants it with the same epoch, restore it
	// again rather than leave it processed by nobody.
	Recheck
	// StandbyRetry: the standby task of P failed a while ago; start it
	// again if it is still wanted.
	StandbyRetry
)

func (k TimerKind) String() string {
	switch k {
	case Burst:
		return "burst"
	case Retry:
		return "retry"
	case Recheck:
		return "recheck"
	case StandbyRetry:
		return "standby-retry"
	}
	return fmt.Sprintf("TimerKind(%d)", uint8(k))
}

// Timer names a timer: its kind and, for Retry and Recheck, the partition
// and epoch it is about.
type Timer struct {
	Kind  TimerKind
	P     uint32
	Epoch Epoch
}

func (t Timer) String() string {
	if t.Kind == Burst {
		return t.Kind.String()
	}
	if t.Kind == StandbyRetry {
		return fmt.Sprintf("%s %d", t.Kind, t.P)
	}
	return fmt.Sprintf("%s %d@%d", t.Kind, t.P, t.Epoch)
}

// ActionKind says what an Action asks for.
type ActionKind uint8

const (
	// StartRestore: restore P under Epoch (in the background); report
	// Restored.
	StartRestore ActionKind = iota + 1
	// StartServe: start P's changelog task under Epoch (in the
	// background); report ServeEnded if it ends on its own.
	StartServe
	// StopPartition: P's work under Epoch ends now: mark its changelog
	// lost for Epoch, cancel its restore or changelog task and wait for
	// it, forget it. Done before the next action.
	StopPartition
	// HandBack: give P (held with Epoch) up, in the background: flush its
	// changelog first if Flush (bounded), stop its tasks as
	// StopPartition, then hand it back in the membership; report HandedBack.
	HandBack
	// StartGeneration: run the processors over Parts as generation Gen
	// (in the background); report GenerationEnded when it ends.
	StartGeneration
	// StopGeneration: stop generation Gen (batches in flight commit);
	// GenerationEnded follows.
	StopGeneration
	// SetTimer: report TimerFired with Timer after After.
	SetTimer
	// Fail: stop; Run returns Err.
	Fail
	// StartStandby: start P's standby task (in the background): it
	// keeps a standby copy of P current from P's changelog; report
	// StandbyEnded if it ends on its own.
	StartStandby
	// StopStandby: stop P's standby task and wait for it. Done before
	// the next action.
	StopStandby
)

func (k ActionKind) String() string {
	switch k {
	case StartRestore:
		return "restore"
	case StartServe:
		return "serve"
	case StopPartition:
		return "stop"
	case HandBack:
		return "hand-back"
	case StartGeneration:
		return "start-gen"
	case StopGeneration:
		return "stop-gen"
	case SetTimer:
		return "timer"
	case Fail:
		return "fail"
	case StartStandby:
		return "start-standby"
	case StopStandby:
		return "stop-standby"
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one output of a Node, to be carried out in order.
type Action struct {
	Kind  ActionKind
	P     uint32
	Epoch Epoch
	Flush bool // HandBack
	// Gen and Parts: StartGeneration, StopGeneration.
	Gen   uint64
	Parts []PartitionEpoch
	// Timer and After: SetTimer.
	Timer Timer
	After time.Duration
	Err   error // Fail
}

// String is a compact form for logs and scripted tests: "restore 4@7",
// "start-gen 2 [0@3 4@7]", "timer retry 4@7 1s".
func (a Action) String() string {
	switch a.Kind {
	case StartRestore, StartServe, StopPartition:
		return fmt.Sprintf("%s %d@%d", a.Kind, a.P, a.Epoch)
	case HandBack:
		if a.Flush {
			return fmt.Sprintf("hand-back %d@%d flush", a.P, a.Epoch)
		}
		return fmt.Sprintf("hand-back %d@%d", a.P, a.Epoch)
	case StartGeneration:
		ps := make([]string, len(a.Parts))
		for i, pe := range a.Parts {
			ps[i] = pe.String()
		}
		return fmt.Sprintf("start-gen %d [%s]", a.Gen, strings.Join(ps, " "))
	case StopGeneration:
		return fmt.Sprintf("stop-gen %d", a.Gen)
	case SetTimer:
		return fmt.Sprintf("timer %s %v", a.Timer, a.After)
	case Fail:
		return fmt.Sprintf("fail: %v", a.Err)
	case StartStandby, StopStandby:
		return fmt.Sprintf("%s %d", a.Kind, a.P)
	}
	return a.Kind.String()
}

// PartitionState is one partition as the Node sees it.
type PartitionState struct {
	P     uint32
	Phase Phase
	Epoch Epoch
	// Current: the store's rows of P are the partition's (it is Serving,
	// or HandingBack after it served).
	Current bool
}

type part struct {
	phase Phase
	epoch Epoch
	// handBack: in phase HandingBack, the hand-back was asked for already
	// (else it waits for the generation to stop).
	handBack bool
	flush    bool // the hand-back flushes the changelog first
}

type generation struct {
	id       uint64
	parts    map[uint32]Epoch
	stopping bool
}

// Node is the rebalancing state machine of one instance. The zero value
// is not usable; make one with NewNode. A Node is not safe for concurrent
// use: one goroutine (Loop's) steps it.
type Node struct {
	parts    map[uint32]*part
	gen      *generation
	nextGen  uint64
	bursting bool // a Burst timer is set
	failed   bool
	// genFailures counts the generations in a row that failed with a
	// retryable error.
	genFailures int
	ready       []Action
	// wantStandby: the partitions to keep standby copies of (the last
	// StandbySet); standby: each one's task (standby.go).
	wantStandby map[uint32]bool
	standby     map[uint32]*standbyPart
}

// NewNode returns a Node that owns nothing.
func NewNode() *Node {
	return &Node{parts: map[uint32]*part{}, standby: map[uint32]*standbyPart{}}
}

// Ready returns the actions the events stepped so far ask for, in the
// order they must be carried out, and forgets them.
func (n *Node) Ready() []Action {
	out := n.ready
	n.ready = nil
	return out
}

// Partitions returns every partition the Node holds in some phase (not
// NotOwned), in partition order.
func (n *Node) Partitions() []PartitionState {
	out := make([]PartitionState, 0, len(n.parts))
	for _, p := range slices.Sorted(maps.Keys(n.parts)) {
		if st := n.parts[p]; st.phase != NotOwned {
			out = append(out, st.state(p))
		}
	}
	return out
}

// Partition returns partition p's phase and epoch (NotOwned: the last
// epoch it was held with, or 0).
func (n *Node) Partition(p uint32) PartitionState {
	if st := n.parts[p]; st != nil {
		return st.state(p)
	}
	return PartitionState{P: p}
}

func (st *part) state(p uint32) PartitionState {
	return PartitionState{P: p, Phase: st.phase, Epoch: st.epoch,
		Current: st.phase == Serving || st.phase == HandingBack && st.flush}
}

// Generation returns the running generation's number and partitions (0
// and nil when none runs).
func (n *Node) Generation() (uint64, []PartitionEpoch) {
	if n.gen == nil {
		return 0, nil
	}
	return n.gen.id, sortedParts(n.gen.parts)
}

func (n *Node) emit(a Action) { n.ready = append(n.ready, a) }

func (n *Node) get(p uint32) *part {
	st := n.parts[p]
	if st == nil {
		st = &part{}
		n.parts[p] = st
	}
	return st
}

// inGen reports whether the running generation processes p (under any
// epoch).
func (n *Node) inGen(p uint32) bool {
	if n.gen == nil {
		return false
	}
	_, ok := n.gen.parts[p]
	return ok
}

// stopGen asks the running generation to stop now.
func (n *Node) stopGen() {
	if n.gen != nil && !n.gen.stopping {
		n.gen.stopping = true
		n.emit(Action{Kind: StopGeneration, Gen: n.gen.id})
	}
}

// burst asks for a Burst timer unless one is set.
func (n *Node) burst() {
	if !n.bursting {
		n.bursting = true
		n.emit(Action{Kind: SetTimer, Timer: Timer{Kind: Burst}, After: BurstAfter})
	}
}

// Step applies one event.
func (n *Node) Step(ev Event) {
	if n.failed {
		return
	}
	switch ev.Kind {
	case Gained:
		n.gained(ev.P, ev.Epoch)
	case Revoking:
		n.revoking(ev.P, ev.Epoch)
	case Lost:
		n.lost(ev.P, ev.Epoch)
	case Restored:
		n.restored(ev)
	case ServeEnded:
		n.serveEnded(ev)
	case HandedBack:
		if st := n.parts[ev.P]; st != nil && st.phase == HandingBack && st.epoch == ev.Epoch {
			// Nothing of the hand-back survives into a later epoch of
			// the partition (issue 34: a stale handBack made the next
			// revocation wait for a hand-back never asked for).
			st.phase, st.handBack, st.flush = NotOwned, false, false
		}
	case GenerationEnded:
		n.generationEnded(ev)
	case TimerFired:
		n.timer(ev.Timer, ev.StillOwned)
	case StandbySet:
		n.setStandbys(ev.Standby)
	case StandbyEnded:
		n.standbyEnded(ev.P)
	}
	if !n.failed {
		n.syncStandbys()
	}
}

// drop ends p's work under its epoch: its tasks stop, it is not owned.
func (n *Node) drop(p uint32, st *part) {
	n.emit(Action{Kind: StopPartition, P: p, Epoch: st.epoch})
	if st.phase == Serving {
		n.burst()
	}
	st.phase, st.handBack, st.flush = NotOwned, false, false
}

// restore restores p under st.epoch now, or once no generation processes
// p any more.
func (n *Node) restore(p uint32, st *part) {
	n.stopStandby(p) // a restore and a standby never write p at once
	if n.inGen(p) {
		st.phase = Pending
		n.stopGen()
		return
	}
	st.phase = Restoring
	n.emit(Action{Kind: StartRestore, P: p, Epoch: st.epoch})
}

func (n *Node) gained(p uint32, e Epoch) {
	st := n.get(p)
	if st.phase != NotOwned {
		if e <= st.epoch {
			return // a grant we already act on, or an older one
		}
		// Gained again under a newer epoch: the old epoch's work ends
		// first.
		n.drop(p, st)
	} else if e < st.epoch {
		return
	}
	st.epoch = e
	n.restore(p, st)
}

func (n *Node) revoking(p uint32, e Epoch) {
	st := n.parts[p]
	if st == nil || st.phase == NotOwned || st.epoch != e || st.phase == HandingBack {
		return
	}
	// The hand-back is asked for once no generation processes p (here,
	// or when the running one ended): never before this revocation.
	st.phase, st.handBack, st.flush = HandingBack, false, st.phase == Serving
	if n.inGen(p) {
		// Its commits stop before its changelog is flushed (Serving);
		// Pending, Restoring, Retrying: nothing of it to flush.
		n.stopGen()
		return
	}
	st.handBack = true
	n.emit(Action{Kind: HandBack, P: p, Epoch: e, Flush: st.flush})
	n.burst()
}

func (n *Node) lost(p uint32, e Epoch) {
	st := n.parts[p]
	if st == nil || st.phase == NotOwned || st.epoch != e {
		return // the loss of an epoch whose work already ended
	}
	if st.phase == HandingBack && st.handBack {
		return // the hand-back in flight ends it (HandedBack follows)
	}
	n.drop(p, st)
}

func (n *Node) restored(ev Event) {
	st := n.parts[ev.P]
	if st == nil || st.phase != Restoring || st.epoch != ev.Epoch {
		return // a restore of an older epoch, already stopped
	}
	switch {
	case ev.Fenced:
		n.drop(ev.P, st)
		n.emit(Action{Kind: SetTimer, Timer: Timer{Kind: Recheck, P: ev.P, Epoch: ev.Epoch}, After: RetryAfter})
	case ev.Err != nil:
		st.phase = Retrying
		n.emit(Action{Kind: SetTimer, Timer: Timer{Kind: Retry, P: ev.P, Epoch: ev.Epoch}, After: RetryAfter})
	default:
		st.phase = Serving
		n.emit(Action{Kind: StartServe, P: ev.P, Epoch: ev.Epoch})
		n.burst()
	}
}

func (n *Node) serveEnded(ev Event) {
	st := n.parts[ev.P]
	if st == nil || st.phase != Serving || st.epoch != ev.Epoch {
		return // the changelog task of an older epoch
	}
	n.drop(ev.P, st)
	if ev.Fenced {
		n.emit(Action{Kind: SetTimer, Timer: Timer{Kind: Recheck, P: ev.P, Epoch: ev.Epoch}, After: RetryAfter})
		return
	}
	// Still ours: restore it again (the store may be ahead of the
	// changelog), after a pause.
	st.phase = Retrying
	n.emit(Action{Kind: SetTimer, Timer: Timer{Kind: Retry, P: ev.P, Epoch: ev.Epoch}, After: RetryAfter})
}

func (n *Node) generationEnded(ev Event) {
	if n.gen == nil || n.gen.id != ev.Gen {
		return
	}
	g := n.gen
	n.gen = nil
	retry := false
	switch {
	case ev.Err == nil:
		n.genFailures = 0
	case ev.Retryable && n.genFailures < MaxGenerationRetries:
		n.genFailures++
		retry = true
	default:
		n.failed = true
		n.emit(Action{Kind: Fail, Err: ev.Err})
		return
	}
	for _, f := range ev.FencedParts {
		ge, ok := g.parts[f.P]
		if !ok {
			continue
		}
		e := f.Epoch
		if e == 0 {
			e = ge // the error did not say: the generation's epoch
		}
		st := n.parts[f.P]
		// Only a failure of the epoch the partition is served under now
		// ends its work; one of an older epoch is stale.
		if st != nil && st.phase == Serving && st.epoch == e && ge == e {
			n.drop(f.P, st)
			n.emit(Action{Kind: SetTimer, Timer: Timer{Kind: Recheck, P: f.P, Epoch: e}, After: RetryAfter})
		}
	}
	// What waited for the generation to stop goes on.
	for _, p := range slices.Sorted(maps.Keys(n.parts)) {
		st := n.parts[p]
		switch {
		case st.phase == Pending:
			st.phase = Restoring
			n.emit(Action{Kind: StartRestore, P: p, Epoch: st.epoch})
		case st.phase == HandingBack && !st.handBack:
			st.handBack = true
			n.emit(Action{Kind: HandBack, P: p, Epoch: st.epoch, Flush: st.flush})
		}
	}
	if retry {
		// The next generation after a pause (this timer replaces a
		// shorter Burst one).
		n.bursting = true
		n.emit(Action{Kind: SetTimer, Timer: Timer{Kind: Burst}, After: RetryAfter})
		return
	}
	if !n.bursting {
		n.startGen()
	}
}

// desired is the set the generation should process: the serving
// partitions.
func (n *Node) desired() map[uint32]Epoch {
	want := map[uint32]Epoch{}
	for p, st := range n.parts {
		if st.phase == Serving {
			want[p] = st.epoch
		}
	}
	return want
}

func (n *Node) startGen() {
	want := n.desired()
	if len(want) == 0 {
		return
	}
	n.nextGen++
	n.gen = &generation{id: n.nextGen, parts: want}
	n.emit(Action{Kind: StartGeneration, Gen: n.gen.id, Parts: sortedParts(want)})
}

func (n *Node) timer(t Timer, stillOwned bool) {
	switch t.Kind {
	case Burst:
		n.bursting = false
		switch {
		case n.gen == nil:
			n.startGen()
		case !n.gen.stopping && !maps.Equal(n.gen.parts, n.desired()):
			n.stopGen()
		}
	case Retry:
		st := n.parts[t.P]
		if st == nil || st.phase != Retrying || st.epoch != t.Epoch {
			return
		}
		if !stillOwned {
			return // the membership's Lost follows
		}
		n.restore(t.P, st)
	case Recheck:
		st := n.parts[t.P]
		if st == nil || st.phase != NotOwned || st.epoch != t.Epoch || !stillOwned {
			return
		}
		// Dropped because its changelog said it was fenced, yet the
		// membership still grants it with that epoch: restore it again
		// rather than leave it processed by nobody. A newer fence makes
		// the restore end fenced again, until the membership says Lost.
		n.restore(t.P, st)
	case StandbyRetry:
		n.standbyRetry(t.P)
	}
}

func sortedParts(m map[uint32]Epoch) []PartitionEpoch {
	out := make([]PartitionEpoch, 0, len(m))
	for _, p := range slices.Sorted(maps.Keys(m)) {
		out = append(out, PartitionEpoch{P: p, Epoch: m[p]})
	}
	return out
}
