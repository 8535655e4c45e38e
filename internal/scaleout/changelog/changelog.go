package changelog

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// SnapshotBookmark is the name under which the offset of a partition's
// latest complete snapshot is kept (connector.Bookmarks) on its changelog.
const SnapshotBookmark = "strand-snapshot"

// Limits of one changelog send and of a snapshot chunk.
const (
	clogRoundRows   = 1024
	clogRoundBytes  = 4 << 20
	clogChunkBytes  = 1 << 20
	clogPollRecords = 128
	clogResendAfter = 2 * time.Second
)

// positionKey is the FamilyChangelog row (after the partition) that keeps
// where this store's partition is in its changelog: the last commit it
// knows to be in the changelog, and that commit's offset. Commit rows are
// keyed by their number, which never reaches it.
var positionKey = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

type position struct {
	Seq    uint64          `json:"s"`
	Offset uint64          `json:"o"`
	Epoch  connector.Epoch `json:"e"`
}

// RestoreProgress is how far the restore of a partition is.
type RestoreProgress = stream.RestoreProgress

// Options configure New.
type Options struct {
	// Sources are the topology's sources (for the offsets a commit covers).
	Sources []string
	// SnapshotEvery is the number of commits of a partition between two
	// snapshots; 0: none.
	SnapshotEvery int
	Logger        *slog.Logger
	// Progress, when set, is told how a restore goes (about every second
	// and at its end).
	Progress func(RestoreProgress)
}

// Changelog keeps the changelog of the partitions this instance owns: it
// is the store's commit logger (every commit of an owned partition is
// stamped with the owner's epoch and a number, and written in the same
// batch as a row to publish), publishes those rows in order to the
// partition's changelog, reads them back to confirm them (and to learn of
// a newer owner's fence), writes snapshots, and rebuilds a partition from
// the changelog when this instance gains it (docs/design.md, "Scale-out").
type Changelog struct {
	db    *state.DB
	sink  connector.Sink
	src   connector.Source
	topic string
	marks connector.Bookmarks // may be nil
	m     connector.Membership
	opts  Options
	log   *slog.Logger
	// tables is the digest of the store's table ids (Meta.Tables).
	tables uint32

	mu    sync.Mutex
	parts map[uint32]*clogPart
	// unconfirmed holds the partitions forgotten with commits not
	// confirmed (changelog_reads.go), until restored again.
	unconfirmed map[uint32]bool
	// sb: the standby copies kept now (standby.go).
	sb standbys
}

// clogPart is one owned partition's changelog state; guarded by
// Changelog.mu.
type clogPart struct {
	epoch  connector.Epoch
	member connector.MemberID
	next   uint64            // number of the next commit to stamp
	hi     uint64            // the last commit stamped and applied
	last   map[string]uint64 // per source, the checkpoint of the last commit
	pend   []state.Checkpoint
	// verified is the last of its commits read back from the changelog,
	// at verifiedOff.
	verified, verifiedOff uint64
	deleted               uint64 // rows up to it are deleted
	fenceOff              uint64 // the offset of its fence
	lost                  bool
	lostC                 chan struct{} // closed when lost
	progress              chan struct{} // closed and replaced when verified moves
	wake                  chan struct{} // a commit was stamped
	sinceSnap             int
	snapping              bool
	track                 map[uint64]uint64 // while snapshotting: commit → offset
	snapFirst             map[uint64]uint64 // snapshot id → offset of its chunk 0
	snapEnded             map[uint64]bool
}

// New returns the changelog of db over sink and src (the
// changelog topic named topic, read with raw payloads), for the
// partitions m grants. Install it with db.SetCommitLogger.
func New(db *state.DB, sink connector.Sink, src connector.Source, topic string, marks connector.Bookmarks, m connector.Membership, opts Options) *Changelog {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Changelog{db: db, sink: sink, src: src, topic: topic, marks: marks, m: m, opts: opts, tables: tablesDigest(db.TableIDs()),
		log:   opts.Logger.With(slog.String("component", "strand/changelog")),
		parts: map[uint32]*clogPart{}}
}

// Stamp implements state.CommitLogger.
func (c *Changelog) Stamp(p uint32, cps []state.Checkpoint) (uint64, []byte, error) {
	c.mu.Lock()
	part := c.parts[p]
	if part == nil || part.lost {
		c.mu.Unlock()
		var e connector.Epoch
		if part != nil {
			e = part.epoch
		}
		return 0, nil, executor.Fenced("commit", p, e)
	}
	epoch := part.epoch
	c.mu.Unlock()
	if e, ok := c.m.Owns(p); !ok || e != epoch {
		return 0, nil, executor.Fenced("commit", p, epoch)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if part.lost || c.parts[p] != part {
		return 0, nil, executor.Fenced("commit", p, epoch)
	}
	meta := Meta{Epoch: epoch, Member: part.member, Seq: part.next, Tables: c.tables}
	for _, cp := range cps {
		meta.Ranges = append(meta.Ranges, Range{Source: cp.Source, From: part.last[cp.Source], Next: cp.Next})
	}
	head, err := json.Marshal(&meta)
	if err != nil {
		return 0, nil, err
	}
	part.pend = cps
	part.next++
	return meta.Seq, head, nil
}

// Done implements state.CommitLogger.
func (c *Changelog) Done(p uint32, seq uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	part := c.parts[p]
	if part == nil {
		return
	}
	if !ok {
		part.next = seq
		part.pend = nil
		return
	}
	for _, cp := range part.pend {
		part.last[cp.Source] = cp.Next
	}
	part.pend = nil
	part.hi = seq
	select {
	case part.wake <- struct{}{}:
	default:
	}
}

// Gate returns once every commit of partition p stamped so far is
// confirmed in the changelog (so that rows an outbox read may be
// published), or executor.ErrFenced once p is lost or not kept here.
func (c *Changelog) Gate(ctx context.Context, p uint32) error {
	c.mu.Lock()
	part := c.parts[p]
	if part == nil {
		c.mu.Unlock()
		return executor.Fenced("publish rows", p, 0)
	}
	target, epoch := part.next-1, part.epoch
	c.mu.Unlock()
	if err := c.waitVerified(ctx, part, target); err != nil {
		if err == executor.ErrFenced {
			return executor.Fenced("publish rows", p, epoch)
		}
		return err
	}
	return nil
}

// waitVerified waits until part's commits up to target (or up to the last
// one stamped, if fewer) are confirmed.
func (c *Changelog) waitVerified(ctx context.Context, part *clogPart, target uint64) error {
	for {
		c.mu.Lock()
		if part.lost {
			c.mu.Unlock()
			return executor.ErrFenced
		}
		if part.verified >= min(target, part.next-1) {
			c.mu.Unlock()
			return nil
		}
		ch, lost := part.progress, part.lostC
		c.mu.Unlock()
		select {
		case <-ch:
		case <-lost:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Check returns executor.ErrFenced unless p is kept here and this member still owns
// it with the epoch it was restored under (its lease holds): outboxes call
// it at the last moment before a send, so that an owner resumed after a
// pause does not send what the new owner sends.
func (c *Changelog) Check(p uint32) error {
	epoch, kept := c.EpochOf(p)
	if !kept {
		return executor.Fenced("publish rows", p, epoch)
	}
	if e, ok := c.m.Owns(p); !ok || e != epoch {
		return executor.Fenced("publish rows", p, epoch)
	}
	return nil
}

// Flush waits until every commit of p is confirmed in the changelog.
func (c *Changelog) Flush(ctx context.Context, p uint32) error { return c.Gate(ctx, p) }

// Lost marks p lost: its commits fail with executor.ErrFenced from now on, and its
// rows are no longer published.
func (c *Changelog) Lost(p uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if part := c.parts[p]; part != nil && !part.lost {
		part.lost = true
		close(part.lostC)
	}
}

// Forget stops keeping p (after it was released or lost): its commits
// fail from now on (the partition stays logged, with nobody to stamp it).
func (c *Changelog) Forget(p uint32) {
	c.Lost(p)
	c.mu.Lock()
	c.noteUnconfirmed(p)
	delete(c.parts, p)
	c.mu.Unlock()
	c.db.ResetConfirmedView(p, false)
}

// Owned reports whether p is restored and kept by this changelog.
func (c *Changelog) Owned(p uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	part := c.parts[p]
	return part != nil && !part.lost
}

// EpochOf returns the epoch p is kept with.
func (c *Changelog) EpochOf(p uint32) (connector.Epoch, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if part := c.parts[p]; part != nil {
		return part.epoch, !part.lost
	}
	return 0, false
}

func (c *Changelog) send(ctx context.Context, p uint32, payloads ...[]byte) error {
	msgs := make([]connector.Message, len(payloads))
	key := binary.BigEndian.AppendUint32(nil, p)
	for i, pl := range payloads {
		msgs[i] = connector.Message{Key: key, Payload: pl, Partition: p, HasPartition: true}
	}
	return c.sink.Send(ctx, msgs)
}

// Where a restore may begin, from the cheapest: keeping the local rows,
// the latest snapshot, the changelog's start.
const (
	levelReuse = iota
	levelSnapshot
	levelStart
)

// restartError asks Restore to begin again at level next.
type restartError struct{ next int }

func (r restartError) Error() string { return fmt.Sprintf("restart the restore at level %d", r.next) }

// Restore takes partition p over with epoch: it writes the fence of the
// epoch to the changelog, then brings the store's rows of p to the valid
// history up to that fence (keeping the local rows when they are current,
// else from the latest snapshot and the commits after it, else from the
// changelog's start), and from then on logs the commits of p. Call Serve
// for p afterwards.
func (c *Changelog) Restore(ctx context.Context, p uint32, epoch connector.Epoch) error {
	c.mu.Lock()
	if old := c.parts[p]; old != nil && !old.lost {
		old.lost = true
		close(old.lostC)
	}
	delete(c.parts, p)
	c.mu.Unlock()
	c.db.ResetConfirmedView(p, true) // reads.go: no view of p is confirmed until it is restored
	member := c.m.ID()
	fence, err := encodeClog(KindFence, &Meta{Epoch: epoch, Member: member, Tables: c.tables}, nil)
	if err != nil {
		return err
	}
	if err := retry(ctx, c.log, "write the fence of partition", p, func() error { return c.send(ctx, p, fence) }); err != nil {
		return err
	}
	var res rebuilt
	for level := levelReuse; ; {
		res, err = c.rebuild(ctx, p, epoch, member, level)
		var rs restartError
		if errors.As(err, &rs) {
			level = rs.next
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	last := map[string]uint64{}
	for _, s := range c.opts.Sources {
		next, _, err := c.db.Checkpoint(s, p)
		if err != nil {
			return fmt.Errorf("partition %d: checkpoint of %q: %w", p, s, err)
		}
		last[s] = next
	}
	// Rows of commits already in the changelog are not published again;
	// the position says how far it is.
	tx := c.db.NewTxn()
	if err := c.db.RowsFrom(ctx, state.FamilyChangelog, p, nil, func(k, _ []byte) error {
		if len(k) == 8 && binary.BigEndian.Uint64(k) <= res.last {
			tx.DeleteRow(state.FamilyChangelog, p, k)
		}
		return nil
	}); err != nil {
		tx.Discard()
		return fmt.Errorf("partition %d: read changelog rows: %w", p, err)
	}
	pos, _ := json.Marshal(position{Seq: res.last, Offset: res.lastOff, Epoch: res.lastEpoch})
	tx.PutRow(state.FamilyChangelog, p, positionKey, pos)
	// The applied writes were not synced one by one; this commit (with
	// the store's durability) makes them durable with it.
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("partition %d: store the changelog position: %w", p, err)
	}
	part := &clogPart{epoch: epoch, member: member, next: res.last + 1, hi: res.last, last: last,
		verified: res.last, verifiedOff: res.lastOff, deleted: res.last, fenceOff: res.fenceOff,
		lostC: make(chan struct{}), progress: make(chan struct{}), wake: make(chan struct{}, 1),
		snapFirst: map[uint64]uint64{}, snapEnded: map[uint64]bool{}}
	c.mu.Lock()
	c.parts[p] = part
	delete(c.unconfirmed, p)
	c.mu.Unlock()
	c.db.ResetConfirmedView(p, false)
	c.log.Info("strand: partition restored", "partition", p, "epoch", epoch, "commits", res.last,
		"applied", res.applied, "reused", res.reused, "snapshot", res.snapshot, "took", res.took.Round(time.Millisecond))
	return nil
}

type rebuilt struct {
	last, lastOff    uint64
	lastEpoch        connector.Epoch
	fenceOff         uint64
	applied          int
	reused, snapshot bool
	took             time.Duration
}

// rebuild reads the changelog of p up to the fence of (epoch, member) and
// applies what the store lacks. With reuse it first tries to keep the
// local rows; errRestart means they could not be kept.
func (c *Changelog) rebuild(ctx context.Context, p uint32, epoch connector.Epoch, member connector.MemberID, level int) (rebuilt, error) {
	start := time.Now()
	var res rebuilt
	b, err := c.begin(ctx, p, level)
	if err != nil {
		return res, err
	}
	h, from, localHead, mode, modeLevel := b.h, b.from, b.localHead, b.mode, b.modeLevel
	res.last, res.lastOff, res.lastEpoch, res.snapshot, res.applied = b.last, b.lastOff, b.lastEpoch, b.snapshot, b.applied
	rd, err := c.src.Open(ctx, p, from)
	if err != nil {
		return res, fmt.Errorf("partition %d: open the changelog at %d: %w", p, from, err)
	}
	defer rd.Close()
	var end uint64
	if eo, ok := c.src.(connector.EndOffsetter); ok {
		if ends, err := eo.EndOffsets(ctx); err == nil && int(p) < len(ends) {
			end = ends[p]
		}
	}
	report := func(off uint64, done bool) {
		if c.opts.Progress != nil {
			c.opts.Progress(RestoreProgress{Partition: p, From: from, Offset: off, End: end, Applied: res.applied,
				Snapshot: res.snapshot, Reused: mode == "reuse", Done: done})
		}
	}
	c.log.Info("strand: restoring partition", "partition", p, "epoch", epoch, "mode", mode, "from", from, "end", end)
	lastReport := time.Now()
	report(from, false)
	for {
		recs, err := rd.Poll(ctx, clogPollRecords)
		if err != nil {
			return res, fmt.Errorf("partition %d: read the changelog: %w", p, err)
		}
		for i := range recs {
			off := recs[i].Offset
			r, err := Decode(recs[i].Payload)
			if err != nil {
				c.log.Warn("strand: changelog record skipped", "partition", p, "offset", off, "err", err)
				continue
			}
			if r.Kind == KindFence && r.Meta.Epoch == epoch && r.Meta.Member == member {
				if mode == "reuse" && res.last < localHead.Seq {
					// The store holds commits the changelog never got.
					return res, restartError{levelSnapshot}
				}
				res.fenceOff, res.reused, res.took = off, mode == "reuse", time.Since(start)
				report(off+1, true)
				return res, nil
			}
			if r.Kind == KindFence && r.Meta.Epoch > epoch {
				return res, fmt.Errorf("partition %d: epoch %d is already fenced by epoch %d: %w", p, epoch, r.Meta.Epoch, executor.Fenced("restore", p, epoch))
			}
			prev := h
			switch h.Next(&r) {
			case Valid:
				if r.Kind != KindCommit {
					continue
				}
				if mode == "reuse" && r.Meta.Seq <= localHead.Seq {
					if r.Meta.Epoch != localHead.Epoch {
						return res, restartError{levelSnapshot} // another owner's commit where the store has its own
					}
				} else if err := c.sameTables(&r); err != nil {
					return res, fmt.Errorf("partition %d: commit %d at offset %d: %w", p, r.Meta.Seq, off, err)
				} else if err := c.db.ApplyLogged(ctx, p, r.Writes); err != nil {
					return res, fmt.Errorf("partition %d: apply commit %d at offset %d: %w", p, r.Meta.Seq, off, err)
				} else {
					res.applied++
				}
				res.last, res.lastOff, res.lastEpoch = r.Meta.Seq, off, r.Meta.Epoch
			case Inconsistent:
				if modeLevel < levelStart {
					c.log.Warn("strand: changelog does not follow on from where the restore began; restoring from its start",
						"partition", p, "mode", mode, "offset", off, "epoch", r.Meta.Epoch, "seq", r.Meta.Seq, "current_epoch", prev.Epoch, "last", prev.Last)
					return res, restartError{modeLevel + 1}
				}
				return res, fmt.Errorf("partition %d: %w: commit %d of epoch %d at offset %d follows commit %d of epoch %d",
					p, ErrBadChangelog, r.Meta.Seq, r.Meta.Epoch, off, prev.Last, prev.Epoch)
			}
		}
		if n := len(recs); n > 0 && time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			report(recs[n-1].Offset+1, false)
			c.log.Info("strand: restoring partition", "partition", p, "offset", recs[n-1].Offset+1, "end", end, "applied", res.applied)
		}
	}
}

// readStart is where a rebuild (a restore, or a standby copy) of a partition
// begins reading its changelog, and what it starts from.
type readStart struct {
	h             History
	from          uint64
	localHead     Meta // reuse: the store's last commit
	mode          string
	modeLevel     int
	last, lastOff uint64
	lastEpoch     connector.Epoch
	snapshot      bool
	applied       int
}

// begin picks the cheapest start at level or above (docs/design.md §15,
// "Restore"): the local rows with their position (reuse), the latest
// snapshot, the changelog's start. Below reuse it drops p's rows first.
func (c *Changelog) begin(ctx context.Context, p uint32, level int) (readStart, error) {
	b := readStart{mode: "full", modeLevel: levelStart}
	if level <= levelReuse {
		head, okHead, err := c.db.LogHead(p)
		if err != nil {
			return b, err
		}
		posRow, okPos, err := c.db.Row(state.FamilyChangelog, p, positionKey)
		if err != nil {
			return b, err
		}
		var pos position
		if okHead && okPos {
			if b.localHead, err = parseHead(head); err == nil {
				err = json.Unmarshal(posRow, &pos)
			}
			if err == nil && b.localHead.Seq >= pos.Seq {
				b.mode, b.modeLevel = "reuse", levelReuse
				b.from, b.h = pos.Offset+1, History{Epoch: pos.Epoch, Last: pos.Seq}
				b.last, b.lastOff, b.lastEpoch = pos.Seq, pos.Offset, pos.Epoch
			}
		}
	}
	if b.mode == "full" {
		if err := c.db.DropPartition(ctx, p); err != nil {
			return b, fmt.Errorf("partition %d: drop the local rows: %w", p, err)
		}
		if level <= levelSnapshot && c.marks != nil {
			if x, ok, err := c.marks.Bookmark(ctx, c.topic, p, SnapshotBookmark); err != nil {
				c.log.Warn("strand: reading the snapshot bookmark failed; restoring from the changelog's start", "partition", p, "err", err)
			} else if ok {
				snapHead, resume, n, err := c.loadSnapshot(ctx, p, x)
				if err == nil {
					b.mode, b.modeLevel = "snapshot", levelSnapshot
					b.snapshot = true
					b.applied += n
					b.from, b.h = resume+1, History{Epoch: snapHead.Epoch, Last: snapHead.Seq}
					b.last, b.lastOff, b.lastEpoch = snapHead.Seq, resume, snapHead.Epoch
				} else {
					c.log.Warn("strand: the latest snapshot could not be loaded; restoring from the changelog's start", "partition", p, "err", err)
					if err := c.db.DropPartition(ctx, p); err != nil {
						return b, err
					}
				}
			}
		}
	}
	return b, nil
}

// loadSnapshot applies the snapshot whose first chunk is at offset x, and
// returns its head (its last commit), the offset to go on after and the
// chunks applied.
func (c *Changelog) loadSnapshot(ctx context.Context, p uint32, x uint64) (Meta, uint64, int, error) {
	rd, err := c.src.Open(ctx, p, x)
	if err != nil {
		return Meta{}, 0, 0, err
	}
	defer rd.Close()
	var id uint64
	var next uint32
	for {
		recs, err := rd.Poll(ctx, clogPollRecords)
		if err != nil {
			return Meta{}, 0, 0, err
		}
		for i := range recs {
			r, err := Decode(recs[i].Payload)
			if err != nil {
				continue
			}
			if id == 0 {
				if r.Kind != KindSnapshotChunk || r.Meta.Index != 0 {
					return Meta{}, 0, 0, fmt.Errorf("offset %d holds no snapshot's first chunk", x)
				}
				id = r.Meta.Snapshot
			}
			if r.Meta.Snapshot != id {
				continue
			}
			switch r.Kind {
			case KindSnapshotChunk:
				if r.Meta.Index != next {
					return Meta{}, 0, 0, fmt.Errorf("snapshot %x: chunk %d where %d was due", id, r.Meta.Index, next)
				}
				if err := c.sameTables(&r); err != nil {
					return Meta{}, 0, 0, fmt.Errorf("snapshot %x chunk %d: %w", id, next, err)
				}
				if err := c.db.ApplyLogged(ctx, p, r.Writes); err != nil {
					return Meta{}, 0, 0, fmt.Errorf("snapshot %x chunk %d: %w", id, next, err)
				}
				next++
			case KindSnapshotEnd:
				if r.Meta.Chunks != next {
					return Meta{}, 0, 0, fmt.Errorf("snapshot %x: %d chunks read, its end says %d", id, next, r.Meta.Chunks)
				}
				head, ok, err := c.db.LogHead(p)
				if err != nil || !ok {
					return Meta{}, 0, 0, fmt.Errorf("snapshot %x: no head row (%v)", id, err)
				}
				m, err := parseHead(head)
				if err != nil {
					return Meta{}, 0, 0, err
				}
				if m.Seq != r.Meta.Seq {
					return Meta{}, 0, 0, fmt.Errorf("snapshot %x: head commit %d, its end says %d", id, m.Seq, r.Meta.Seq)
				}
				return m, r.Meta.Resume, int(next), nil
			}
		}
	}
}

// Serve publishes, confirms and snapshots partition p (restored by
// Restore) until ctx ends or p is lost: then it returns executor.ErrFenced.
func (c *Changelog) Serve(ctx context.Context, p uint32) error {
	c.mu.Lock()
	part := c.parts[p]
	c.mu.Unlock()
	if part == nil {
		return executor.Fenced("serve", p, 0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = c.publish(ctx, p, part); cancel() })
	wg.Go(func() { errs[1] = c.confirm(ctx, p, part); cancel() })
	wg.Wait()
	c.mu.Lock()
	lost := part.lost
	c.mu.Unlock()
	if lost {
		return executor.Fenced("serve", p, part.epoch)
	}
	return errors.Join(errs...)
}

// publish sends the rows of p's commits in order.
func (c *Changelog) publish(ctx context.Context, p uint32, part *clogPart) error {
	timer := time.NewTimer(clogResendAfter)
	defer timer.Stop()
	c.mu.Lock()
	sent := part.verified
	c.mu.Unlock()
	lastVerified, stuckSince := sent, time.Now()
	backoff := 50 * time.Millisecond
	for {
		c.mu.Lock()
		v, hi, progress := part.verified, part.hi, part.progress
		c.mu.Unlock()
		if v != lastVerified {
			lastVerified, stuckSince = v, time.Now()
		}
		sent = max(sent, v)
		if sent > v && time.Since(stuckSince) >= clogResendAfter {
			c.log.Warn("strand: changelog commits not confirmed in time; sending them again", "partition", p, "from", v+1, "to", sent)
			sent, stuckSince = v, time.Now()
		}
		if sent < hi {
			var payloads [][]byte
			size, lastSeq := 0, sent
			err := c.db.RowsFrom(ctx, state.FamilyChangelog, p, seqKey(sent+1), func(k, v []byte) error {
				if len(k) != 8 {
					return errStop
				}
				seq := binary.BigEndian.Uint64(k)
				if seq > hi || len(payloads) >= clogRoundRows || (size > 0 && size+len(v) > clogRoundBytes) {
					return errStop
				}
				pl, err := commitPayload(v)
				if err != nil {
					return fmt.Errorf("changelog row %d: %w", seq, err)
				}
				payloads = append(payloads, pl)
				size += len(pl)
				lastSeq = seq
				return nil
			})
			if err != nil && !errors.Is(err, errStop) {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("partition %d: read changelog rows: %w", p, err)
			}
			if len(payloads) > 0 {
				if !c.db.Synced() {
					if err := c.db.SyncWAL(); err != nil {
						return err
					}
				}
				if err := c.send(ctx, p, payloads...); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					c.log.Warn("strand: sending changelog commits failed; retrying", "partition", p, "in", backoff, "err", err)
					sent = v
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(backoff):
					}
					backoff = min(backoff*2, 5*time.Second)
					continue
				}
				backoff = 50 * time.Millisecond
				sent = lastSeq
				continue
			}
		}
		timer.Reset(clogResendAfter / 4)
		select {
		case <-ctx.Done():
			return nil
		case <-part.lostC:
			return nil
		case <-part.wake:
		case <-progress:
		case <-timer.C:
		}
	}
}

// confirm reads p's changelog after its fence: it confirms this owner's
// commits (deleting their rows), notes its snapshots, and marks p lost at
// a newer fence.
func (c *Changelog) confirm(ctx context.Context, p uint32, part *clogPart) error {
	c.mu.Lock()
	from := part.fenceOff + 1
	h := History{Epoch: part.epoch, Last: part.verified}
	c.mu.Unlock()
	rd, err := c.src.Open(ctx, p, from)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("partition %d: open the changelog at %d: %w", p, from, err)
	}
	defer rd.Close()
	for {
		recs, err := rd.Poll(ctx, clogPollRecords)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("partition %d: read the changelog: %w", p, err)
		}
		moved := false
		c.mu.Lock()
		for i := range recs {
			off := recs[i].Offset
			r, err := Decode(recs[i].Payload)
			if err != nil {
				continue
			}
			switch r.Kind {
			case KindFence:
				if r.Meta.Epoch > part.epoch {
					c.log.Warn("strand: partition fenced by a newer owner; stopping it", "partition", p,
						"epoch", part.epoch, "newer_epoch", r.Meta.Epoch, "newer_member", r.Meta.Member)
					if !part.lost {
						part.lost = true
						close(part.lostC)
					}
					c.mu.Unlock()
					return nil
				}
			case KindCommit:
				if h.Next(&r) == Valid {
					part.verified, part.verifiedOff = r.Meta.Seq, off
					if part.track != nil {
						part.track[r.Meta.Seq] = off
					}
					moved = true
				}
			case KindSnapshotChunk:
				if r.Meta.Member == part.member && r.Meta.Index == 0 {
					part.snapFirst[r.Meta.Snapshot] = off
				}
			case KindSnapshotEnd:
				if r.Meta.Member == part.member {
					part.snapEnded[r.Meta.Snapshot] = true
					moved = true
				}
			}
		}
		var del []uint64
		var pos []byte
		if moved {
			for s := part.deleted + 1; s <= part.verified; s++ {
				del = append(del, s)
			}
			part.deleted = part.verified
			pos, _ = json.Marshal(position{Seq: part.verified, Offset: part.verifiedOff, Epoch: part.epoch})
			part.sinceSnap += len(del)
			close(part.progress)
			part.progress = make(chan struct{})
		}
		snap := c.opts.SnapshotEvery > 0 && part.sinceSnap >= c.opts.SnapshotEvery && !part.snapping
		if snap {
			part.snapping = true
			part.sinceSnap = 0
		}
		c.mu.Unlock()
		if moved {
			tx := c.db.NewTxn()
			tx.Lazy()
			for _, s := range del {
				tx.DeleteRow(state.FamilyChangelog, p, seqKey(s))
			}
			tx.PutRow(state.FamilyChangelog, p, positionKey, pos)
			if err := tx.Commit(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("partition %d: delete confirmed changelog rows: %w", p, err)
			}
		}
		if snap {
			go func() {
				if err := c.snapshot(ctx, p, part); err != nil && ctx.Err() == nil {
					c.log.Warn("strand: snapshot failed", "partition", p, "err", err)
				}
				c.mu.Lock()
				part.snapping, part.track = false, nil
				c.mu.Unlock()
			}()
		}
	}
}

// snapshot writes a snapshot of p's rows to its changelog and, once it is
// read back complete, bookmarks it.
func (c *Changelog) snapshot(ctx context.Context, p uint32, part *clogPart) error {
	start := time.Now()
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := binary.BigEndian.Uint64(idb[:]) | 1
	c.mu.Lock()
	part.track = map[uint64]uint64{part.verified: part.verifiedOff}
	epoch, member := part.epoch, part.member
	c.mu.Unlock()
	var chunks uint32
	var bytes int
	var lastChunk []byte
	err := c.db.SnapshotPartition(ctx, p, clogChunkBytes, func(w []byte) error {
		lastChunk = append(lastChunk[:0], w...)
		pl, err := encodeClog(KindSnapshotChunk, &Meta{Epoch: epoch, Member: member, Snapshot: id, Index: chunks, Tables: c.tables}, w)
		if err != nil {
			return err
		}
		if err := c.send(ctx, p, pl); err != nil {
			return err
		}
		chunks++
		bytes += len(w)
		return nil
	})
	if err != nil {
		return err
	}
	// The snapshot's last commit is the head row in it.
	headSeq, err := snapshotHead(p, id, lastChunk)
	if err != nil {
		return err
	}
	if err := c.waitVerified(ctx, part, headSeq); err != nil {
		return err
	}
	c.mu.Lock()
	resume, ok := part.track[headSeq]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("snapshot %x: the offset of commit %d is unknown", id, headSeq)
	}
	end, err := encodeClog(KindSnapshotEnd, &Meta{Epoch: epoch, Member: member, Snapshot: id, Chunks: chunks, Seq: headSeq, Resume: resume}, nil)
	if err != nil {
		return err
	}
	if err := c.send(ctx, p, end); err != nil {
		return err
	}
	for {
		c.mu.Lock()
		first, okFirst := part.snapFirst[id]
		ended := part.snapEnded[id]
		ch, lost := part.progress, part.lostC
		c.mu.Unlock()
		if okFirst && ended {
			if c.marks != nil {
				if err := c.marks.SetBookmark(ctx, c.topic, p, SnapshotBookmark, first); err != nil {
					return fmt.Errorf("snapshot %x: bookmark: %w", id, err)
				}
			}
			c.log.Info("strand: snapshot written", "partition", p, "commit", headSeq, "offset", first,
				"chunks", chunks, "bytes", bytes, "took", time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ch:
		case <-lost:
			return executor.ErrFenced
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// snapshotHead returns the commit number in the head row of a snapshot:
// SnapshotPartition hands rows in key order from one consistent view, and
// the head's family comes last, so it is in the last chunk.
func snapshotHead(p uint32, id uint64, lastChunk []byte) (uint64, error) {
	head, ok, err := state.FindLogged(lastChunk, state.FamilyLogHead, p, nil)
	if err != nil {
		return 0, fmt.Errorf("snapshot %x of partition %d: %w", id, p, err)
	}
	if !ok {
		return 0, fmt.Errorf("snapshot %x of partition %d holds no head row", id, p)
	}
	m, err := parseHead(head)
	if err != nil {
		return 0, err
	}
	return m.Seq, nil
}

// ErrTablesDiffer is wrapped by a restore that found rows of a writer whose
// store numbers the topology's tables otherwise than this one.
var ErrTablesDiffer = errors.New("strand: the instances number their tables differently")

// sameTables refuses rows of a writer that numbers its tables otherwise.
func (c *Changelog) sameTables(r *Record) error {
	if r.Meta.Tables != 0 && r.Meta.Tables != c.tables {
		return fmt.Errorf("%w: member %d wrote it with table digest %08x, this store's is %08x", ErrTablesDiffer, r.Meta.Member, r.Meta.Tables, c.tables)
	}
	return nil
}

// retry calls fn until it succeeds or ctx ends, backing off.
func retry(ctx context.Context, log *slog.Logger, what string, p uint32, fn func() error) error {
	wait := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("strand: "+what+" failed; retrying", "partition", p, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// errStop ends a walk over a partition's rows early.
var errStop = errors.New("stop")
