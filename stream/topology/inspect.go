package topology

import (
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/strand-io/strand/internal/engine"
	"github.com/strand-io/strand/stream"
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
	// PendingDeadLetters are the committed dead letters not yet published
	// to the dead-letter topic, by partition and offset.
	PendingDeadLetters []stream.DeadLetter
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

// Inspect reads the state directory of an App (the dir given to Open)
// read-only: fingerprint, sources and checkpoints, tables and row counts,
// parked keys and pending dead letters. It reads every key, so it costs
// time in proportion to the store's size. The store must not be open:
// Pebble locks the directory, and Inspect fails while an App runs on it
// (ask the App itself: Stats, Checkpoint, PendingDeadLetters).
func Inspect(dir string) (*Inspection, error) {
	in, err := engine.Inspect(dir)
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
	return out, nil
}
