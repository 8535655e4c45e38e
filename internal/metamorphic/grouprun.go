package metamorphic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/memconn"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// groupSession is the group's session timeout: how long a crashed
// instance keeps its partitions (a restart with its instance id takes
// them over at once).
const groupSession = time.Second

// groupIdle is how long a wait of a group run (the group settling, a
// publisher flushing at Close) may see nothing move (no checkpoint,
// ownership, outbox or end offset change) before the run fails: on a
// loaded machine progress is slow, not absent (issue 33 item 7).
const groupIdle = 2 * time.Minute

// groupHang bounds every wait of a group run as a whole, progress or not
// (a Run that returns, the group settling, a flush): a hang guard only,
// below go test's default 10m timeout so that the failure says which
// wait hung.
const groupHang = 6 * time.Minute

// groupStream is the Iggy stream of every generated topic, and of the
// group's membership log.
const groupStream = "meta"

// groupInst is one instance of a group case.
type groupInst struct {
	name, dir string
	cl        *iggy.Client
	app       *topology.App
	b         *Built
	stop      context.CancelFunc
	done      chan error
	up        bool
	crashed   atomic.Bool // halted as a crash: its sinks close at once (patientSink)
}

// groupRun runs a group case: the instances, the reads taken during the
// run and what they answered.
type groupRun struct {
	tb      topologytest.TB
	c       *Case
	addr    string
	shared  *Built // failure counts and side effects, shared by every instance
	ins     []*groupInst
	x       *Expected
	global  string // the global input's name, or ""
	admin   *iggy.Client
	sources []string // every topic the topology reads
	reads   map[[2]string]*keyReads
	// answered, withheld and moving count the owners' reads: answered,
	// withheld (an error: not confirmed yet, the partition moved) and not
	// taken (no one instance served the partition); stale the standby
	// reads answered (GetStandby); steps the plan's steps as they ran.
	answered, withheld, moving, stale int
	// dups counts the messages of the dead-letter and To topics sent
	// again under an id already there (design §15's one window).
	dups  int
	steps []string
}

// keyReads is what the owners answered for one key of one table, in the
// order the answers came (one read at a time: each read begins after the
// one before was answered).
type keyReads struct {
	last  Row
	found bool
	// at and rows: each owner answer with a row, and when it came.
	at   []time.Time
	rows []Row
}

// runGroup runs c as its group plan says (Knobs.Group) over an in-memory
// Iggy broker, checks every read taken during the run as it comes, waits
// until the group settled and everything is processed, and reads back
// every table from the partitions' owners, the dead letters and the
// outputs.
func runGroup(tb topologytest.TB, c *Case) (*Observed, error) {
	tb.Helper()
	ctx := context.Background()
	srv, err := iggytest.NewServer()
	if err != nil {
		return nil, fmt.Errorf("starting the in-memory Iggy broker: %w", err)
	}
	defer func() { _ = srv.Close() }()
	admin, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"), iggy.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, fmt.Errorf("connecting to the in-memory Iggy broker: %w", err)
	}
	defer func() { _ = admin.Close() }()
	g := &groupRun{tb: tb, c: c, addr: srv.Addr(), shared: Build(c), x: Expect(c), reads: map[[2]string]*keyReads{}}
	defer g.closeAll()
	for _, in := range c.Inputs {
		if in.Global {
			g.global = in.Name
		}
	}
	prog, err := g.shared.Topo.Build()
	if err != nil {
		return nil, fmt.Errorf("building the topology: %w", err)
	}
	g.admin, g.sources = admin, prog.Sources()
	for _, name := range prog.Sources() {
		st, tp, _ := strings.Cut(name, "/")
		if err := admin.EnsureTopic(ctx, st, tp, c.Parts); err != nil {
			return nil, fmt.Errorf("creating topic %s: %w", name, err)
		}
	}
	for range c.Group.Instances {
		if err := g.start(nil); err != nil {
			return nil, err
		}
	}
	sinks := map[string]connector.Sink{}
	defer func() {
		for _, sk := range sinks {
			if cl, ok := sk.(interface{ Close(context.Context) error }); ok {
				_ = cl.Close(ctx)
			}
		}
	}()
	where := map[string]int{} // source/partition/offset → log index
	next := map[string]uint64{}
	pos := 0
	for i, n := range c.Chunks {
		batch := map[string][]connector.Message{}
		var order []string
		for range n {
			rec := c.Log[pos]
			src, m, err := g.message(rec)
			if err != nil {
				return nil, err
			}
			at := fmt.Sprintf("%s/%d", src, m.Partition)
			where[fmt.Sprintf("%s/%d", at, next[at])] = pos
			next[at]++
			if _, ok := batch[src]; !ok {
				order = append(order, src)
			}
			batch[src] = append(batch[src], m)
			pos++
		}
		for _, src := range order {
			sk, ok := sinks[src]
			if !ok {
				if sk, err = admin.OpenSink(ctx, src, c.Parts); err != nil {
					return nil, fmt.Errorf("opening a producer of %s: %w", src, err)
				}
				sinks[src] = sk
			}
			if err := sk.Send(ctx, batch[src]); err != nil {
				return nil, fmt.Errorf("producing to %s: %w", src, err)
			}
		}
		if i < len(c.Group.Ops) {
			if err := g.step(c.Group.Ops[i], c.Group.Who[i]); err != nil {
				return nil, err
			}
		}
		if err := g.readAll(); err != nil {
			return nil, err
		}
	}
	var o *Observed
	for try := 0; ; try++ {
		owner, err := g.settle()
		if err != nil {
			return nil, err
		}
		if err := g.readAll(); err != nil {
			return nil, err
		}
		o, err = g.observeTables(owner)
		if err == nil {
			break
		}
		if try == 3 || !errors.Is(err, topology.ErrNotConfirmed) {
			return nil, err
		}
	}
	if err := g.observeOutputs(ctx, admin, prog.Sources()[0]+".dlq", where, o); err != nil {
		return nil, err
	}
	o.Group = fmt.Sprintf("group steps %v; owner reads %d answered, %d withheld, %d of a moving partition; %d standby reads answered; %d messages sent again under their id; at the end%s",
		g.steps, g.answered, g.withheld, g.moving, g.stale, g.dups, g.describe())
	return o, nil
}

// start starts an instance: again over its store (in), or a new one (nil).
func (g *groupRun) start(in *groupInst) error {
	ctx := context.Background()
	if in == nil {
		in = &groupInst{name: fmt.Sprintf("i%d", len(g.ins)), dir: g.tb.TempDir()}
		g.ins = append(g.ins, in)
	}
	cl, err := iggy.Connect(ctx, g.addr, iggy.WithCredentials("iggy", "iggy"), iggy.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return fmt.Errorf("instance %s: connecting: %w", in.name, err)
	}
	in.cl, in.b = cl, build(g.c, g.shared, false)
	in.crashed.Store(false)
	conn := patientConn{Client: cl, g: g, in: in}
	grp := cl.Group(groupStream, iggy.WithSessionTimeout(groupSession), iggy.WithInstanceID(in.name))
	opts := []topology.OpenOption{topology.WithGroup(grp), topology.WithLogger(slog.New(slog.DiscardHandler)),
		topology.WithSnapshotEvery(g.c.Group.SnapshotEvery)}
	if g.c.Group.Standbys > 0 {
		opts = append(opts, topology.WithStandbys(g.c.Group.Standbys))
	}
	app, err := topology.Open(ctx, in.b.Topo, conn, in.dir, opts...)
	if err != nil {
		_ = cl.Close()
		return fmt.Errorf("instance %s: opening: %w", in.name, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	in.app, in.stop, in.done, in.up = app, cancel, make(chan error, 1), true
	go func() { in.done <- app.Run(rctx) }()
	return nil
}

// halt stops a running instance: cleanly (Run returns, it leaves the
// group), or as a crash (its connection is cut first).
func (g *groupRun) halt(in *groupInst, crash bool) error {
	if crash {
		in.crashed.Store(true)
		_ = in.cl.Close()
	}
	in.stop()
	var runErr error
	select {
	case runErr = <-in.done:
	case <-time.After(groupHang):
		return fmt.Errorf("instance %s: Run did not return within %v of being stopped", in.name, groupHang)
	}
	in.up = false
	cerr := in.app.Close()
	if !crash {
		_ = in.cl.Close()
		if runErr != nil {
			return fmt.Errorf("instance %s: Run of an instance stopped cleanly: %w", in.name, runErr)
		}
		if cerr != nil {
			return fmt.Errorf("instance %s: Close: %w", in.name, cerr)
		}
	}
	return nil
}

// closeAll stops every running instance (at the end of the run).
func (g *groupRun) closeAll() {
	for _, in := range g.ins {
		if in.up {
			if err := g.halt(in, false); err != nil {
				g.tb.Errorf("%v", err)
			}
		}
	}
}

// step runs one step of the plan. A stop or crash of the last running
// instance and a restart with none stopped are joins instead; a join when
// four run is nothing.
func (g *groupRun) step(op GroupOp, who int) error {
	var up, down []*groupInst
	for _, in := range g.ins {
		if in.up {
			up = append(up, in)
		} else {
			down = append(down, in)
		}
	}
	if (op == GroupStop || op == GroupCrash) && len(up) < 2 || op == GroupRestart && len(down) == 0 {
		op = GroupJoin
	}
	switch op {
	case GroupStop, GroupCrash:
		in := up[who%len(up)]
		g.steps = append(g.steps, op.String()+" "+in.name)
		return g.halt(in, op == GroupCrash)
	case GroupRestart:
		in := down[who%len(down)]
		g.steps = append(g.steps, "restart "+in.name)
		return g.start(in)
	case GroupJoin:
		if len(up) < 4 {
			g.steps = append(g.steps, fmt.Sprintf("join i%d", len(g.ins)))
			return g.start(nil)
		}
	}
	return nil
}

// message is rec as a producer sends it: to its input, to the partition
// of its key.
func (g *groupRun) message(rec Rec) (string, connector.Message, error) {
	c := g.c
	in := c.Inputs[rec.Input]
	m := connector.Message{Key: []byte(rec.Ev.K), Partition: connector.PartitionOf([]byte(rec.Ev.K), c.Parts), HasPartition: true}
	if in.Foreign {
		e := rec.Ev
		e.Tag = in.tagOf(rec)
		payload, err := json.Marshal(e)
		if err != nil {
			return "", m, fmt.Errorf("encoding event #%d: %w", e.ID, err)
		}
		if rec.Kind == RecUnclassified {
			payload = []byte("garbage, not an event")
		}
		m.Payload = payload
		return in.Name, m, nil
	}
	b := g.shared
	decl := b.Decls[rec.Input][min(rec.Type, len(b.Decls[rec.Input])-1)]
	switch rec.Kind {
	case RecUnknownType, RecBadHeaders:
		decl = b.Unknown[rec.Input]
	case RecSkipped:
		decl = b.Skipped[rec.Input]
	}
	env, err := decl.Envelope(rec.Ev)
	if err != nil {
		return "", m, fmt.Errorf("encoding event #%d: %w", rec.Ev.ID, err)
	}
	m.Payload = env.Payload
	switch rec.Kind {
	case RecBadPayload:
		m.Payload = []byte("{not json")
	case RecBadHeaders:
		return in.Name, m, nil // no strand headers
	}
	if m.Headers, err = env.Headers.AppendFields(nil); err != nil {
		return "", m, fmt.Errorf("encoding the headers of event #%d: %w", rec.Ev.ID, err)
	}
	return in.Name, m, nil
}

// owners returns, per partition, the one running instance that serves it,
// or nil when none or several do.
func (g *groupRun) owners() []*groupInst {
	out := make([]*groupInst, g.c.Parts)
	for p := range g.c.Parts {
		n := 0
		for _, in := range g.ins {
			if in.up && in.app.Phase(p) == topology.Serving {
				out[p] = in
				n++
			}
		}
		if n != 1 {
			out[p] = nil
		}
	}
	return out
}

// settle waits until every partition is served by exactly one running
// instance and every running instance has processed everything: nothing
// behind, nothing parked or held, its outboxes empty.
func (g *groupRun) settle() ([]*groupInst, error) {
	start := time.Now()
	moved, last := start, ""
	for {
		// One instance's outbox feeds another's source (KeyBy): the pass
		// counts only if no source grew while it ran.
		before, err := g.ends()
		if err != nil {
			return nil, err
		}
		owner := g.owners()
		ok := true
		for _, in := range owner {
			ok = ok && in != nil
		}
		for _, in := range g.ins {
			if !ok || !in.up {
				continue
			}
			// In a group Stats lists only the partitions the instance
			// serves (and a global source's every partition).
			for _, st := range in.app.Stats() {
				for _, ps := range st.Partitions {
					ok = ok && ps.ParkedKeys == 0 && ps.HeldKeys == 0
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			ok = ok && in.app.WaitCaughtUp(ctx) == nil
			cancel()
		}
		after, err := g.ends()
		if err != nil {
			return nil, err
		}
		if ok && after == before && slicesEqual(owner, g.owners()) {
			return owner, nil
		}
		now := time.Now()
		if fp := g.progress(after); fp != last {
			moved, last = now, fp
		}
		if now.Sub(moved) > groupIdle || now.Sub(start) > groupHang {
			var b strings.Builder
			for _, in := range g.ins {
				if in.up {
					fmt.Fprintf(&b, "\n  %s: %+v", in.name, in.app.Ownership())
					for _, st := range in.app.Stats() {
						fmt.Fprintf(&b, "\n    %s: %d keys parked", st.Source, st.ParkedKeys)
						for _, ps := range st.Partitions {
							fmt.Fprintf(&b, "; partition %+v", ps)
						}
					}
				}
			}
			return nil, fmt.Errorf("the group did not settle: nothing moved for %v (%v since the wait began):%s",
				now.Sub(moved).Round(time.Millisecond), now.Sub(start).Round(time.Millisecond), b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// progress returns what moves while the group works towards settling:
// the sources' end offsets (ends), who serves what, and per running
// instance and served partition how far it got (checkpoint, end, applied
// records, outbox and dead letters, parked and held keys). settle fails
// only when it stays the same for groupIdle.
func (g *groupRun) progress(ends uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", ends)
	for _, in := range g.owners() {
		if in == nil {
			b.WriteString(" -")
		} else {
			b.WriteString(" " + in.name)
		}
	}
	for _, in := range g.ins {
		if !in.up {
			continue
		}
		fmt.Fprintf(&b, "|%s %v", in.name, in.app.Ownership())
		for _, st := range in.app.Stats() {
			for _, ps := range st.Partitions {
				fmt.Fprintf(&b, ";%s/%d %d %d %d %d %d %d %d %d", st.Source, ps.Partition, ps.Next, ps.End, ps.Counters.Applied,
					ps.Counters.OutboxPublished, ps.Counters.OutboxCommitted, ps.Counters.DeadLettered, ps.ParkedKeys, ps.HeldKeys)
			}
		}
	}
	return b.String()
}

// patientConn is the connector of a group case's instance: its sinks
// flush at Close until nothing moved for groupIdle (see patientSink).
// Every other method is the client's, so the optional interfaces
// (Bookmarks, ForeignConnector, ...) are still there.
type patientConn struct {
	*iggy.Client
	g  *groupRun
	in *groupInst
}

// OpenSink opens the client's sink, made patient at Close.
func (c patientConn) OpenSink(ctx context.Context, topic string, partitions uint32) (connector.Sink, error) {
	sk, err := c.Client.OpenSink(ctx, topic, partitions)
	if err != nil {
		return nil, err
	}
	is, ok := sk.(*iggy.Sink)
	if !ok {
		return sk, nil
	}
	return patientSink{Sink: is, g: c.g, in: c.in}, nil
}

// patientSink is an Iggy sink whose Close first flushes what is queued
// for as long as the topic's end offsets keep moving: App.Close gives each
// sink a fixed 10 s, which a loaded machine can exceed while the in-memory
// broker still takes every message (the "Close: iggy: flush: context
// deadline exceeded" of issue 33 item 7). A flush that makes no progress
// for groupIdle still fails the run. An instance halted as a crash
// closes at once, as before (its connection is cut: nothing to wait for).
type patientSink struct {
	*iggy.Sink
	g  *groupRun
	in *groupInst
}

// Close flushes patiently, then closes the sink with ctx (nothing is
// left to deliver by then).
func (s patientSink) Close(ctx context.Context) error {
	if s.in.crashed.Load() {
		return s.Sink.Close(ctx)
	}
	st, tp, _ := strings.Cut(s.Name(), "/")
	start := time.Now()
	moved, last := start, ""
	for {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := s.Flush(fctx)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			break // flushed, or nothing more a flush can do (Close reports it)
		}
		now := time.Now()
		if ends, eerr := s.g.admin.EndOffsets(context.WithoutCancel(ctx), st, tp); eerr == nil {
			if fp := fmt.Sprint(ends); fp != last {
				moved, last = now, fp
			}
		}
		if now.Sub(moved) > groupIdle || now.Sub(start) > groupHang {
			return fmt.Errorf("flushing %s at Close: nothing published for %v (%v since Close began): %w",
				s.Name(), now.Sub(moved).Round(time.Millisecond), now.Sub(start).Round(time.Millisecond), err)
		}
	}
	return s.Sink.Close(ctx)
}

func slicesEqual(a, b []*groupInst) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// readAll reads every key of every table the model ends with, through
// the instance that serves its partition now (a partition moving is
// skipped, a read withheld is allowed), and checks the answer: never
// older than an answer before it (design §2: what a reader sees is never
// taken back), and never anything the log does not lead to. With
// standbys it also reads each key from the other instances' standby
// copies (GetStandby) and checks that what they answer is no older than
// their staleness allows.
func (g *groupRun) readAll() error {
	owner := g.owners()
	for t, rows := range g.x.Tables {
		for _, k := range sortedKeys(rows, rows) {
			p := connector.PartitionOf([]byte(k), g.c.Parts)
			in := owner[p]
			if in == nil {
				g.moving++
				continue
			}
			id := [2]string{g.c.Tables[t], k}
			kr := g.reads[id]
			if kr == nil {
				kr = &keyReads{}
				g.reads[id] = kr
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			v, ok, err := in.b.Tables[t].Get(ctx, k)
			cancel()
			if err != nil {
				g.withheld++
			} else {
				g.answered++
				now := time.Now()
				switch {
				case !ok && kr.found:
					return fmt.Errorf("%w: table %s key %q: %s answered no row, after a read answered %s", ErrMismatch, id[0], k, in.name, diffRows(kr.last, Row{}))
				case ok && kr.found && !rowBefore(kr.last, v):
					return fmt.Errorf("%w: table %s key %q: %s answered a row older than a read before it: %s", ErrMismatch, id[0], k, in.name, diffRows(v, kr.last))
				case ok && !rowBefore(v, rows[k]):
					return fmt.Errorf("%w: table %s key %q: %s answered a row the log does not lead to: %s", ErrMismatch, id[0], k, in.name, diffRows(v, rows[k]))
				}
				if ok {
					kr.last, kr.found = v, true
					kr.at, kr.rows = append(kr.at, now), append(kr.rows, v)
				}
			}
			// A global table's rows are each instance's own fold of the
			// global input (§20), not the owner's commits a copy follows.
			if g.c.Group.Standbys == 0 || g.globalTable(t) {
				continue
			}
			for _, sb := range g.ins {
				if !sb.up || sb == in {
					continue
				}
				if err := g.readStandby(sb, t, k, p, kr); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// staleBound is the bound of the standby reads.
const staleBound = 2 * time.Second

// readStandby reads key k of table t from sb's standby copy and checks the
// answer: a row the log leads to, with a staleness within the bound, that
// holds every answer an owner gave before the copy was last current.
func (g *groupRun) readStandby(sb *groupInst, t int, k string, p uint32, kr *keyReads) error {
	begin := time.Now()
	v, ok, _, st, err := sb.b.Tables[t].GetStandby(context.Background(), sb.app, k, staleBound)
	if err != nil {
		return nil // no copy current within the bound here: nothing answered
	}
	g.stale++
	name := g.c.Tables[t]
	if st.Partition != p || st.Age > staleBound || st.Age < 0 {
		return fmt.Errorf("%w: table %s key %q: the standby read of %s says %+v (partition %d, bound %v)", ErrMismatch, name, k, sb.name, st, p, staleBound)
	}
	if ok && !rowBefore(v, g.x.Tables[t][k]) {
		return fmt.Errorf("%w: table %s key %q: the standby copy of %s answered a row the log does not lead to: %s", ErrMismatch, name, k, sb.name, diffRows(v, g.x.Tables[t][k]))
	}
	// The copy held every commit in the changelog at begin − Age or later;
	// an owner's answer received before then was confirmed, so in it.
	current := begin.Add(-st.Age)
	if i := kr.missedBy(current, v, ok); i >= 0 {
		return fmt.Errorf("%w: table %s key %q: the standby copy of %s (staleness %v) answered %s, older than what an owner answered %v before it was current",
			ErrMismatch, name, k, sb.name, st.Age, diffRows(v, kr.rows[i]), current.Sub(kr.at[i]))
	}
	return nil
}

// missedBy returns the index of the newest owner answer received by
// current if a stale answer (v, found ok) that was current then does not
// hold it, or -1.
func (kr *keyReads) missedBy(current time.Time, v Row, ok bool) int {
	for i := len(kr.at) - 1; i >= 0; i-- {
		if kr.at[i].After(current) {
			continue
		}
		if !ok || !rowBefore(kr.rows[i], v) {
			return i
		}
		return -1
	}
	return -1
}

// rowBefore reports whether row a is a state row b went through: every
// lane of a a prefix of b's, every sum at most b's (amounts are positive),
// every observation and lookup of a in b. Reads of other inputs' tables
// (XLooks) are only required to be there: their values depend on timing.
func rowBefore(a, b Row) bool {
	for l, ids := range a.Lanes {
		if len(ids) > len(b.Lanes[l]) {
			return false
		}
		for i, id := range ids {
			if b.Lanes[l][i] != id {
				return false
			}
		}
	}
	for l, s := range a.Sums {
		if s > b.Sums[l] {
			return false
		}
	}
	for id, obs := range a.Obs {
		bo, ok := b.Obs[id]
		if !ok || len(bo) != len(obs) {
			return false
		}
		for l, n := range obs {
			if bo[l] != n {
				return false
			}
		}
	}
	for id, d := range a.Looks {
		if bd, ok := b.Looks[id]; !ok || bd != d {
			return false
		}
	}
	for id := range a.XLooks {
		if _, ok := b.XLooks[id]; !ok {
			return false
		}
	}
	return true
}

// observeTables reads every table partition by partition from the
// partition's owner (ScanPartition), and every row again with Get.
func (g *groupRun) observeTables(owner []*groupInst) (*Observed, error) {
	ctx := context.Background()
	o := &Observed{Tables: make([]map[string]Row, len(g.c.Tables)), DLs: map[string][]deadletter.Letter{},
		Outputs: map[int][]Ev{}, ForEach: map[int]map[int]int{}}
	for i, name := range g.c.Tables {
		o.Tables[i] = map[string]Row{}
		for p, in := range owner {
			err := in.b.Tables[i].ScanPartition(ctx, uint32(p), nil, func(_ []byte, k string, v Row) bool { o.Tables[i][k] = v; return true })
			if err != nil {
				return nil, fmt.Errorf("scanning partition %d of table %s on %s: %w", p, name, in.name, err)
			}
		}
		for k, v := range o.Tables[i] {
			in := owner[connector.PartitionOf([]byte(k), g.c.Parts)]
			got, ok, err := in.b.Tables[i].Get(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("reading table %s key %q on %s: %w", name, k, in.name, err)
			}
			if !ok || !equalRows(got, v) {
				return nil, fmt.Errorf("%w: table %s key %q: Get on %s gives %v (found %v), ScanPartition %v", ErrMismatch, name, k, in.name, got, ok, v)
			}
		}
	}
	return o, nil
}

// observeOutputs reads back the dead-letter topic and every To node's
// output topic, each message once by its id (design §15: a re-sent
// message keeps its id), and what the ForEach side effects saw.
func (g *groupRun) observeOutputs(ctx context.Context, admin *iggy.Client, dlq string, where map[string]int, o *Observed) error {
	msgs, err := g.readTopic(ctx, admin, dlq)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		dl, err := deadletter.Parse(m)
		if err != nil {
			return fmt.Errorf("a message of %s: %w", dlq, err)
		}
		ident := fmt.Sprintf("%s?%d/%d", dl.Source, dl.Partition, dl.Offset)
		var e Ev
		if idx, ok := where[fmt.Sprintf("%s/%d/%d", dl.Source, dl.Partition, dl.Offset)]; ok {
			ident = logIdentity(dl.Source, idx)
		} else if json.Unmarshal(dl.Payload, &e) == nil && e.ID > 0 {
			ident = idIdentity(dl.Source, e.ID)
		}
		o.DLs[ident] = append(o.DLs[ident], dl)
	}
	for _, n := range g.c.Nodes {
		if n.ForEach {
			o.ForEach[n.ID] = g.shared.ForEachSeen(n.ID)
		}
		if !n.To {
			continue
		}
		msgs, err := g.readTopic(ctx, admin, n.OutTopic)
		if err != nil {
			return err
		}
		decl := g.shared.Out[n.ID]
		for _, m := range msgs {
			r := memconn.RecordOf(m)
			if r.HeaderErr != nil || r.Headers.Tag != decl.Tag() {
				return fmt.Errorf("a message of %s is not an output of node %d (headers %+v, %v)", n.OutTopic, n.ID, r.Headers, r.HeaderErr)
			}
			e, err := decl.Decode(r.Payload)
			if err != nil {
				return fmt.Errorf("a message of %s: %w", n.OutTopic, err)
			}
			o.Outputs[n.ID] = append(o.Outputs[n.ID], e)
		}
	}
	return nil
}

// readTopic returns every message of topic (none when it does not
// exist), partition by partition, each id once (g.dups counts the
// others).
func (g *groupRun) readTopic(ctx context.Context, admin *iggy.Client, topic string) ([]connector.Message, error) {
	st, tp, _ := strings.Cut(topic, "/")
	ends, err := admin.EndOffsets(ctx, st, tp)
	if err != nil {
		if _, perr := admin.Partitions(ctx, st, tp); perr != nil {
			return nil, nil // the topic was never created: nothing was published
		}
		return nil, fmt.Errorf("reading the end offsets of %s: %w", topic, err)
	}
	seen := map[[16]byte]bool{}
	var out []connector.Message
	for p, end := range ends {
		sms, err := admin.Tail(ctx, st, tp, uint32(p), int(end))
		if err != nil {
			return nil, fmt.Errorf("reading partition %d of %s: %w", p, topic, err)
		}
		for _, sm := range sms {
			if sm.HeaderErr != nil {
				return nil, fmt.Errorf("partition %d offset %d of %s: %w", p, sm.Offset, topic, sm.HeaderErr)
			}
			if seen[sm.ID] {
				g.dups++
				continue
			}
			seen[sm.ID] = true
			out = append(out, connector.Message{ID: sm.ID, Headers: sm.Headers, Payload: sm.Payload, Partition: uint32(p), HasPartition: true})
		}
	}
	return out, nil
}

// describe says what each running instance serves and, per source and
// partition it serves, how far it got: for the log of a group case.
func (g *groupRun) describe() string {
	var b strings.Builder
	owner := g.owners()
	for _, in := range g.ins {
		if !in.up {
			continue
		}
		fmt.Fprintf(&b, "\n    %s:", in.name)
		for _, st := range in.app.Stats() {
			for _, ps := range st.Partitions {
				if owner[ps.Partition] == in {
					fmt.Fprintf(&b, " %s/%d next %d end %d applied %d outbox %d/%d dl %d;", st.Source, ps.Partition, ps.Next, ps.End,
						ps.Counters.Applied, ps.Counters.OutboxPublished, ps.Counters.OutboxCommitted, ps.Counters.DeadLettered)
				}
			}
		}
	}
	return b.String()
}

// ends returns the sum of the end offsets of every source of the topology.
func (g *groupRun) ends() (uint64, error) {
	var sum uint64
	for _, name := range g.sources {
		st, tp, _ := strings.Cut(name, "/")
		ends, err := g.admin.EndOffsets(context.Background(), st, tp)
		if err != nil {
			return 0, fmt.Errorf("reading the end offsets of %s: %w", name, err)
		}
		for _, e := range ends {
			sum += e
		}
	}
	return sum, nil
}

// globalTable reports whether table t is fed by the global input.
func (g *groupRun) globalTable(t int) bool {
	for _, n := range g.c.Nodes {
		if g.c.Inputs[n.Input].Global && slices.Contains(n.Tables, t) {
			return true
		}
	}
	return false
}
