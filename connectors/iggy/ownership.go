package iggy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/internal/scaleout/membership"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

// Epoch is connector.Epoch: here, the position (offset + 1) in the
// membership log of the record at which a grant took effect. The epochs of
// a partition strictly increase with every grant, so a store that
// remembers the highest epoch it accepted for a partition can refuse
// whatever an earlier owner sends after it lost the partition. Epochs are
// comparable only within one membership log.
type Epoch = connector.Epoch

// MemberID is connector.MemberID: here, the position (offset + 1) of the
// member's join record in the membership log. An instance that was
// declared dead joins again under a new MemberID.
type MemberID = connector.MemberID

// AssignmentKind is connector.AssignmentKind: what an Assignment reports.
type AssignmentKind = connector.AssignmentKind

// The kinds of Assignment (connector.Gained, connector.Revoking, connector.Lost).
const (
	// Gained: the member owns the partition from now on, with Epoch.
	Gained = connector.Gained
	// Revoking: the group asks the member to give the partition up: stop
	// processing it, then call HandBack. A member that does not hand it back
	// within its session timeout is declared dead.
	Revoking = connector.Revoking
	// Lost: the member no longer owns the partition (Reason says why) and
	// must not change anything on its behalf any more.
	Lost = connector.Lost
)

// LossReason is connector.LossReason: why a partition was lost.
type LossReason = connector.LossReason

// The reasons of a Lost assignment (connector.NotLost, ... connector.Closed).
const (
	// NotLost is the reason of assignments other than Lost.
	NotLost = connector.NotLost
	// HandedBack: HandBack was called for the partition.
	HandedBack = connector.HandedBack
	// Expired: the member could not confirm in time that the group still
	// counts it (it was stalled, cut off from the broker, or kept a
	// revoked partition too long), so it stopped claiming anything before
	// the others may declare it dead; it joins again as a new member.
	Expired = connector.Expired
	// Evicted: the membership log declared the member dead.
	Evicted = connector.Evicted
	// Closed: the Membership (or its Client) was closed.
	Closed = connector.Closed
)

// Assignment is connector.Assignment: one change of what this member owns.
type Assignment = connector.Assignment

// PartitionOwnership is connector.PartitionOwnership: one partition a member
// owns.
type PartitionOwnership = connector.PartitionOwnership

// Member is connector.Member: a member of the group as the membership log
// says at the offset this instance has read (Name is WithMemberName, Addr
// is WithQueryAddr, LastSeen the broker time of its last record). Use it
// to route a key's partition to the instance that serves it.
type Member = connector.Member

var _ connector.Membership = (*Membership)(nil)

// ErrNotOwner means a partition is not owned by this member (HandBack).
var ErrNotOwner = errors.New("strand: iggy: partition not owned by this member")

// ErrGroupMismatch means the group is formed by members that expect
// another number of partitions; this member was refused.
var ErrGroupMismatch = errors.New("strand: iggy: group expects another partition count")

// GroupOption configures JoinGroup.
type GroupOption interface {
	apply(*groupConfig) error
}

// groupOptionFunc adapts a function to GroupOption.
type groupOptionFunc func(*groupConfig) error

func (f groupOptionFunc) apply(c *groupConfig) error { return f(c) }

type groupConfig struct {
	timeout   time.Duration
	heartbeat time.Duration
	poll      time.Duration
	margin    time.Duration
	addr      string
	name      string
	topic     string
	instance  string
	snapEvery int // records between two snapshots of the membership log; 0: none
	log       *slog.Logger
	trace     func(traceEvent) // tests: the member's claims as they start and end
}

// DefaultMembershipSnapshotEvery is how many records of the membership log
// go between two snapshots of it, unless WithMembershipSnapshots says
// otherwise.
const DefaultMembershipSnapshotEvery = 1000

// membershipSnapshotBookmark names the bookmark (a consumer offset of the
// membership log) that points at its latest snapshot.
const membershipSnapshotBookmark = "strand-members-snapshot"

// ErrInstanceFenced means another process joined the group with this
// member's instance id (WithInstanceID) and took its partitions over: the
// membership ends for good. Two live processes must not share an id.
var ErrInstanceFenced = errors.New("strand: iggy: another member joined with this member's instance id")

// WithInstanceID makes the member static (Kafka's KIP-345): id names the
// instance across restarts (a host name, a pod's ordinal). A member that
// joins with the id of a live member takes that member's place in the
// membership log at once: it is granted the partitions the previous
// incarnation owned, under new epochs, without waiting for the session
// timeout to declare it dead, and the previous incarnation, if it is still
// running, ends with ErrInstanceFenced. Two running processes must never
// share an id. 1..255 bytes.
func WithInstanceID(id string) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if id == "" || len(id) > 255 {
			return fmt.Errorf("strand: iggy.WithInstanceID: %d bytes, want 1..255", len(id))
		}
		c.instance = id
		return nil
	})
}

// WithMembershipSnapshots sets how many records of the membership log go
// between two snapshots of the group's state, which the oldest member
// writes to the log (default DefaultMembershipSnapshotEvery; 0: none). A
// joining member starts from the latest snapshot (found through a
// bookmark) instead of the log's start, so joining costs the same after a
// year of heartbeats as after a minute.
func WithMembershipSnapshots(every int) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if every < 0 {
			return fmt.Errorf("strand: iggy.WithMembershipSnapshots: %d, want 0 or more", every)
		}
		c.snapEvery = every
		return nil
	})
}

// WithSessionTimeout sets how long a member may stay silent in the
// membership log, in broker time, before the others declare it dead and
// take its partitions over; a member must also hand back a partition it is
// asked to give up within this time (default 10s). It bounds how long a
// crashed or stalled instance holds its partitions.
func WithSessionTimeout(d time.Duration) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("strand: iggy.WithSessionTimeout: %v, want at least 10ms", d)
		}
		c.timeout = d
		return nil
	})
}

// WithHeartbeat sets how often a member writes a heartbeat to the
// membership log (default a quarter of the session timeout). It must be
// less than half the session timeout.
func WithHeartbeat(d time.Duration) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if d <= 0 {
			return fmt.Errorf("strand: iggy.WithHeartbeat: %v, want more than 0", d)
		}
		c.heartbeat = d
		return nil
	})
}

// WithGroupPollInterval sets how often a member reads the membership log
// when it has read everything (default a quarter of the heartbeat, at most
// 100ms). It bounds how late a member learns of a change.
func WithGroupPollInterval(d time.Duration) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if d <= 0 {
			return fmt.Errorf("strand: iggy.WithGroupPollInterval: %v, want more than 0", d)
		}
		c.poll = d
		return nil
	})
}

// WithLeaseMargin sets how much earlier than the others could declare it
// dead a member stops claiming its partitions (default a tenth of the
// session timeout). It covers the difference between the rates of the
// member's clock and the broker's.
func WithLeaseMargin(d time.Duration) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if d < 0 {
			return fmt.Errorf("strand: iggy.WithLeaseMargin: %v, want at least 0", d)
		}
		c.margin = d
		return nil
	})
}

// WithQueryAddr publishes addr (an opaque string, for example the
// host:port of the instance's query server) in the member's record, for
// the other instances to route queries with (Member.Addr). At most 1024
// bytes.
func WithQueryAddr(addr string) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if len(addr) > 1024 {
			return fmt.Errorf("strand: iggy.WithQueryAddr: %d bytes, want at most 1024", len(addr))
		}
		c.addr = addr
		return nil
	})
}

// WithMemberName names the member in its record and in logs (default
// hostname/pid). At most 255 bytes.
func WithMemberName(name string) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if name == "" || len(name) > 255 {
			return fmt.Errorf("strand: iggy.WithMemberName: %d bytes, want 1..255", len(name))
		}
		c.name = name
		return nil
	})
}

// WithMembershipTopic sets the topic of the membership log (default
// "strand-members-" followed by the topology's name). It is created with
// one partition if missing and must not be subject to retention.
func WithMembershipTopic(topic string) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if topic == "" || len(topic) > 255 {
			return fmt.Errorf("strand: iggy.WithMembershipTopic: %d bytes, want 1..255", len(topic))
		}
		c.topic = topic
		return nil
	})
}

// WithGroupLogger sends the membership's diagnostics to l (default the
// Client's logger).
func WithGroupLogger(l *slog.Logger) GroupOption {
	return groupOptionFunc(func(c *groupConfig) error {
		if l == nil {
			return errors.New("strand: iggy.WithGroupLogger: nil logger")
		}
		c.log = l
		return nil
	})
}

// Membership is this instance's membership of a group: the instances of
// one topology that share its partitions through a membership log on Iggy
// (docs/design.md, "Ownership"). It tells, on Assignments, which
// partitions this member gains, must give up and loses, each with its
// epoch, and which member owns what (Members, Owner).
//
// A Membership is safe for concurrent use.
type Membership struct {
	cl         *Client
	cfg        groupConfig
	t          topicRef
	topology   string
	partitions uint32
	log        *slog.Logger
	rd, wr     *conn
	ctx        context.Context // ends at Close
	cancel     context.CancelFunc

	out   chan Assignment
	wake  chan struct{} // the deliverer has something to do
	stop  chan struct{} // closed by Close: run and beat stop
	ended chan struct{} // closed when run returns
	dstop chan struct{} // closed by Close after them: the deliverer stops
	wg    sync.WaitGroup
	dwg   sync.WaitGroup
	gate  sync.RWMutex // tests freeze the member by write-locking it
	once  sync.Once

	joined chan struct{} // closed at the first accepted join, or at a fatal error

	mu         sync.Mutex
	queue      []Assignment
	st         *membership.State
	next       uint64 // next offset of the membership log to read
	caughtUp   bool   // read to the end once before the first join
	self       MemberID
	old        MemberID // an earlier incarnation the next join replaces
	nonce      string
	joinSent   time.Time // first attempt of the join with nonce
	joinPosted bool
	seq        uint64
	sent       map[uint64]time.Time // own records by sequence number → when their send began
	refSend    time.Time            // send time of the latest own record read back as counted
	refTs      uint64               // its broker time
	leaseEnd   time.Time
	claims     map[uint32]Epoch
	handedBack map[uint32]*handBackState
	revokeSent map[uint32]Epoch
	closing    bool
	err        error
	// Snapshots of the log: the At of the latest one read (or loaded),
	// one this member wrote and has not read back, and the offset of one
	// it wrote and read back, for the bookmark.
	snapAt      uint64
	snapWriting bool
	snapMark    uint64
	snapMarkSet bool
	loadedFrom  uint64 // the snapshot the member started from (0: the log's start)
}

type handBackState struct {
	epoch Epoch
	sent  bool
}

// traceEvent is one step of a member's claims, for tests: a claim of
// partition p with epoch e starts or ends at At; a lease event says the
// member may claim until At (reported before it takes effect).
type traceEvent struct {
	Kind   string // "claim", "end", "lease"
	Member MemberID
	P      uint32
	E      Epoch
	At     time.Time
}

// JoinGroup joins the group of the instances of topology that share the
// partitions 0..partitions-1 of its sources, through the membership log
// stream/"strand-members-<topology>" (created when missing; see
// WithMembershipTopic). It returns once the member's join is in the log
// and read back; the partitions it gets arrive on Assignments. A group is
// formed by its first member: a member expecting another partition count
// is refused with an error wrapping ErrGroupMismatch.
//
// Close the Membership to leave the group.
func (c *Client) JoinGroup(ctx context.Context, stream, topology string, partitions uint32, opts ...GroupOption) (*Membership, error) {
	cfg := groupConfig{timeout: 10 * time.Second, snapEvery: DefaultMembershipSnapshotEvery, log: c.cfg.log}
	if host, err := os.Hostname(); err == nil {
		cfg.name = fmt.Sprintf("%s/%d", host, os.Getpid())
	} else {
		cfg.name = fmt.Sprintf("pid %d", os.Getpid())
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if topology == "" {
		return nil, errors.New("strand: iggy: JoinGroup: empty topology name")
	}
	if partitions == 0 || partitions > maxPartitions {
		return nil, fmt.Errorf("strand: iggy: JoinGroup %s: %d partitions, want 1..%d", topology, partitions, maxPartitions)
	}
	if cfg.topic == "" {
		cfg.topic = "strand-members-" + topology
		if len(cfg.topic) > 255 {
			return nil, fmt.Errorf("strand: iggy: JoinGroup: topology name of %d bytes is too long for the membership topic's name; use WithMembershipTopic", len(topology))
		}
	}
	if cfg.heartbeat == 0 {
		cfg.heartbeat = cfg.timeout / 4
	}
	if cfg.heartbeat*2 >= cfg.timeout {
		return nil, fmt.Errorf("strand: iggy.WithHeartbeat: %v, want less than half the session timeout %v", cfg.heartbeat, cfg.timeout)
	}
	if cfg.poll == 0 {
		cfg.poll = min(cfg.heartbeat/4, 100*time.Millisecond)
	}
	if cfg.margin == 0 {
		cfg.margin = cfg.timeout / 10
	}
	if cfg.margin >= cfg.timeout/2 {
		return nil, fmt.Errorf("strand: iggy.WithLeaseMargin: %v, want less than half the session timeout %v", cfg.margin, cfg.timeout)
	}
	t, err := newTopicRef(stream, cfg.topic)
	if err != nil {
		return nil, err
	}
	if err := c.EnsureTopic(ctx, stream, cfg.topic, 1); err != nil {
		return nil, strerr.Errorf("strand: iggy: JoinGroup %s: membership log: %w", topology, err)
	}
	m := &Membership{
		cl: c, cfg: cfg, t: t, topology: topology, partitions: partitions,
		log: cfg.log.With("group", topology, "member_name", cfg.name),
		out: make(chan Assignment), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), ended: make(chan struct{}), dstop: make(chan struct{}), joined: make(chan struct{}),
		st: membership.NewState(), sent: map[uint64]time.Time{}, claims: map[uint32]Epoch{},
		handedBack: map[uint32]*handBackState{}, revokeSent: map[uint32]Epoch{},
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if m.rd, err = c.openConn("membership reader " + t.String()); err == nil {
		m.wr, err = c.openConn("membership writer " + t.String())
	}
	if err != nil {
		if m.rd != nil {
			c.closeConn(m.rd)
		}
		m.cancel()
		return nil, strerr.Errorf("strand: iggy: JoinGroup %s: %w", topology, err)
	}
	m.loadSnapshot(ctx)
	m.newIncarnation(0)
	m.wg.Add(2)
	go m.run()
	go m.beat()
	m.dwg.Add(1)
	go m.deliver()
	select {
	case <-m.joined:
	case <-ctx.Done():
		m.Close()
		return nil, strerr.Errorf("strand: iggy: JoinGroup %s: %w", topology, ctx.Err())
	}
	m.mu.Lock()
	err = m.err
	m.mu.Unlock()
	if err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Assignments delivers, in order, every change of what this member owns.
// Receive from it without stalling for long: nothing is dropped, but the
// backlog grows. It is closed by Close, or when the membership ends for
// good (Err says why); events not received by then are dropped.
func (m *Membership) Assignments() <-chan Assignment { return m.out }

// ID returns the member's current incarnation (0 between a loss of its
// membership and its next join).
func (m *Membership) ID() MemberID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

// Err returns why the membership ended on its own (the Client was closed,
// the membership log vanished or was trimmed, the group refused this
// member), or nil.
func (m *Membership) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Owns reports whether this member owns partition p right now, and with
// which epoch: the log as read so far grants it to this member, it was not
// handed back, and the member's lease has not run out. Check it just before
// making anything of p's visible; the epoch fences what slips through.
func (m *Membership) Owns(p uint32) (Epoch, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.claims[p]
	if !ok || !time.Now().Before(m.leaseEnd) {
		return 0, false
	}
	return e, true
}

// Owned returns the partitions this member owns right now (as Owns), in
// partition order.
func (m *Membership) Owned() []PartitionOwnership {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !time.Now().Before(m.leaseEnd) {
		return nil
	}
	out := make([]PartitionOwnership, 0, len(m.claims))
	for p, e := range m.claims {
		out = append(out, PartitionOwnership{Partition: p, Epoch: e, Revoking: m.revokeSent[p] == e})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// Members returns the members of the group, in join order, as the
// membership log says at the offset this instance has read.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.st.IDs))
	for _, id := range m.st.IDs {
		ms := m.st.Members[id]
		mb := Member{ID: id, Name: ms.Name, Addr: ms.Addr, LastSeen: time.UnixMicro(int64(ms.LastTs))}
		for i, p := range m.st.Parts {
			if p.Owner == id {
				mb.Partitions = append(mb.Partitions, PartitionOwnership{Partition: uint32(i), Epoch: p.Epoch, Revoking: p.Revoking})
			}
		}
		out = append(out, mb)
	}
	return out
}

// Owner returns the member that owns partition p as the membership log
// says at the offset this instance has read, and its epoch.
func (m *Membership) Owner(p uint32) (Member, Epoch, bool) {
	for _, mb := range m.Members() {
		for _, po := range mb.Partitions {
			if po.Partition == p {
				return mb, po.Epoch, true
			}
		}
	}
	return Member{}, 0, false
}

// HandBack gives partition p up to the group: the member stops claiming it
// at once (Owns reports false, a Lost assignment with reason HandedBack follows),
// then writes the hand-back to the membership log, after which the group
// grants p to the member the balanced assignment names, which may be this
// one again, with a new epoch. Call it after stopping p's processing, in
// answer to Revoking or on its own. It returns when the hand-back is in the
// log, or with ctx's error while the member keeps trying in the
// background. A partition the member does not own gives an error wrapping
// ErrNotOwner.
func (m *Membership) HandBack(ctx context.Context, p uint32) error {
	m.mu.Lock()
	e, ok := m.claims[p]
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("%w: partition %d of group %s", ErrNotOwner, p, m.topology)
	}
	m.endClaimLocked(p, e, HandedBack, time.Now())
	rs := &handBackState{epoch: e}
	m.handedBack[p] = rs
	m.mu.Unlock()
	for attempt := 0; ; attempt++ {
		err := m.sendHandBack(ctx, p, rs)
		if err == nil || !transient(err) {
			return err
		}
		if !sleep(ctx, m.cl.cfg.backoff.delay(attempt), m.stop) {
			if ctx.Err() != nil {
				return strerr.Errorf("strand: iggy: hand back partition %d of group %s: %w", p, m.topology, ctx.Err())
			}
			return strerr.Errorf("strand: iggy: hand back partition %d of group %s: %w", p, m.topology, ErrClosed)
		}
	}
}

func (m *Membership) sendHandBack(ctx context.Context, p uint32, rs *handBackState) error {
	m.mu.Lock()
	self := m.self
	if self == 0 || m.handedBack[p] != rs {
		m.mu.Unlock()
		return nil // the incarnation is gone, or the log already shows the hand-back
	}
	r := membership.Record{Kind: membership.KindHandBack, M: self, P: &p, E: rs.epoch, Seq: m.nextSeqLocked()}
	m.mu.Unlock()
	err := m.append(ctx, &r)
	m.mu.Lock()
	rs.sent = rs.sent || err == nil
	m.mu.Unlock()
	if err != nil {
		return strerr.Errorf("strand: iggy: hand back partition %d of group %s: %w", p, m.topology, err)
	}
	return nil
}

// Close leaves the group: the member stops claiming its partitions (each
// gets a Lost assignment with reason Closed, which may not be delivered),
// writes its leave to the membership log so that the others take them
// over at once, and closes Assignments. It is idempotent.
func (m *Membership) Close() error {
	m.once.Do(func() {
		m.mu.Lock()
		m.closing = true
		m.endAllLocked(Closed)
		m.mu.Unlock()
		close(m.stop)
		m.cancel()
		m.wg.Wait()
		m.mu.Lock()
		self, failed := m.self, m.err != nil
		m.self = 0
		m.mu.Unlock()
		if self != 0 && !failed {
			ctx, cancel := context.WithTimeout(context.Background(), m.cl.cfg.callTimeout)
			if err := m.append(ctx, &membership.Record{Kind: membership.KindLeave, M: self}); err != nil {
				m.log.Warn("iggy: could not write the leave to the membership log; the others take over after the session timeout", "member", self, "err", err)
			}
			cancel()
		}
		m.cl.closeConn(m.rd)
		m.cl.closeConn(m.wr)
		close(m.dstop)
		m.dwg.Wait()
	})
	return nil
}

// --- the member's goroutines -------------------------------------------------

func (m *Membership) stopped() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}

// run reads the membership log, joins (and joins again after a loss of
// the membership), and ends claims whose lease ran out.
func (m *Membership) run() {
	defer m.wg.Done()
	defer close(m.ended)
	attempt := 0
	for !m.stopped() {
		m.gate.RLock()
		progressed, err := m.step()
		m.gate.RUnlock()
		switch {
		case err != nil && m.stopped():
			return
		case err != nil && !transient(err):
			m.fail(err)
			return
		case err != nil:
			m.log.Debug("iggy: membership log unavailable; retrying", "err", err)
			if !sleep(m.ctx, m.cl.cfg.backoff.delay(attempt), m.stop) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
		if progressed {
			continue
		}
		wait := m.cfg.poll
		m.mu.Lock()
		if len(m.claims) > 0 {
			if d := time.Until(m.leaseEnd); d > 0 && d < wait {
				wait = d
			}
		}
		m.mu.Unlock()
		if !sleep(m.ctx, wait, m.stop) {
			return
		}
	}
}

// step does one thing: join, or read one batch of the log; it reports
// whether it read anything.
func (m *Membership) step() (bool, error) {
	m.mu.Lock()
	m.checkLeaseLocked(time.Now())
	joinNow := m.caughtUp && m.self == 0 && !m.joinPosted && m.err == nil
	m.mu.Unlock()
	if joinNow {
		return true, m.postJoin()
	}
	n, err := m.readBatch()
	if err != nil {
		return false, err
	}
	m.snapshot()
	m.mu.Lock()
	defer m.mu.Unlock()
	if n == 0 {
		m.caughtUp = true
	}
	return n > 0, m.err
}

// snapshot writes a snapshot of the group's state when this member is the
// oldest and the log grew by snapEvery records since the latest one, and
// points the bookmark at a snapshot it wrote once it read it back. Errors
// only delay it: the next step tries again.
func (m *Membership) snapshot() {
	if m.cfg.snapEvery == 0 {
		return
	}
	m.mu.Lock()
	mark, markSet := m.snapMark, m.snapMarkSet
	m.snapMarkSet = false
	var rec *membership.Record
	if m.self != 0 && m.caughtUp && !m.snapWriting && len(m.st.IDs) > 0 && m.st.IDs[0] == m.self &&
		m.next-m.snapAt >= uint64(m.cfg.snapEvery) {
		r := m.st.Snapshot(m.next)
		r.M = m.self
		rec = &r
		m.snapWriting = true
	}
	m.mu.Unlock()
	if markSet {
		if err := m.cl.SetBookmark(m.ctx, m.t.String(), 0, membershipSnapshotBookmark, mark); err != nil {
			m.log.Debug("iggy: could not point the bookmark at the membership snapshot", "offset", mark, "err", err)
		}
	}
	if rec != nil {
		if err := m.append(m.ctx, rec); err != nil {
			m.log.Debug("iggy: could not write a membership snapshot", "err", err)
			m.mu.Lock()
			m.snapWriting = false
			m.mu.Unlock()
		}
	}
}

// loadSnapshot starts the member from the latest snapshot of the log, if
// the bookmark points at one that loads; else it reads from the start.
func (m *Membership) loadSnapshot(ctx context.Context) {
	if m.cfg.snapEvery == 0 {
		return
	}
	off, ok, err := m.cl.Bookmark(ctx, m.t.String(), 0, membershipSnapshotBookmark)
	if err != nil || !ok {
		return
	}
	var pm *iggcon.PolledMessage
	err = m.rd.call(ctx, func(s *session) error {
		var err error
		pm, err = s.poll(m.t, 0, off, 1)
		return err
	})
	if err != nil || pm == nil || len(pm.Messages) == 0 || pm.Messages[0].Header.Offset != off {
		m.log.Debug("iggy: membership snapshot unreadable; reading the log from its start", "offset", off, "err", err)
		return
	}
	r, ok := membership.DecodeRecord(pm.Messages[0].Payload)
	if !ok {
		return
	}
	st, at, ok := membership.FromSnapshot(r)
	if !ok || at > off {
		return
	}
	m.mu.Lock()
	m.st, m.next, m.snapAt, m.loadedFrom = st, at, at, off
	m.mu.Unlock()
	m.log.Debug("iggy: starting from a membership snapshot", "offset", off, "at", at)
}

func (m *Membership) postJoin() error {
	m.mu.Lock()
	if m.joinSent.IsZero() {
		m.joinSent = time.Now()
	}
	r := membership.Record{Kind: membership.KindJoin, Nonce: m.nonce, Name: m.cfg.name, Addr: m.cfg.addr,
		Timeout: uint64(m.cfg.timeout.Microseconds()), Parts: m.partitions, Replaces: m.old, Instance: m.cfg.instance}
	m.mu.Unlock()
	if err := m.append(m.ctx, &r); err != nil {
		return strerr.Errorf("strand: iggy: join group %s: %w", m.topology, err)
	}
	m.mu.Lock()
	m.joinPosted = true
	m.mu.Unlock()
	return nil
}

// readBatch reads and applies the next records of the log.
func (m *Membership) readBatch() (int, error) {
	m.mu.Lock()
	from := m.next
	m.mu.Unlock()
	var pm *iggcon.PolledMessage
	pid := uint32(0)
	err := m.rd.call(m.ctx, func(s *session) error {
		var err error
		pm, err = s.poll(m.t, pid, from, 1000)
		return err
	})
	if err != nil {
		return 0, strerr.Errorf("strand: iggy: read membership log %s: %w", m.t, err)
	}
	if pm == nil || len(pm.Messages) == 0 {
		return 0, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range pm.Messages {
		if msg.Header.Offset != m.next {
			return 0, fmt.Errorf("%w: membership log %s: offset %d follows %d; it must not be subject to retention",
				ErrOffsetGap, m.t, msg.Header.Offset, int64(m.next)-1)
		}
		m.applyLocked(msg.Header.Offset, msg.Header.Timestamp, msg.Payload)
		m.next++
	}
	m.reconcileLocked(time.Now())
	return len(pm.Messages), nil
}

// applyLocked applies one record and notes what it says about this member.
func (m *Membership) applyLocked(off, ts uint64, payload []byte) {
	r, out := m.st.Apply(off, ts, payload)
	if r.Kind == membership.KindSnapshot && r.State != nil {
		m.snapAt = max(m.snapAt, r.At)
		if m.snapWriting && r.M == m.self && m.self != 0 {
			m.snapWriting = false
			m.snapMark, m.snapMarkSet = off, true
		}
		r.State = nil // not kept
	}
	if m.self != 0 && out.TookOver == m.self {
		m.log.Error("iggy: another member joined with this member's instance id and took its partitions over", "member", m.self, "instance", m.cfg.instance)
		if m.err == nil {
			m.err = fmt.Errorf("%w: group %s, instance %q, member %d", ErrInstanceFenced, m.topology, m.cfg.instance, m.self)
		}
		m.endAllLockedAt(Evicted, time.Now())
		m.self = 0
		return
	}
	switch {
	case r.Kind == membership.KindJoin && r.Nonce == m.nonce && m.self == 0 && out.Joined != 0:
		m.self = out.Joined
		m.refSend, m.refTs = m.joinSent, m.st.Now
		m.updateLeaseLocked()
		m.log.Info("iggy: joined group", "member", m.self, "members", len(m.st.IDs))
		m.signalJoined()
	case r.Kind == membership.KindJoin && r.Nonce == m.nonce && m.self == 0 && out.Rejected:
		m.err = fmt.Errorf("%w: group %s has %d partitions, this member expects %d", ErrGroupMismatch, m.topology, m.st.Partitions, m.partitions)
		m.signalJoined()
	case m.self != 0 && r.M == m.self && out.Counted:
		if at, ok := m.sent[r.Seq]; ok {
			m.refSend, m.refTs = at, m.st.Now
			for s := range m.sent {
				if s <= r.Seq {
					delete(m.sent, s)
				}
			}
		}
	}
	if m.self != 0 {
		if m.st.Members[m.self] == nil {
			now := time.Now()
			m.log.Warn("iggy: the group declared this member dead; joining again", "member", m.self)
			m.endAllLockedAt(Evicted, now)
			m.newIncarnationLocked(0)
			return
		}
		m.updateLeaseLocked()
	}
}

func (m *Membership) signalJoined() {
	select {
	case <-m.joined:
	default:
		close(m.joined)
	}
}

// updateLeaseLocked computes until when this member may claim: until the
// broker could reach its deadline. The broker stamped the reference record
// after its send began, so broker time at local time t is at most refTs +
// (t - refSend).
func (m *Membership) updateLeaseLocked() {
	d, ok := m.st.Deadline(m.self)
	if !ok || m.refSend.IsZero() {
		return
	}
	end := m.refSend.Add(time.Duration(int64(d)-int64(m.refTs))*time.Microsecond - m.cfg.margin)
	if end.Equal(m.leaseEnd) {
		return
	}
	if m.cfg.trace != nil {
		m.cfg.trace(traceEvent{Kind: "lease", Member: m.self, At: end})
	}
	m.leaseEnd = end
}

// checkLeaseLocked ends every claim when the lease ran out, and starts a
// new incarnation: the group may declare this one dead at any moment.
func (m *Membership) checkLeaseLocked(now time.Time) {
	if m.self == 0 || now.Before(m.leaseEnd) {
		return
	}
	m.log.Warn("iggy: membership lease expired; joining again", "member", m.self, "lease_end", m.leaseEnd)
	m.endAllLockedAt(Expired, now)
	m.newIncarnationLocked(m.self)
}

// reconcileLocked makes the claims follow the log: partitions granted to
// this member are gained (while the lease holds), revocations are passed
// on, and hand-backs the log has applied are forgotten.
func (m *Membership) reconcileLocked(now time.Time) {
	m.checkLeaseLocked(now)
	if m.self == 0 || m.closing {
		return
	}
	for p, rs := range m.handedBack {
		if int(p) >= len(m.st.Parts) || m.st.Parts[p].Owner != m.self || m.st.Parts[p].Epoch != rs.epoch {
			delete(m.handedBack, p)
		}
	}
	for p, e := range m.claims {
		if int(p) >= len(m.st.Parts) || m.st.Parts[p].Owner != m.self || m.st.Parts[p].Epoch != e {
			m.endClaimLocked(p, e, Evicted, now)
		}
	}
	for i, ps := range m.st.Parts {
		p := uint32(i)
		if ps.Owner != m.self {
			continue
		}
		if rs := m.handedBack[p]; rs != nil && rs.epoch == ps.Epoch {
			continue
		}
		if _, ok := m.claims[p]; !ok {
			if m.cfg.trace != nil {
				m.cfg.trace(traceEvent{Kind: "claim", Member: m.self, P: p, E: ps.Epoch, At: now})
			}
			m.claims[p] = ps.Epoch
			m.emitLocked(Assignment{Kind: Gained, Partition: p, Epoch: ps.Epoch})
		}
		if ps.Revoking && m.revokeSent[p] != ps.Epoch {
			m.revokeSent[p] = ps.Epoch
			m.emitLocked(Assignment{Kind: Revoking, Partition: p, Epoch: ps.Epoch})
		}
	}
}

// endClaimLocked stops claiming p; the claim ended at now, or at the end
// of the lease if that came first.
func (m *Membership) endClaimLocked(p uint32, e Epoch, why LossReason, now time.Time) {
	delete(m.claims, p)
	delete(m.revokeSent, p)
	at := now
	if m.leaseEnd.Before(at) {
		at = m.leaseEnd
	}
	if m.cfg.trace != nil {
		m.cfg.trace(traceEvent{Kind: "end", Member: m.self, P: p, E: e, At: at})
	}
	m.emitLocked(Assignment{Kind: Lost, Partition: p, Epoch: e, Reason: why})
}

func (m *Membership) endAllLocked(why LossReason) { m.endAllLockedAt(why, time.Now()) }

func (m *Membership) endAllLockedAt(why LossReason, now time.Time) {
	ps := make([]uint32, 0, len(m.claims))
	for p := range m.claims {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	for _, p := range ps {
		m.endClaimLocked(p, m.claims[p], why, now)
	}
}

// newIncarnation prepares a join under a fresh nonce; old, if not 0, is
// the incarnation it replaces.
func (m *Membership) newIncarnation(old MemberID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.newIncarnationLocked(old)
}

func (m *Membership) newIncarnationLocked(old MemberID) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	m.nonce = hex.EncodeToString(b[:])
	m.self, m.old = 0, old
	m.joinSent, m.joinPosted = time.Time{}, false
	m.seq = 0
	clear(m.sent)
	clear(m.handedBack)
	m.refSend, m.refTs, m.leaseEnd = time.Time{}, 0, time.Time{}
}

func (m *Membership) nextSeqLocked() uint64 {
	m.seq++
	m.sent[m.seq] = time.Now()
	return m.seq
}

// fail ends the membership for good.
func (m *Membership) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = err
	}
	m.log.Error("iggy: membership ended", "member", m.self, "err", err)
	m.endAllLocked(Closed)
	m.signalJoined()
}

// beat writes heartbeats, and repeats hand-backs whose write failed.
func (m *Membership) beat() {
	defer m.wg.Done()
	tick := time.NewTicker(m.cfg.heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		m.gate.RLock()
		m.mu.Lock()
		self := m.self
		var retry []uint32
		for p, rs := range m.handedBack {
			if !rs.sent {
				retry = append(retry, p)
			}
		}
		var r membership.Record
		if self != 0 && m.err == nil {
			r = membership.Record{Kind: membership.KindBeat, M: self, Seq: m.nextSeqLocked()}
		}
		m.mu.Unlock()
		if self != 0 {
			if err := m.append(m.ctx, &r); err != nil && !m.stopped() {
				m.log.Debug("iggy: heartbeat failed", "member", self, "err", err)
			}
			for _, p := range retry {
				m.mu.Lock()
				rs := m.handedBack[p]
				m.mu.Unlock()
				if rs != nil {
					_ = m.sendHandBack(m.ctx, p, rs)
				}
			}
		}
		m.gate.RUnlock()
	}
}

// append writes one record to the membership log.
func (m *Membership) append(ctx context.Context, r *membership.Record) error {
	msg, err := iggcon.NewIggyMessage(r.Encode())
	if err != nil {
		return fmt.Errorf("%w: membership record: %w", ErrInvalidMessage, err)
	}
	msgs := []iggcon.IggyMessage{msg}
	return m.wr.callOnce(ctx, func(s *session) error {
		_, err := s.send(m.t, 0, encodeSend(nil, s.proto, sendHead(m.t.ids()), 0, msgs))
		return err
	})
}

func (m *Membership) emitLocked(a Assignment) {
	m.queue = append(m.queue, a)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// deliver hands queued assignments to Assignments in order.
func (m *Membership) deliver() {
	defer m.dwg.Done()
	defer close(m.out)
	for {
		m.mu.Lock()
		var a Assignment
		has := len(m.queue) > 0
		if has {
			a = m.queue[0]
		}
		m.mu.Unlock()
		if !has {
			select {
			case <-m.wake:
				continue
			case <-m.ended:
				m.mu.Lock()
				empty := len(m.queue) == 0
				m.mu.Unlock()
				if empty {
					return // the membership ended: nothing more will come
				}
				continue
			case <-m.dstop:
				return
			}
		}
		select {
		case m.out <- a:
			m.mu.Lock()
			m.queue = m.queue[1:]
			m.mu.Unlock()
		case <-m.dstop:
			return
		}
	}
}
