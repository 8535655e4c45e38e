package topology

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/internal/scaleout/changelog"
	"github.com/strand-io/strand/internal/scaleout/rebalance"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// Scale-out (docs/design.md, "Scale-out"): the instances of one topology
// share the partitions of its sources through a connector.Group; each keeps
// the partitions it owns in its own store, logs every commit of them to the
// partition's changelog on the broker, and rebuilds a partition it gains
// from that changelog before it processes it.

// WithGroup makes the App one instance of a group of instances of its
// topology (same name, same sources) that share the partitions of its
// sources: Run joins the group and processes only the partitions it owns,
// each one after it rebuilt its rows from the partition's changelog. The
// sources must all have the same partition count, and the connector must
// be a connector.ForeignConnector (it reads the changelog's raw records);
// WithPartitions cannot be combined with it.
func WithGroup(g connector.Group) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if g == nil {
			return errors.New("strand: topology.WithGroup: nil group")
		}
		o.group = g
		return nil
	})
}

// WithQueryAddr sets the query address (host:port of the instance's query
// server) the App announces to its group, so that the other instances can
// forward queries of the partitions it owns. Only with WithGroup.
func WithQueryAddr(addr string) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if strings.ContainsAny(addr, " \t\n") {
			return fmt.Errorf("strand: topology.WithQueryAddr: %q is not an address", addr)
		}
		o.queryAddr = addr
		return nil
	})
}

// DefaultSnapshotEvery is the number of commits of a partition between two
// of its snapshots, unless WithSnapshotEvery says otherwise.
const DefaultSnapshotEvery = 2000

// WithSnapshotEvery sets how many commits of a partition go between two
// snapshots of its rows in its changelog (0: no snapshots). A new owner
// restores from the latest snapshot and the commits after it, so this
// bounds the restore time. Only with WithGroup.
func WithSnapshotEvery(commits int) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if commits < 0 {
			return fmt.Errorf("strand: topology.WithSnapshotEvery: %d, want 0 or more", commits)
		}
		o.snapEvery = &commits
		return nil
	})
}

// Phase is what an instance of a group does with one partition.
type Phase uint8

const (
	// NotOwned: another instance owns the partition (or nobody yet).
	NotOwned Phase = iota
	// Restoring: this instance owns it and is rebuilding its rows.
	Restoring
	// Serving: this instance owns it, processes it, and its rows here
	// are the partition's.
	Serving
)

func (p Phase) String() string {
	switch p {
	case NotOwned:
		return "not owned"
	case Restoring:
		return "restoring"
	case Serving:
		return "serving"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// PartitionStatus is one partition's state in an instance of a group.
type PartitionStatus struct {
	Partition uint32
	Phase     Phase
	Epoch     connector.Epoch
	// Restore is how far the last restore of the partition went.
	Restore RestoreProgress
}

// RestoreProgress is how far the rebuilding of a partition from its
// changelog is (stream.RestoreProgress).
type RestoreProgress = stream.RestoreProgress

// ChangelogTopic returns the name of the changelog topic of a topology
// whose first source is in Iggy stream streamName.
func ChangelogTopic(streamName, topology string) string {
	return streamName + "/strand-changelog-" + topology
}

// ChangelogKind is the kind of a changelog record (stream.ChangelogKind).
type ChangelogKind = stream.ChangelogKind

// The kinds of changelog record (stream's).
const (
	// ChangelogFence: a new owner took the partition over (Epoch, Member).
	ChangelogFence = stream.ChangelogFence
	// ChangelogCommit: one commit of the partition.
	ChangelogCommit = stream.ChangelogCommit
	// ChangelogSnapshot: part of a snapshot of the partition's rows.
	ChangelogSnapshot = stream.ChangelogSnapshot
	// ChangelogSnapshotEnd: a snapshot is complete.
	ChangelogSnapshotEnd = stream.ChangelogSnapshotEnd
)

// CheckpointRange is the offsets [From, Next) of one source a commit covers.
type CheckpointRange struct {
	Source     string
	From, Next uint64
}

// ChangelogEntry is one decoded changelog record.
type ChangelogEntry struct {
	Kind        ChangelogKind
	Epoch       connector.Epoch
	Member      connector.MemberID
	Seq         uint64 // commit: its number in the partition; snapshot end: the last commit it holds
	Checkpoints []CheckpointRange
}

// DecodeChangelog decodes the payload of a changelog record (read, for
// example, with an Iggy client's OpenForeignSource).
func DecodeChangelog(payload []byte) (ChangelogEntry, error) {
	r, err := changelog.Decode(payload)
	if err != nil {
		return ChangelogEntry{}, err
	}
	e := ChangelogEntry{Kind: r.Kind, Epoch: r.Meta.Epoch, Member: r.Meta.Member, Seq: r.Meta.Seq}
	for _, rg := range r.Meta.Ranges {
		e.Checkpoints = append(e.Checkpoints, CheckpointRange{Source: rg.Source, From: rg.From, Next: rg.Next})
	}
	return e, nil
}

// ChangelogVerdict is what the rules of a changelog say about an entry.
// It is stream.ChangelogVerdict.
type ChangelogVerdict = stream.ChangelogVerdict

// The verdicts (stream's).
const (
	ChangelogValid        = stream.ChangelogValid
	ChangelogFenced       = stream.ChangelogFenced
	ChangelogDuplicate    = stream.ChangelogDuplicate
	ChangelogInconsistent = stream.ChangelogInconsistent
	ChangelogOther        = stream.ChangelogOther
)

// ChangelogHistory follows one partition's changelog from its first
// record, entry by entry, as every reader does (Judge).
type ChangelogHistory struct{ h changelog.History }

// Epoch returns the current epoch: the highest fence judged so far.
func (h *ChangelogHistory) Epoch() connector.Epoch { return h.h.Epoch }

// Judge classifies the next entry of the partition and advances.
func (h *ChangelogHistory) Judge(e ChangelogEntry) ChangelogVerdict {
	r := changelog.Record{Kind: changelog.Kind(e.Kind), Meta: changelog.Meta{Epoch: e.Epoch, Member: e.Member, Seq: e.Seq}}
	return h.h.Next(&r)
}

// Phase returns what this App does with partition p: Serving for every
// partition it processes outside a group; in a group, what it does now.
func (a *App) Phase(p uint32) Phase {
	if a.grp == nil {
		if a.runs(p) {
			return Serving
		}
		return NotOwned
	}
	a.grp.mu.Lock()
	defer a.grp.mu.Unlock()
	if st := a.grp.parts[p]; st != nil {
		return st.phase
	}
	return NotOwned
}

// InGroup reports whether the App is an instance of a group (WithGroup).
func (a *App) InGroup() bool { return a.grp != nil }

// Membership returns the App's membership of its group while Run is in
// it, else nil.
func (a *App) Membership() connector.Membership {
	if a.grp == nil {
		return nil
	}
	a.grp.mu.Lock()
	defer a.grp.mu.Unlock()
	return a.grp.m
}

// Ownership returns the partitions this instance of a group owns or
// restores, in partition order (nil outside a group).
func (a *App) Ownership() []PartitionStatus {
	if a.grp == nil {
		return nil
	}
	a.grp.mu.Lock()
	defer a.grp.mu.Unlock()
	out := make([]PartitionStatus, 0, len(a.grp.parts))
	for p, st := range a.grp.parts {
		out = append(out, PartitionStatus{Partition: p, Phase: st.phase, Epoch: st.epoch, Restore: st.restore})
	}
	slices.SortFunc(out, func(x, y PartitionStatus) int { return int(x.Partition) - int(y.Partition) })
	return out
}

// servedStats narrows a source's stats, in a group, to the partitions the
// instance serves now: a processor keeps the last stats of every partition
// it ran, and those of a partition that moved away (its parked and held
// keys, its outbox, its lag) describe rows that are its new owner's.
// Outside a group, and for a global source (read whole by every instance),
// st is returned as it is.
func (a *App) servedStats(st stream.Stats) stream.Stats {
	if a.grp == nil || a.prog.global[st.Source] {
		return st
	}
	kept := st.Partitions[:0:0]
	st.ParkedKeys, st.ParkedRecords = 0, 0
	for _, ps := range st.Partitions {
		if !a.runs(ps.Partition) {
			continue
		}
		kept = append(kept, ps)
		st.ParkedKeys += ps.ParkedKeys
		st.ParkedRecords += ps.ParkedRecords
	}
	st.Partitions = kept
	return st
}

// group is an App's part in its group.
type group struct {
	g          connector.Group
	addr       string
	snapEvery  int
	standbys   int // WithStandbys (standby.go)
	partitions uint32
	topic      string
	sink       connector.Sink
	src        connector.Source
	marks      connector.Bookmarks
	clog       *changelog.Changelog // of the current Run

	mu    sync.Mutex
	m     connector.Membership
	parts map[uint32]*partState
}

type partState struct {
	phase        Phase
	epoch        connector.Epoch
	restore      RestoreProgress
	restoreStart time.Time
}

// gate is the processors' publish gate: rows of a partition are published
// once their commits are in its changelog.
func (gr *group) gate(ctx context.Context, p uint32) error {
	gr.mu.Lock()
	clog := gr.clog
	gr.mu.Unlock()
	if clog == nil {
		return fmt.Errorf("partition %d: %w", p, executor.ErrFenced)
	}
	return clog.Gate(ctx, p)
}

// check is the processors' last check before a send: the partition is
// still this instance's.
func (gr *group) check(p uint32) error {
	gr.mu.Lock()
	clog := gr.clog
	gr.mu.Unlock()
	if clog == nil {
		return fmt.Errorf("partition %d: %w", p, executor.ErrFenced)
	}
	return clog.Check(p)
}

func (gr *group) setPhase(p uint32, fn func(st *partState)) {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	st := gr.parts[p]
	if st == nil {
		st = &partState{}
		gr.parts[p] = st
	}
	fn(st)
	if st.phase == NotOwned {
		delete(gr.parts, p)
	}
}

// openGroup prepares the group part of Open.
func (a *App) openGroup(ctx context.Context, conn connector.Connector, o *openOptions, counts map[string]uint32) error {
	if len(o.partitions) > 0 {
		return errors.New("strand: topology.WithPartitions cannot be combined with topology.WithGroup: the group decides the partitions")
	}
	fc, ok := conn.(connector.ForeignConnector)
	if !ok {
		return fmt.Errorf("strand: topology.WithGroup: the connector (%T) cannot read raw records (connector.ForeignConnector), which the changelog needs", conn)
	}
	var n uint32
	for _, sn := range a.prog.Sources() {
		if a.prog.global[sn] {
			continue // read whole by every instance (global_group.go)
		}
		if n == 0 {
			n = counts[sn]
		} else if counts[sn] != n {
			return fmt.Errorf("strand: topology.WithGroup: sources have %d and %d partitions (%q); a group shares partitions of one count", n, counts[sn], sn)
		}
	}
	if n == 0 {
		return errors.New("strand: topology.WithGroup: every source is global (SourceNode.Global); a group shares the partitions of at least one source that is not")
	}
	first := a.prog.Sources()[0]
	streamName, _, ok := strings.Cut(first, "/")
	if !ok {
		return fmt.Errorf("strand: topology.WithGroup: source %q is not named stream/topic", first)
	}
	topic := ChangelogTopic(streamName, a.prog.Name())
	sink, err := conn.OpenSink(ctx, topic, n)
	if err != nil {
		return fmt.Errorf("changelog topic %q: %w", topic, err)
	}
	src, err := fc.OpenForeignSource(ctx, topic)
	if err != nil {
		return fmt.Errorf("changelog topic %q: %w", topic, err)
	}
	got, err := src.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("changelog topic %q: partition count: %w", topic, err)
	}
	if got != n {
		return fmt.Errorf("changelog topic %q has %d partitions, the sources %d", topic, got, n)
	}
	a.sinks[topic] = sink
	snapEvery := DefaultSnapshotEvery
	if o.snapEvery != nil {
		snapEvery = *o.snapEvery
	}
	marks, _ := conn.(connector.Bookmarks)
	a.grp = &group{g: o.group, addr: o.queryAddr, snapEvery: snapEvery, standbys: o.standbys, partitions: n, topic: topic,
		sink: sink, src: src, marks: marks, parts: map[uint32]*partState{}}
	a.db.SetReadGate(a.grp.readGate)             // group_reads.go
	a.db.SetConfirmedCheck(a.grp.confirmedCheck) // group_reads.go
	return nil
}

// runGroup is Run in a group: it joins, installs the changelog as the
// store's commit logger and drives a rebalance.Loop (the state machine of
// internal/scaleout/rebalance) until ctx ends or the membership ends.
func (a *App) runGroup(ctx context.Context) error {
	gr := a.grp
	log := a.log.With(slog.String("component", "strand/group"), slog.String("topology", a.prog.Name()))
	m, err := gr.g.Join(ctx, a.prog.Name(), gr.partitions, gr.addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("topology %q: join the group: %w", a.prog.Name(), err)
	}
	clog := changelog.New(a.db, gr.sink, gr.src, gr.topic, gr.marks, m, changelog.Options{
		Sources: a.groupSources(), SnapshotEvery: gr.snapEvery, Logger: a.log,
		Progress: func(rp changelog.RestoreProgress) {
			gr.setPhase(rp.Partition, func(st *partState) {
				if st.phase == NotOwned {
					return
				}
				took := st.restore.Took
				st.restore = rp
				st.restore.Took = took
				if rp.Done && !st.restoreStart.IsZero() {
					st.restore.Took = time.Since(st.restoreStart)
				}
			})
		},
	})
	a.db.SetCommitLogger(clog)
	// Every partition is logged: a commit of a partition this instance
	// does not own fails (ErrFenced) instead of changing its rows unseen.
	for p := range gr.partitions {
		a.db.LogPartition(p, true)
	}
	gr.mu.Lock()
	gr.m, gr.clog = m, clog
	gr.mu.Unlock()
	log.Info("strand: joined the group", "member", m.ID(), "partitions", gr.partitions, "query_addr", gr.addr)
	defer func() {
		gr.mu.Lock()
		gr.m, gr.clog = nil, nil
		gr.parts = map[uint32]*partState{}
		gr.mu.Unlock()
		_ = m.Close()
		for p := range gr.partitions {
			a.db.LogPartition(p, false)
		}
		a.db.SetCommitLogger(nil)
		log.Info("strand: left the group")
	}()
	loop, err := rebalance.NewLoop(rebalance.Config{
		Membership: m,
		Changelog:  groupChangelog{clog},
		Run:        a.runGeneration,
		Fenced:     fencedPartition,
		Retryable:  openFailed,
		Log:        log,
		OnChange:   gr.follow,
		Standbys:   gr.standbys,
		Partitions: gr.partitions,
	})
	if err != nil {
		return err
	}
	// The global sources run the whole membership, over all their
	// partitions, whatever the instance owns (global_group.go).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	globalDone := a.startGlobal(ctx, cancel)
	err = loop.Run(ctx)
	cancel()
	if gerr := globalDone(); gerr != nil {
		return fmt.Errorf("topology %q: %w", a.prog.Name(), errors.Join(err, gerr))
	}
	if err != nil {
		return fmt.Errorf("topology %q: %w", a.prog.Name(), err)
	}
	return nil
}

// runGeneration runs every source's processor over parts until ctx ends
// or one fails (which stops the others).
func (a *App) runGeneration(ctx context.Context, parts []uint32) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The folds start once the global tables caught up to the ends of
	// their topics now (global_group.go).
	if err := a.waitGlobal(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // the generation ended first
		}
		return err
	}
	errs := make([]error, len(a.procs))
	var wg sync.WaitGroup
	for i, proc := range a.procs {
		if a.prog.global[proc.Source()] {
			continue // runs beside the generations (runGroup)
		}
		wg.Go(func() {
			errs[i] = proc.RunPartitions(ctx, parts)
			if errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fencedPartition says whether err ends a partition's work because it is
// fenced, and the epoch it belongs to.
func fencedPartition(err error) (uint32, connector.Epoch, bool) {
	if !errors.Is(err, executor.ErrFenced) {
		return 0, 0, false
	}
	var fe *executor.FencedError
	if errors.As(err, &fe) {
		return fe.Partition, fe.Epoch, true
	}
	var pe *pipeline.PartitionError
	if errors.As(err, &pe) {
		return pe.Partition, 0, true
	}
	return 0, 0, false
}

// openFailed says whether err is a partition that could not be opened (its
// reader, as during a broker outage, or its rows): worth another
// generation, a bounded number of times (rebalance.MaxGenerationRetries).
func openFailed(err error) bool {
	var pe *pipeline.PartitionError
	return errors.As(err, &pe) && pe.Op == stream.OpOpen
}

// groupChangelog is the engine's Changelog as the rebalancing loop uses
// it: every call for one epoch.
type groupChangelog struct{ c *changelog.Changelog }

func (g groupChangelog) Restore(ctx context.Context, p uint32, e connector.Epoch) error {
	return g.c.Restore(ctx, p, e)
}
func (g groupChangelog) Serve(ctx context.Context, p uint32, e connector.Epoch) error {
	return g.c.ServeEpoch(ctx, p, e)
}
func (g groupChangelog) Flush(ctx context.Context, p uint32, e connector.Epoch) error {
	return g.c.FlushEpoch(ctx, p, e)
}
func (g groupChangelog) Lost(p uint32, e connector.Epoch) { g.c.LostEpoch(p, e) }

// Standby keeps a standby copy of p (rebalance.StandbyChangelog).
func (g groupChangelog) Standby(ctx context.Context, p uint32) error { return g.c.Standby(ctx, p) }

// follow keeps the phases Phase and Ownership report in step with the
// loop's.
func (gr *group) follow(states []rebalance.PartitionState) {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	seen := map[uint32]bool{}
	for _, s := range states {
		seen[s.P] = true
		ph := Restoring
		if s.Current {
			ph = Serving
		}
		st := gr.parts[s.P]
		if st == nil {
			st = &partState{}
			gr.parts[s.P] = st
		}
		if st.epoch != s.Epoch || st.phase == NotOwned {
			st.restore, st.restoreStart = RestoreProgress{}, time.Now()
		} else if ph == Restoring && st.phase == Serving {
			// restored again under the same epoch
			st.restore, st.restoreStart = RestoreProgress{}, time.Now()
		}
		st.phase, st.epoch = ph, s.Epoch
	}
	for p := range gr.parts {
		if !seen[p] {
			delete(gr.parts, p)
		}
	}
}
