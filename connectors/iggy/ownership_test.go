package iggy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/testrun"
)

// withTrace records a member's claims (tests only).
func withTrace(f func(traceEvent)) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error { c.trace = f; return nil })
}

// Fast settings for tests: a member silent for 500ms is dead.
const (
	testSession   = 500 * time.Millisecond
	testHeartbeat = 60 * time.Millisecond
	testPoll      = 10 * time.Millisecond
)

// history collects the claims of every member of a test.
type history struct {
	mu     sync.Mutex
	events []traceEvent
}

func (h *history) add(ev traceEvent) {
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
}

func (h *history) snapshot() []traceEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// claim is one member's hold of one partition with one epoch.
type claim struct {
	member     MemberID
	p          uint32
	e          Epoch
	start, end time.Time
	open       bool // no end recorded: bounded by the member's last lease
}

// checkHistory proves from the recorded claims that no partition ever had
// two claimants at one moment, that the epochs of a partition strictly
// increase from one claim to the next, and that an epoch is never claimed
// twice.
func checkHistory(t *testing.T, events []traceEvent) map[uint32][]claim {
	t.Helper()
	type key struct {
		m MemberID
		p uint32
		e Epoch
	}
	lease := map[MemberID]time.Time{}
	claims := map[key]*claim{}
	var order []key
	for _, ev := range events {
		k := key{ev.Member, ev.P, ev.E}
		switch ev.Kind {
		case "lease":
			if ev.At.After(lease[ev.Member]) {
				lease[ev.Member] = ev.At
			}
		case "claim":
			if c := claims[k]; c != nil {
				t.Fatalf("member %d claimed partition %d epoch %d twice", ev.Member, ev.P, ev.E)
			}
			claims[k] = &claim{member: ev.Member, p: ev.P, e: ev.E, start: ev.At, open: true}
			order = append(order, k)
		case "end":
			c := claims[k]
			if c == nil || !c.open {
				t.Fatalf("member %d ended partition %d epoch %d it did not hold", ev.Member, ev.P, ev.E)
			}
			c.end, c.open = ev.At, false
		}
	}
	byPart := map[uint32][]claim{}
	for _, k := range order {
		c := *claims[k]
		if c.open {
			c.end = lease[c.member]
		}
		byPart[c.p] = append(byPart[c.p], c)
	}
	for p, cs := range byPart {
		sort.Slice(cs, func(i, j int) bool { return cs[i].start.Before(cs[j].start) })
		for i := 1; i < len(cs); i++ {
			prev, cur := cs[i-1], cs[i]
			if cur.start.Before(prev.end) {
				t.Fatalf("partition %d: member %d (epoch %d) claimed it at %v while member %d (epoch %d) held it until %v",
					p, cur.member, cur.e, cur.start.Format(time.StampMicro), prev.member, prev.e, prev.end.Format(time.StampMicro))
			}
			if cur.e <= prev.e {
				t.Fatalf("partition %d: epoch %d (member %d) after epoch %d (member %d)", p, cur.e, cur.member, prev.e, prev.member)
			}
		}
		byPart[p] = cs
	}
	return byPart
}

// gmember is one member of a test group with a stand-in engine: it
// hands back what it is asked to give up after a short pause.
type gmember struct {
	t       *testing.T
	cl      *Client
	m       *Membership
	state   sync.Mutex // guards frozen and killed
	frozen  bool
	killed  bool
	closed  bool
	done    chan struct{}
	mu      sync.Mutex
	got     []Assignment
	closeMu sync.Once
}

type groupHarness struct {
	t          *testing.T
	tg         *target
	admin      *Client
	stream     string
	partitions uint32
	hist       history
	members    []*gmember
	opts       []GroupOption
}

func newGroupHarness(t *testing.T, partitions uint32, opts ...GroupOption) *groupHarness {
	tg := newTarget(t)
	tg.faults(t) // freezing members needs an embedded broker's clock: same process
	h := &groupHarness{t: t, tg: tg, partitions: partitions, opts: opts}
	h.admin = tg.connect(t)
	h.stream, _ = tg.topic(t, h.admin, 1)
	t.Cleanup(func() {
		for _, gm := range h.members {
			gm.close()
		}
		checkHistory(t, h.hist.snapshot())
	})
	return h
}

func (h *groupHarness) join(name string, extra ...GroupOption) *gmember {
	h.t.Helper()
	cl, err := Connect(context.Background(), h.tg.addr, h.tg.options()...)
	if err != nil {
		h.t.Fatal(err)
	}
	opts := append([]GroupOption{WithSessionTimeout(testSession), WithHeartbeat(testHeartbeat),
		WithGroupPollInterval(testPoll), WithMemberName(name), WithQueryAddr("query-" + name),
		WithGroupLogger(testLogger()), withTrace(h.hist.add)}, h.opts...)
	// A hang guard: a join replays the membership log, 30,000 records in
	// TestGroupJoinStartsFromASnapshot's soak (about 8 s under load for 10,000).
	m, err := cl.JoinGroup(ctxT(h.t, time.Minute), h.stream, "accounts", h.partitions, append(opts, extra...)...)
	if err != nil {
		cl.Close()
		h.t.Fatalf("JoinGroup %s: %v", name, err)
	}
	gm := &gmember{t: h.t, cl: cl, m: m, done: make(chan struct{})}
	go gm.engine()
	h.members = append(h.members, gm)
	return gm
}

func (gm *gmember) engine() {
	defer close(gm.done)
	for a := range gm.m.Assignments() {
		gm.mu.Lock()
		gm.got = append(gm.got, a)
		gm.mu.Unlock()
		if a.Kind == Revoking {
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // stopping the partition
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := gm.m.HandBack(ctx, a.Partition); err != nil && !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrClosed) {
				gm.t.Errorf("hand back %d: %v", a.Partition, err)
			}
			cancel()
		}
	}
}

func (gm *gmember) assignments() []Assignment {
	gm.mu.Lock()
	defer gm.mu.Unlock()
	return slices.Clone(gm.got)
}

// freeze stops the member's goroutines without closing anything: a stall.
func (gm *gmember) freeze() {
	gm.state.Lock()
	defer gm.state.Unlock()
	if !gm.frozen {
		gm.m.gate.Lock()
		gm.frozen = true
	}
}

func (gm *gmember) thaw() {
	gm.state.Lock()
	defer gm.state.Unlock()
	if gm.frozen {
		gm.frozen = false
		gm.m.gate.Unlock()
	}
}

// kill stops the member as a crash would: no leave, connections gone.
func (gm *gmember) kill() {
	gm.freeze()
	gm.state.Lock()
	gm.killed = true
	gm.state.Unlock()
	gm.cl.Close()
}

func (gm *gmember) close() {
	gm.closeMu.Do(func() {
		gm.state.Lock()
		gm.closed = true
		gm.state.Unlock()
		gm.thaw()
		gm.m.Close()
		<-gm.done
		gm.cl.Close()
	})
}

func (gm *gmember) alive() bool {
	gm.state.Lock()
	defer gm.state.Unlock()
	return !gm.frozen && !gm.killed && !gm.closed
}

// settled reports whether the live members own every partition exactly
// once, evenly, and each sees the same members.
func (h *groupHarness) settled() (bool, string) {
	var live []*gmember
	for _, gm := range h.members {
		if gm.alive() && gm.m.Err() == nil {
			live = append(live, gm)
		}
	}
	if len(live) == 0 {
		return false, "no live member"
	}
	seen := map[uint32]MemberID{}
	var ids []MemberID
	minN, maxN := int(h.partitions), 0
	for _, gm := range live {
		id := gm.m.ID()
		if id == 0 {
			return false, "a member is joining"
		}
		ids = append(ids, id)
		owned := gm.m.Owned()
		minN, maxN = min(minN, len(owned)), max(maxN, len(owned))
		for _, po := range owned {
			if other, dup := seen[po.Partition]; dup {
				return false, fmt.Sprintf("partition %d owned by %d and %d", po.Partition, other, id)
			}
			if po.Revoking {
				return false, fmt.Sprintf("partition %d is being revoked", po.Partition)
			}
			seen[po.Partition] = id
		}
	}
	if len(seen) != int(h.partitions) {
		return false, fmt.Sprintf("%d of %d partitions owned", len(seen), h.partitions)
	}
	if maxN-minN > 1 {
		return false, fmt.Sprintf("uneven: %d to %d partitions", minN, maxN)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, gm := range live {
		var view []MemberID
		for _, mb := range gm.m.Members() {
			view = append(view, mb.ID)
			for _, po := range mb.Partitions {
				if seen[po.Partition] != mb.ID || po.Revoking {
					return false, fmt.Sprintf("member %d sees partition %d with %d (revoking %v), claimed by %d",
						gm.m.ID(), po.Partition, mb.ID, po.Revoking, seen[po.Partition])
				}
			}
		}
		if !slices.Equal(view, ids) {
			return false, fmt.Sprintf("member %d sees members %v, live are %v", gm.m.ID(), view, ids)
		}
	}
	return true, ""
}

func (h *groupHarness) waitSettled(within time.Duration) time.Duration {
	h.t.Helper()
	return testrun.WaitFor(h.t, within, func() error {
		if ok, why := h.settled(); !ok {
			return fmt.Errorf("group did not settle: %s", why)
		}
		return nil
	})
}

// bound is how long a change may take: a dead member is noticed after the
// session timeout plus a heartbeat of another member and a poll; slack for
// a loaded CI machine.
const bound = testSession + testHeartbeat + 10*testPoll + 2*time.Second

func TestGroupSpreadsPartitionsEvenly(t *testing.T) {
	h := newGroupHarness(t, 8)
	a := h.join("a")
	h.waitSettled(bound)
	if got := a.m.Owned(); len(got) != 8 {
		t.Fatalf("a single member owns %v", got)
	}
	h.join("b")
	h.join("c")
	took := h.waitSettled(bound)
	t.Logf("two joins settled in %v", took)
	d := h.join("d")
	took = h.waitSettled(bound)
	t.Logf("a fourth join settled in %v", took)
	if got := d.m.Owned(); len(got) != 2 {
		t.Fatalf("the added member owns %v", got)
	}
	// Every member's record carries its query address and partitions.
	for _, mb := range a.m.Members() {
		if mb.Addr != "query-"+mb.Name || len(mb.Partitions) != 2 {
			t.Fatalf("member record %+v", mb)
		}
		owner, e, ok := d.m.Owner(mb.Partitions[0].Partition)
		if !ok || owner.ID != mb.ID || e != mb.Partitions[0].Epoch {
			t.Fatalf("Owner(%d) = %+v %d %v, want member %d", mb.Partitions[0].Partition, owner, e, ok, mb.ID)
		}
	}
	// A clean leave hands the partitions over without waiting for a timeout.
	start := time.Now()
	d.close()
	took = h.waitSettled(bound)
	if took > testSession {
		t.Fatalf("a clean leave took %v to settle, longer than the session timeout", took)
	}
	t.Logf("a clean leave settled in %v", time.Since(start))
}

func TestGroupKilledMemberLosesItsPartitionsWithinTheBound(t *testing.T) {
	h := newGroupHarness(t, 6)
	h.join("a")
	b := h.join("b")
	h.join("c")
	h.waitSettled(bound)
	lost := b.m.Owned()
	start := time.Now()
	b.kill()
	took := h.waitSettled(bound)
	t.Logf("a killed member's %d partitions moved after %v (session timeout %v)", len(lost), took, testSession)
	if took < testSession-2*testHeartbeat {
		t.Fatalf("partitions moved after %v, before the session timeout could have passed", took)
	}
	_ = start
}

func TestGroupStalledMemberIsDeclaredDeadAndNeverRegainsItsEpochs(t *testing.T) {
	h := newGroupHarness(t, 4)
	a := h.join("a")
	b := h.join("b")
	h.waitSettled(bound)
	old := b.m.Owned()
	oldID := b.m.ID()
	b.freeze()
	took := h.waitSettled(bound)
	t.Logf("a stalled member's partitions moved after %v", took)
	for _, po := range old {
		if _, ok := b.m.Owns(po.Partition); ok {
			t.Fatalf("the stalled member still claims partition %d", po.Partition)
		}
		e, ok := a.m.Owns(po.Partition)
		if !ok || e <= po.Epoch {
			t.Fatalf("partition %d: survivor's epoch %d, stalled member had %d", po.Partition, e, po.Epoch)
		}
	}
	b.thaw()
	h.waitSettled(bound)
	if b.m.ID() == oldID {
		t.Fatalf("the resumed member kept its incarnation %d", oldID)
	}
	// It was told of each loss, and never gained a partition back with an
	// epoch that is not newer than the one it lost.
	for _, po := range old {
		lostAt := -1
		for i, as := range b.assignments() {
			switch {
			case as.Partition != po.Partition:
			case as.Kind == Lost && as.Epoch == po.Epoch:
				lostAt = i
			case as.Kind == Gained && lostAt >= 0 && as.Epoch <= po.Epoch:
				t.Fatalf("resumed member gained %v after losing epoch %d", as, po.Epoch)
			}
		}
		if lostAt < 0 {
			t.Fatalf("the resumed member was not told it lost partition %d: %v", po.Partition, b.assignments())
		}
	}
	for _, po := range b.m.Owned() {
		for _, o := range old {
			if po.Partition == o.Partition && po.Epoch <= o.Epoch {
				t.Fatalf("resumed member owns partition %d with epoch %d, old %d", po.Partition, po.Epoch, o.Epoch)
			}
		}
	}
}

func TestGroupHandBackHandsAPartitionOverWithANewEpoch(t *testing.T) {
	h := newGroupHarness(t, 2)
	a := h.join("a")
	h.waitSettled(bound)
	e0, ok := a.m.Owns(1)
	if !ok {
		t.Fatal("a does not own partition 1")
	}
	if err := a.m.HandBack(ctxT(t, 5*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	if e, ok := a.m.Owns(1); ok && e == e0 {
		t.Fatal("a still claims partition 1 with its epoch after handing it back")
	}
	var lost bool
	for _, as := range a.assignments() {
		lost = lost || as.Kind == Lost && as.Partition == 1 && as.Epoch == e0 && as.Reason == HandedBack
	}
	// The only member gets it back, with a new epoch.
	testrun.WaitFor(t, bound, func() error {
		e, ok := a.m.Owns(1)
		if !ok {
			return errors.New("partition 1 was never granted again")
		}
		if e <= e0 {
			t.Fatalf("regained epoch %d, handed back %d", e, e0)
		}
		return nil
	})
	testrun.WaitFor(t, bound, func() error {
		for _, as := range a.assignments() {
			lost = lost || as.Kind == Lost && as.Partition == 1 && as.Epoch == e0 && as.Reason == HandedBack
		}
		if !lost {
			return fmt.Errorf("no Lost(handed back) for partition 1: %v", a.assignments())
		}
		return nil
	})
	if err := a.m.HandBack(ctxT(t, time.Second), 7); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("handing back an unowned partition: %v", err)
	}
}

func TestGroupRefusesAMemberWithAnotherPartitionCount(t *testing.T) {
	h := newGroupHarness(t, 4)
	h.join("a")
	cl := h.tg.connect(t)
	_, err := cl.JoinGroup(ctxT(t, 5*time.Second), h.stream, "accounts", 5, WithSessionTimeout(testSession),
		WithHeartbeat(testHeartbeat), WithGroupPollInterval(testPoll), WithGroupLogger(testLogger()))
	if !errors.Is(err, ErrGroupMismatch) {
		t.Fatalf("JoinGroup with 5 partitions into a group of 4: %v", err)
	}
}

func TestGroupOptionsAreValidated(t *testing.T) {
	tg := newTarget(t)
	cl := tg.connect(t)
	ctx := ctxT(t, 5*time.Second)
	for _, tc := range []struct {
		name string
		opts []GroupOption
	}{
		{"WithSessionTimeout", []GroupOption{WithSessionTimeout(time.Millisecond)}},
		{"WithHeartbeat", []GroupOption{WithHeartbeat(0)}},
		{"WithHeartbeat", []GroupOption{WithSessionTimeout(time.Second), WithHeartbeat(600 * time.Millisecond)}},
		{"WithGroupPollInterval", []GroupOption{WithGroupPollInterval(-1)}},
		{"WithLeaseMargin", []GroupOption{WithLeaseMargin(-1)}},
		{"WithLeaseMargin", []GroupOption{WithSessionTimeout(time.Second), WithLeaseMargin(time.Second)}},
		{"WithQueryAddr", []GroupOption{WithQueryAddr(string(make([]byte, 1025)))}},
		{"WithMemberName", []GroupOption{WithMemberName("")}},
		{"WithMembershipTopic", []GroupOption{WithMembershipTopic("")}},
		{"WithGroupLogger", []GroupOption{WithGroupLogger(nil)}},
		{"WithInstanceID", []GroupOption{WithInstanceID("")}},
		{"WithInstanceID", []GroupOption{WithInstanceID(strings.Repeat("i", 256))}},
		{"WithMembershipSnapshots", []GroupOption{WithMembershipSnapshots(-1)}},
	} {
		_, err := cl.JoinGroup(ctx, "s", "t", 4, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: error %v does not name the option", tc.name, err)
		}
	}
	if _, err := cl.JoinGroup(ctx, "s", "t", 0); err == nil {
		t.Error("0 partitions accepted")
	}
	if _, err := cl.JoinGroup(ctx, "s", "", 4); err == nil {
		t.Error("empty topology accepted")
	}
}

// TestGroupRandomChurn joins, closes, kills and stalls members at random
// and checks, from every member's recorded claims, that no partition ever
// had two owners at once and that epochs only rise; and that the group
// settles after each burst. STRAND_SOAK=1 runs longer.
func TestGroupRandomChurn(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STRAND_GROUP_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (STRAND_GROUP_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	rounds := 3
	if os.Getenv("STRAND_SOAK") != "" {
		rounds = 30
	}
	h := newGroupHarness(t, 8)
	h.join("m0")
	h.join("m1")
	next := 2
	var stalls sync.WaitGroup // stalls not ended yet
	for round := 0; round < rounds; round++ {
		for range 4 {
			var live []*gmember
			for _, gm := range h.members {
				if gm.alive() && gm.m.Err() == nil {
					live = append(live, gm)
				}
			}
			switch op := rng.IntN(5); {
			case op == 0 || len(live) < 2:
				h.join(fmt.Sprintf("m%d", next))
				next++
			case op == 1:
				live[rng.IntN(len(live))].close()
			case op == 2:
				live[rng.IntN(len(live))].kill()
			case op == 3:
				gm := live[rng.IntN(len(live))]
				gm.freeze()
				d := time.Duration(rng.IntN(int(2 * testSession)))
				stalls.Add(1)
				time.AfterFunc(d, func() { gm.thaw(); stalls.Done() })
			default:
				gm := live[rng.IntN(len(live))]
				if owned := gm.m.Owned(); len(owned) > 0 {
					_ = gm.m.HandBack(ctxT(t, time.Second), owned[rng.IntN(len(owned))].Partition)
				}
			}
			time.Sleep(time.Duration(rng.IntN(int(testSession / 2)))) // pacing: a random gap between two changes
		}
		stalls.Wait() // every stall has ended
		h.waitSettled(bound)
		checkHistory(t, h.hist.snapshot())
	}
}
