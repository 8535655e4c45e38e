package changelog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
)

// Standby copies (docs/design.md §15, "Standbys"): an instance that does
// not own a partition keeps its rows current by applying the partition's
// valid history as it reads it from the changelog, writing neither a
// fence nor a commit. It keeps the position (the last commit applied and
// its offset) as a restore does, so that when the partition is granted
// here, Restore starts from the reuse level and reads only the tail.

// StandbyEndsEvery is how often a standby asks the changelog where it ends,
// to know how current it is.
const StandbyEndsEvery = 100 * time.Millisecond

// StandbyStatus is how current the standby copy of a partition is.
type StandbyStatus struct {
	Partition uint32
	// Epoch is the epoch of the owner whose commits it applies now (the
	// highest fence read), Seq the last commit applied.
	Epoch connector.Epoch
	Seq   uint64
	// Offset is the next changelog offset to read; End the changelog's
	// end as last asked (0: unknown). Lag is End − Offset: records of
	// the changelog not applied yet.
	Offset, End, Lag uint64
	// CurrentAt is the latest time at which the copy held every commit
	// that was in the changelog (zero: not known yet). A read of it
	// misses at most what was committed since.
	CurrentAt time.Time
	// Applied counts the commits and snapshot chunks applied since the
	// standby started; Mode is where it started (reuse, snapshot, full).
	Applied int
	Mode    string
	Started time.Time
	// Session names one run of the standby from where it began: it
	// changes whenever the standby starts again (and may have dropped the
	// rows), so that a read that saw one Session before and after it read
	// only rows of that run.
	Session uint64
}

// Staleness is how old a read of the copy may be at now: now − CurrentAt,
// and false when the copy has not been current yet.
func (s StandbyStatus) Staleness(now time.Time) (time.Duration, bool) {
	if s.CurrentAt.IsZero() {
		return 0, false
	}
	return max(now.Sub(s.CurrentAt), 0), true
}

// standbyState is one running standby's progress; guarded by
// Changelog.sbMu.
type standbyState struct {
	st StandbyStatus
	// seen are ends of the changelog not reached yet, with when they were
	// asked (oldest first): once Offset reaches one, the copy was current
	// at its time.
	seen []endSeen
}

type endSeen struct {
	end uint64
	at  time.Time
}

// standbys are the running standbys' progress (kept outside Changelog.mu:
// reads of it never wait for a commit).
type standbys struct {
	mu       sync.Mutex
	m        map[uint32]*standbyState
	sessions uint64
}

// Standbys returns the progress of every standby copy kept now, in
// partition order.
func (c *Changelog) Standbys() []StandbyStatus {
	c.sb.mu.Lock()
	defer c.sb.mu.Unlock()
	out := make([]StandbyStatus, 0, len(c.sb.m))
	for p := range c.sb.m {
		out = append(out, c.sb.m[p].st)
	}
	sortStatus(out)
	return out
}

// StandbyOf returns the progress of p's standby copy, false when none is
// kept here now.
func (c *Changelog) StandbyOf(p uint32) (StandbyStatus, bool) {
	c.sb.mu.Lock()
	defer c.sb.mu.Unlock()
	if s := c.sb.m[p]; s != nil {
		return s.st, true
	}
	return StandbyStatus{}, false
}

func sortStatus(s []StandbyStatus) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Partition < s[j-1].Partition; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// update changes p's progress under the lock.
func (c *Changelog) update(p uint32, fn func(s *standbyState)) {
	c.sb.mu.Lock()
	defer c.sb.mu.Unlock()
	if s := c.sb.m[p]; s != nil {
		fn(s)
		// The copy was current at the time of every end it reached.
		for len(s.seen) > 0 && s.st.Offset >= s.seen[0].end {
			s.st.CurrentAt = s.seen[0].at
			s.seen = s.seen[1:]
		}
		if s.st.End > s.st.Offset {
			s.st.Lag = s.st.End - s.st.Offset
		} else {
			s.st.Lag = 0
		}
	}
}

// Standby keeps the local rows of p, which this instance does not own,
// current from p's changelog until ctx ends (then it returns nil) or it
// fails. It starts where a restore would (the local rows if their
// position follows on, else the latest snapshot, else the start), applies
// every commit of the valid history as it is read and keeps the position,
// so that a Restore of p here afterwards reads only what came since.
func (c *Changelog) Standby(ctx context.Context, p uint32) error {
	c.mu.Lock()
	if part := c.parts[p]; part != nil && !part.lost {
		c.mu.Unlock()
		return fmt.Errorf("partition %d is owned here (epoch %d): no standby copy of it", p, part.epoch)
	}
	c.mu.Unlock()
	c.sb.mu.Lock()
	if c.sb.m == nil {
		c.sb.m = map[uint32]*standbyState{}
	}
	if c.sb.m[p] != nil {
		c.sb.mu.Unlock()
		return fmt.Errorf("partition %d: a standby copy of it runs already", p)
	}
	c.sb.m[p] = &standbyState{st: StandbyStatus{Partition: p, Started: time.Now()}}
	c.sb.mu.Unlock()
	defer func() {
		c.sb.mu.Lock()
		delete(c.sb.m, p)
		c.sb.mu.Unlock()
	}()
	for level := levelReuse; ; {
		err := c.standby(ctx, p, level)
		var rs restartError
		if errors.As(err, &rs) {
			level = rs.next
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
}

func (c *Changelog) standby(ctx context.Context, p uint32, level int) error {
	// A new session before the rows may be dropped: reads of the last one
	// end here.
	c.sb.mu.Lock()
	c.sb.sessions++
	if s := c.sb.m[p]; s != nil {
		s.st.Session, s.st.CurrentAt, s.seen = c.sb.sessions, time.Time{}, nil
	}
	c.sb.mu.Unlock()
	b, err := c.begin(ctx, p, level)
	if err != nil {
		return err
	}
	// Commits this store stamped as p's owner and never saw confirmed
	// (ConfirmRead refuses reads of them): dropped with the rows, or
	// confirmed once the standby read the changelog past them.
	localHead := b.localHead
	h, last, lastOff, lastEpoch := b.h, b.last, b.lastOff, b.lastEpoch
	confirmed := func() {
		if b.mode != "reuse" || last >= localHead.Seq {
			c.mu.Lock()
			if c.parts[p] == nil {
				delete(c.unconfirmed, p)
			}
			c.mu.Unlock()
		}
	}
	savePos := func() error {
		pos, _ := json.Marshal(position{Seq: last, Offset: lastOff, Epoch: lastEpoch})
		tx := c.db.NewTxn()
		tx.PutRow(state.FamilyChangelog, p, positionKey, pos)
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("partition %d: store the standby's changelog position: %w", p, err)
		}
		return nil
	}
	if b.mode == "snapshot" {
		// The snapshot's rows are in: a later start reuses them.
		if err := savePos(); err != nil {
			return err
		}
	}
	c.update(p, func(s *standbyState) {
		s.st.Mode, s.st.Offset, s.st.Seq, s.st.Epoch, s.st.Applied = b.mode, b.from, last, h.Epoch, b.applied
		s.seen, s.st.CurrentAt = nil, time.Time{}
	})
	c.log.Info("strand: standby copy of partition", "partition", p, "mode", b.mode, "from", b.from, "seq", last)
	rd, err := c.src.Open(ctx, p, b.from)
	if err != nil {
		return fmt.Errorf("partition %d: open the changelog at %d: %w", p, b.from, err)
	}
	defer rd.Close()
	// Where the changelog ends, asked every StandbyEndsEvery: reaching an
	// end asked at t means the copy was current at t.
	ectx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel() // first: the asking goroutine ends with ectx
		wg.Wait()
	}()
	if eo, ok := c.src.(connector.EndOffsetter); ok {
		wg.Go(func() {
			t := time.NewTicker(StandbyEndsEvery)
			defer t.Stop()
			for {
				at := time.Now()
				if ends, err := eo.EndOffsets(ectx); err == nil && int(p) < len(ends) {
					end := ends[p]
					c.update(p, func(s *standbyState) {
						s.st.End = max(s.st.End, end)
						if n := len(s.seen); n == 0 || s.seen[n-1].end < end {
							s.seen = append(s.seen, endSeen{end: end, at: at})
							if len(s.seen) > 256 {
								s.seen = s.seen[1:]
							}
						} else {
							s.seen[n-1].at = at // same end, asked later
						}
					})
				}
				select {
				case <-ectx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	confirmed()
	for {
		recs, err := rd.Poll(ctx, clogPollRecords)
		if err != nil {
			return fmt.Errorf("partition %d: read the changelog: %w", p, err)
		}
		applied := 0
		for i := range recs {
			off := recs[i].Offset
			r, err := Decode(recs[i].Payload)
			if err != nil {
				c.log.Warn("strand: changelog record skipped", "partition", p, "offset", off, "err", err)
				continue
			}
			prev := h
			switch h.Next(&r) {
			case Valid:
				if r.Kind != KindCommit {
					continue
				}
				if b.mode == "reuse" && r.Meta.Seq <= localHead.Seq {
					if r.Meta.Epoch != localHead.Epoch {
						return restartError{levelSnapshot} // another owner's commit where the store has its own
					}
				} else if err := c.sameTables(&r); err != nil {
					return fmt.Errorf("partition %d: commit %d at offset %d: %w", p, r.Meta.Seq, off, err)
				} else if err := c.db.ApplyLogged(ctx, p, r.Writes); err != nil {
					return fmt.Errorf("partition %d: apply commit %d at offset %d: %w", p, r.Meta.Seq, off, err)
				} else {
					applied++
				}
				last, lastOff, lastEpoch = r.Meta.Seq, off, r.Meta.Epoch
			case Inconsistent:
				if b.modeLevel < levelStart {
					c.log.Warn("strand: changelog does not follow on from where the standby began; starting it again from an earlier point",
						"partition", p, "mode", b.mode, "offset", off, "epoch", r.Meta.Epoch, "seq", r.Meta.Seq, "current_epoch", prev.Epoch, "last", prev.Last)
					return restartError{b.modeLevel + 1}
				}
				return fmt.Errorf("partition %d: %w: commit %d of epoch %d at offset %d follows commit %d of epoch %d",
					p, ErrBadChangelog, r.Meta.Seq, r.Meta.Epoch, off, prev.Last, prev.Epoch)
			}
		}
		if applied > 0 {
			if err := savePos(); err != nil {
				return err
			}
		}
		confirmed()
		if n := len(recs); n > 0 {
			next := recs[n-1].Offset + 1
			c.update(p, func(s *standbyState) {
				s.st.Offset, s.st.Seq, s.st.Epoch = next, last, h.Epoch
				s.st.Applied += applied
			})
		}
	}
}
