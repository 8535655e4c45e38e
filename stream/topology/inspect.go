package topology

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/strand-io/strand/internal/inspect"
	"github.com/strand-io/strand/stream/deadletter"
)

// Inspection describes an App's state directory, read without its
// topology: what `strand inspect DIR` prints. See Inspect.
type Inspection struct {
	// Dir is the store's directory.
	Dir string
	// Layout is the store's key layout version; Fingerprint the topology
	// fingerprint it was written by, in hex.
	Layout      int
	Fingerprint string
	// Sources lists the sources, by name, with their checkpoints.
	Sources []InspectedSource
	// Tables lists the tables by name with their row counts.
	Tables []InspectedTable
	// Parked lists, per source partition that has any, the keys waiting for
	// a retry or a release and the records they hold.
	Parked []InspectedParked
	// Held lists, per source partition that has any, the keys the
	// re-sequencer holds records of, each behind an open gap (a missing
	// sequence number), and the records: they are past the checkpoint but
	// not applied.
	Held []InspectedHeld
	// Outbox lists, per source partition that has any, the committed
	// messages of To and KeyBy steps not yet published.
	Outbox []InspectedOutbox
	// PendingDeadLetters are the committed dead letters not yet published
	// to the dead-letter topic, by partition and offset.
	PendingDeadLetters []deadletter.Letter
	// Live is set when an App had the store open: the report was made by
	// that App, from a consistent copy of its store as of the request (see
	// Inspect).
	Live *LiveApp
	// Stale is set when the directory holds the live-inspection record of
	// an App that is gone without closing the store (it crashed or was
	// killed); the report was read from the directory.
	Stale *LiveApp
}

// InspectedSource is one source of an inspected store.
type InspectedSource struct {
	Name string
	// Partitions is the partition count the store was written with.
	Partitions uint32
	// Checkpoints holds the committed next offset of every partition that
	// committed anything, by partition.
	Checkpoints map[uint32]uint64
}

// InspectedTable is one table of an inspected store.
type InspectedTable struct {
	Name string
	Rows int
}

// InspectedParked counts the parked keys and records of a source partition.
type InspectedParked struct {
	Source        string
	Partition     uint32
	Keys, Records int
}

// InspectedHeld counts the keys the re-sequencer holds records of (each
// behind an open gap) and the records, of a source partition. Oldest is
// when the oldest of them was held.
type InspectedHeld struct {
	Source        string
	Partition     uint32
	Keys, Records int
	Oldest        time.Time
}

// InspectedOutbox counts the committed To/KeyBy messages of a source
// partition not yet published.
type InspectedOutbox struct {
	Source    string
	Partition uint32
	Messages  int
}

// Waiting sums what the store holds that is past the checkpoints and not
// done: held records (open gaps), parked records, pending dead letters and
// outbox messages. An App whose store waits for nothing and whose
// checkpoints are at its sources' ends is caught up.
func (in *Inspection) Waiting() (held, parked, deadLetters, outbox int) {
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

// Inspect reports what the state directory of an App (the dir given to
// Open) holds: fingerprint, sources and checkpoints, tables and row counts,
// parked keys, held records (open gaps), outbox messages and pending dead
// letters. It reads every key, so it costs
// time in proportion to the store's size.
//
// A store that no App has open is read directly, read-only. While an App
// has it open, Pebble locks the directory (for every other opener, read-only
// ones included), so Inspect asks that App instead: a running App serves
// its own report on a loopback address it records in the directory (see
// WithLiveInspect), made from a consistent copy of its store, and the
// result says so in Live. A record left by an App that died without closing
// the store is reported in Stale.
func Inspect(dir string) (*Inspection, error) {
	in, err := inspectStore(dir)
	rec, recErr := readLiveRecord(dir)
	if err == nil {
		if rec != nil {
			in.Stale = rec.app()
		}
		return in, nil
	}
	if rec == nil {
		if recErr != nil {
			return nil, errors.Join(err, recErr)
		}
		return nil, err
	}
	in, lerr := askLive(dir, rec)
	if lerr != nil {
		return nil, fmt.Errorf("%w; the App that has it open (pid %d, live inspection at %s) did not answer either: %w", err, rec.PID, rec.Addr, lerr)
	}
	return in, nil
}

// inspectStore reads the store in dir directly.
func inspectStore(dir string) (*Inspection, error) {
	in, err := inspect.Store(dir)
	if err != nil {
		return nil, fmt.Errorf("topology: inspect %s: %w", dir, err)
	}
	out := &Inspection{Dir: dir, Layout: in.Layout, Fingerprint: hex.EncodeToString(in.Fingerprint),
		PendingDeadLetters: in.DeadLetters}
	byName := map[string]*InspectedSource{}
	for name, n := range in.Sources {
		byName[name] = &InspectedSource{Name: name, Partitions: n, Checkpoints: map[uint32]uint64{}}
	}
	for _, c := range in.Checkpoints {
		s, ok := byName[c.Source]
		if !ok {
			s = &InspectedSource{Name: c.Source, Checkpoints: map[uint32]uint64{}}
			byName[c.Source] = s
		}
		s.Checkpoints[c.Partition] = c.Next
	}
	for _, s := range byName {
		out.Sources = append(out.Sources, *s)
	}
	sort.Slice(out.Sources, func(i, j int) bool { return out.Sources[i].Name < out.Sources[j].Name })
	for _, t := range in.Tables {
		out.Tables = append(out.Tables, InspectedTable{Name: t.Name, Rows: t.Rows})
	}
	for _, p := range in.Parked {
		out.Parked = append(out.Parked, InspectedParked{Source: p.Source, Partition: p.Partition, Keys: p.Keys, Records: p.Records})
	}
	for _, h := range in.Held {
		out.Held = append(out.Held, InspectedHeld{Source: h.Source, Partition: h.Partition, Keys: h.Keys, Records: h.Records, Oldest: h.Oldest})
	}
	for _, o := range in.Outbox {
		out.Outbox = append(out.Outbox, InspectedOutbox{Source: o.Source, Partition: o.Partition, Messages: o.Messages})
	}
	return out, nil
}
