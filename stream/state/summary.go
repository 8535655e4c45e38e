package state

import (
	"context"

	"time"

	"github.com/strand-io/strand/internal/inspect"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/deadletter"
)

// Summary sums up what a store holds: what `strand inspect DIR` prints.
type Summary struct {
	// Dir is the state directory.
	Dir string
	// Layout is the store's key layout version; Fingerprint the topology
	// fingerprint it was written by, in hex.
	Layout      int
	Fingerprint string
	// Sources lists the sources, by name, with their checkpoints.
	Sources []Source
	// Tables lists the tables by name with their row counts.
	Tables []TableCount
	// Parked counts, per source partition that has any, the keys waiting
	// for a retry or a release and the records they hold.
	Parked []ParkedCount
	// Held counts, per source partition that has any, the keys the
	// re-sequencer holds records of (each behind an open gap) and the
	// records: past the checkpoint, not applied.
	Held []HeldCount
	// Outbox counts, per source partition that has any, the committed
	// messages of To and KeyBy steps not yet published.
	Outbox []OutboxCount
	// PendingDeadLetters are the committed dead letters not yet published
	// to the dead-letter topic.
	PendingDeadLetters []deadletter.Letter
	// Builds lists the tables being built in the background (a table
	// added to the topology, or with a new version; docs/design.md §19),
	// per partition: how far the build has read, or where the partition
	// was handed over to its main pipeline.
	Builds []BuildPart
	// Live and Stale are the Store's (see Store.Live and Store.Stale).
	Live, Stale *Holder
}

// BuildPart is one partition of a table being built in the background:
// the offset its build has read up to (Next), or, HandedOver, the offset
// from which the main pipeline applies the table.
type BuildPart struct {
	Table, Source string
	Partition     uint32
	Next          uint64
	HandedOver    bool
}

// TableCount is a table and its row count.
type TableCount struct {
	Name string
	Rows int
}

// ParkedCount counts the parked keys and records of a source partition.
type ParkedCount struct {
	Source        string
	Partition     uint32
	Keys, Records int
}

// HeldCount counts the keys the re-sequencer holds records of (each behind
// an open gap) and the records of a source partition. Oldest is when the
// oldest of them was held.
type HeldCount struct {
	Source        string
	Partition     uint32
	Keys, Records int
	Oldest        time.Time
}

// OutboxCount counts the committed To/KeyBy messages of a source partition
// not yet published.
type OutboxCount struct {
	Source    string
	Partition uint32
	Messages  int
}

// Waiting sums what the store holds that is past the checkpoints and not
// done: held records (open gaps), parked records, pending dead letters and
// outbox messages. An App whose store waits for nothing and whose
// checkpoints are at its sources' ends is caught up.
func (in *Summary) Waiting() (held, parked, deadLetters, outbox int) {
	for _, h := range in.Held {
		held += h.Records
	}
	for _, p := range in.Parked {
		parked += p.Records
	}
	for _, o := range in.Outbox {
		outbox += o.Messages
	}
	return held, parked, len(in.PendingDeadLetters), outbox
}

// Summary reads every row of the store and sums it up. It costs time in
// proportion to the store's size.
func (s *Store) Summary(ctx context.Context) (*Summary, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	in, err := inspect.Store(ctx, s.r)
	if err != nil {
		return nil, strerr.Errorf("strand: %s: %w", s.dir, err)
	}
	out := &Summary{Dir: s.dir, Layout: in.Layout, Fingerprint: s.Fingerprint(), PendingDeadLetters: in.DeadLetters,
		Live: s.live, Stale: s.stale}
	byName := map[string]*Source{}
	for name, n := range in.Sources {
		byName[name] = &Source{Name: name, Partitions: n, Checkpoints: map[uint32]uint64{}}
	}
	for _, c := range in.Checkpoints {
		src, ok := byName[c.Source]
		if !ok {
			src = &Source{Name: c.Source, Checkpoints: map[uint32]uint64{}}
			byName[c.Source] = src
		}
		src.Checkpoints[c.Partition] = c.Next
	}
	for _, m := range in.ReplayMarks { // a partition being rebuilt after a reset (topology.Reset)
		src, ok := byName[m.Source]
		if !ok {
			src = &Source{Name: m.Source, Checkpoints: map[uint32]uint64{}}
			byName[m.Source] = src
		}
		if src.Checkpoints[m.Partition] < m.Next {
			if src.Rebuilding == nil {
				src.Rebuilding = map[uint32]uint64{}
			}
			src.Rebuilding[m.Partition] = m.Next
		}
	}
	out.Sources = sortedSources(byName)
	for _, b := range in.Builds {
		out.Builds = append(out.Builds, BuildPart(b))
	}
	for _, t := range in.Tables {
		out.Tables = append(out.Tables, TableCount{Name: t.Name, Rows: t.Rows})
	}
	for _, p := range in.Parked {
		out.Parked = append(out.Parked, ParkedCount{Source: p.Source, Partition: p.Partition, Keys: p.Keys, Records: p.Records})
	}
	for _, h := range in.Held {
		out.Held = append(out.Held, HeldCount{Source: h.Source, Partition: h.Partition, Keys: h.Keys, Records: h.Records, Oldest: h.Oldest})
	}
	for _, o := range in.Outbox {
		out.Outbox = append(out.Outbox, OutboxCount{Source: o.Source, Partition: o.Partition, Messages: o.Messages})
	}
	return out, nil
}
