package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/scaleout/changelog"
	groupstate "github.com/strand-io/strand/internal/scaleout/membership"
	"github.com/strand-io/strand/internal/telemetry"
	"github.com/strand-io/strand/stream/connector"
)

// Warm standbys (docs/design.md §15, "Standbys").

// WithStandbys makes the group keep n standby copies of every partition
// (0, the default: none): n instances other than its owner keep the
// partition's rows current in their own stores by reading its changelog,
// so that when the owner fails, the group grants the partition to one of
// them, which restores only the changelog's tail instead of the whole
// partition. The standbys of a partition are the instances it goes to if
// its owner dies (at most the other members). A standby copy is not
// served as the owner's: reads of it are stale and answered only to a
// caller that allows it (Table.GetStandby, the query server's
// Strand-Max-Staleness). Only with WithGroup; every instance of the group
// should use the same n.
func WithStandbys(n int) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if n < 0 || n > 16 {
			return fmt.Errorf("strand: topology.WithStandbys: %d, want 0 to 16", n)
		}
		o.standbys = n
		return nil
	})
}

// StandbyStatus is how current this instance's standby copy of a
// partition is.
type StandbyStatus struct {
	Partition uint32
	// Epoch is the epoch of the owner whose commits the copy applies
	// (the latest fence it read); Seq the number of its last commit
	// applied.
	Epoch connector.Epoch
	Seq   uint64
	// Offset is the next changelog offset the copy reads, End where the
	// changelog ended when last asked, Lag = End − Offset: changelog
	// records it has not applied yet.
	Offset, End, Lag uint64
	// CurrentAt is the latest time the copy held every commit that was in
	// the changelog (zero: not yet): a read of it misses at most what was
	// committed since.
	CurrentAt time.Time
	// Applied counts the commits (and snapshot chunks) applied since the
	// copy started; Mode is where it started: "reuse" (the rows here),
	// "snapshot" or "full" (the changelog's start).
	Applied int
	Mode    string
}

func standbyStatus(s changelog.StandbyStatus) StandbyStatus {
	return StandbyStatus{Partition: s.Partition, Epoch: s.Epoch, Seq: s.Seq, Offset: s.Offset, End: s.End, Lag: s.Lag,
		CurrentAt: s.CurrentAt, Applied: s.Applied, Mode: s.Mode}
}

// Standbys returns the standby copies this instance keeps now, in
// partition order (nil outside a group or while Run is not in it).
func (a *App) Standbys() []StandbyStatus {
	clog := a.groupClog()
	if clog == nil {
		return nil
	}
	var out []StandbyStatus
	for _, s := range clog.Standbys() {
		out = append(out, standbyStatus(s))
	}
	return out
}

func (a *App) groupClog() *changelog.Changelog {
	if a.grp == nil {
		return nil
	}
	a.grp.mu.Lock()
	defer a.grp.mu.Unlock()
	return a.grp.clog
}

// ErrNoStandby is wrapped by a stale read (ReadStandby, Table.GetStandby)
// when this instance keeps no standby copy of the partition that was
// current within the caller's bound: nothing stale is answered then.
var ErrNoStandby = errors.New("strand: no standby copy of the partition here is current within the bound")

// Staleness is how stale an answer read from a standby copy may be: it
// misses at most the commits of the last Age (the copy held every commit
// in the changelog Age ago), and Lag changelog records were known not to
// be applied yet. Epoch and Seq name the last commit it held when the
// read began: the owner's epoch and the commit's number.
type Staleness struct {
	Partition uint32
	Age       time.Duration
	Lag       uint64
	Epoch     connector.Epoch
	Seq       uint64
}

// ReadStandby runs read, which reads partition p's rows from this
// instance's store (with a read that takes its view when it runs: Get,
// GetFresh, ScanPartition; the Recent reads may answer from an older
// view than the copy's), only if this instance keeps a standby copy of p that
// was current at most maxStale ago, and returns how stale the read may be.
// The copy must be the same before and after read (it was not started
// again meanwhile, which may drop its rows): else, or without such a copy,
// the error wraps ErrNoStandby. This is the caller's consent to a stale
// answer (Kafka's KIP-535): a later read of the partition's owner may be
// newer, and a later stale read may be older than an earlier answer of
// the owner.
func (a *App) ReadStandby(ctx context.Context, p uint32, maxStale time.Duration, read func(ctx context.Context) error) (Staleness, error) {
	if maxStale < 0 {
		return Staleness{}, fmt.Errorf("strand: a stale read with a negative bound (%v)", maxStale)
	}
	clog := a.groupClog()
	if clog == nil {
		return Staleness{}, fmt.Errorf("partition %d: the App is not in a group now: %w", p, ErrNoStandby)
	}
	before, ok := clog.StandbyOf(p)
	if !ok {
		return Staleness{}, fmt.Errorf("partition %d: %w", p, ErrNoStandby)
	}
	age, known := before.Staleness(time.Now())
	if !known {
		return Staleness{}, fmt.Errorf("partition %d: the standby copy has not caught up with the changelog yet: %w", p, ErrNoStandby)
	}
	if age > maxStale {
		return Staleness{}, fmt.Errorf("partition %d: the standby copy was last current %v ago, more than %v: %w", p, age.Round(time.Millisecond), maxStale, ErrNoStandby)
	}
	if err := read(ctx); err != nil {
		return Staleness{}, err
	}
	if after, ok := clog.StandbyOf(p); !ok || after.Session != before.Session {
		return Staleness{}, fmt.Errorf("partition %d: the standby copy stopped or started again during the read: %w", p, ErrNoStandby)
	}
	return Staleness{Partition: p, Age: age, Lag: before.Lag, Epoch: before.Epoch, Seq: before.Seq}, nil
}

// GetStandby is GetFresh answered from app's standby copy of k's
// partition, if app keeps one that was current at most maxStale ago
// (ReadStandby; else an error wrapping ErrNoStandby). Use it when the
// partition's owner cannot answer (it failed and the partition is moving)
// and a stale answer is better than none; Staleness says how stale. It
// reads a durable view taken for the read (one write-ahead log fsync at
// most), not the newest view an earlier read took (GetRecent's), which
// may be older than the copy: the answer then holds every commit the copy
// held when it was last current.
func (t *Table[K, V]) GetStandby(ctx context.Context, app *App, k K, maxStale time.Duration) (V, bool, Freshness, Staleness, error) {
	var v V
	var ok bool
	var fr Freshness
	kb, err := t.AppendKey(nil, k)
	if err != nil {
		return v, false, fr, Staleness{}, err
	}
	n := t.Partitions()
	if n == 0 {
		return v, false, fr, Staleness{}, fmt.Errorf("table %q: %w", t.Name(), ErrNotOpen)
	}
	p := connector.PartitionOf(kb, n)
	st, err := app.ReadStandby(ctx, p, maxStale, func(ctx context.Context) error {
		var err error
		v, ok, fr, err = t.GetFresh(ctx, k)
		return err
	})
	if err != nil {
		var zero V
		return zero, false, Freshness{}, Staleness{}, err
	}
	return v, ok, fr, st, nil
}

// standbyGauges are the standby copies for the metrics
// (strand.standby.lag, strand.standby.staleness).
func (a *App) standbyGauges() []telemetry.StandbyGauge {
	sbs := a.Standbys()
	if len(sbs) == 0 {
		return nil
	}
	src := a.prog.Sources()[0]
	now := time.Now()
	out := make([]telemetry.StandbyGauge, len(sbs))
	for i, sb := range sbs {
		age := time.Duration(-1)
		if !sb.CurrentAt.IsZero() {
			age = max(now.Sub(sb.CurrentAt), 0)
		}
		out[i] = telemetry.StandbyGauge{Source: src, Partition: sb.Partition, Lag: sb.Lag, Staleness: age}
	}
	return out
}

// StandbyAddrs returns the query addresses of the other members of the
// group that keep a standby copy of partition p, as this instance computes
// them from its view of the membership (membership.Standbys, the same
// function every member applies), in promotion order; nil outside a group,
// without WithStandbys, or while Run is not in the group. A stale read
// that this instance cannot answer may be asked of them.
func (a *App) StandbyAddrs(p uint32) []string {
	if a.grp == nil || a.grp.standbys == 0 {
		return nil
	}
	m := a.Membership()
	if m == nil {
		return nil
	}
	members := m.Members()
	sb := groupstate.Standbys(members, a.grp.partitions, a.grp.standbys)
	if int(p) >= len(sb) {
		return nil
	}
	self := m.ID()
	var out []string
	for _, id := range sb[p] {
		if id == self {
			continue
		}
		for _, mb := range members {
			if mb.ID == id && mb.Addr != "" {
				out = append(out, mb.Addr)
			}
		}
	}
	return out
}
