package inspect

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/deadletter"
)

// Report is what a store holds, read without a topology (Store).
type Report struct {
	Layout      int
	Fingerprint []byte
	// Sources maps source names to their partition counts.
	Sources map[string]uint32
	// Checkpoints, Tables and Parked are in key order.
	Checkpoints []Checkpoint
	Tables      []Table
	Parked      []Parked
	// Held counts, per source partition that has any, the records the
	// re-sequencer holds behind a missing sequence number (each held key
	// has an open gap); Outbox the To/KeyBy messages committed and not yet
	// published. Both in key order.
	Held   []Held
	Outbox []Outbox
	// DeadLetters are the committed dead letters not yet published.
	DeadLetters []deadletter.Letter
	// ReplayMarks are the offsets below which a reset's rebuild publishes
	// nothing again (internal/reset), per source partition, in key order;
	// Origins and Sequences count the rows of the duplicate check and of
	// the re-sequencer; Grouped says the store has changelog rows (it was
	// run in a group, JoinGroup). Description is the stored topology's.
	ReplayMarks []Checkpoint
	// Builds lists, per table built in the background and partition, how
	// far its build reader is, or where it was handed over (evolve.go).
	Builds             []BuildPart
	Origins, Sequences int
	Grouped            bool
	Description        string
}

// Checkpoint is one committed checkpoint.
type Checkpoint struct {
	Source    string
	Partition uint32
	Next      uint64
}

// Table is one table and how many rows it has.
type Table struct {
	Name string
	ID   uint32
	Rows int
}

// Parked counts the parked keys and records of a source partition.
type Parked struct {
	Source        string
	Partition     uint32
	Keys, Records int
}

// Held counts the keys the re-sequencer holds records of (each
// behind an open gap) and the records, of a source partition; Oldest is
// when the oldest of them was held.
type Held struct {
	Source        string
	Partition     uint32
	Keys, Records int
	Oldest        time.Time
}

// Outbox counts the committed To/KeyBy messages of a source
// partition not yet published.
type Outbox struct {
	Source    string
	Partition uint32
	Messages  int
}

// Store reads every row of a store opened read-only and sums it up.
func Store(ctx context.Context, r *state.ReadOnly) (Report, error) {
	var in Report
	perTable := map[uint32]int{}
	parked := map[string]*Parked{}
	var parkedOrder []string
	held := map[string]*Held{}
	var heldOrder []string
	lastHeldKey := map[string]string{}
	outbox := map[string]*Outbox{}
	var outboxOrder []string
	dir := r.Dir()
	meta := r.Meta
	err := r.ScanAll(ctx, func(f state.Family, part uint32, rest, value []byte) error {
		switch f {
		case state.FamilyCheckpoint:
			if len(value) != 8 {
				return fmt.Errorf("strand: inspect %s: checkpoint %q partition %d has %d bytes", dir, rest, part, len(value))
			}
			if buildCheckpoint(&in, string(rest), part, value) { // evolve.go
				return nil
			}
			in.Checkpoints = append(in.Checkpoints, Checkpoint{Source: string(rest), Partition: part, Next: binary.BigEndian.Uint64(value)})
		case state.FamilyTable:
			if len(rest) >= 4 {
				perTable[binary.BigEndian.Uint32(rest)]++
			}
		case state.FamilyParked:
			r := rows.Reader{B: rest}
			src := r.String()
			kind := r.Byte()
			if r.Err != nil {
				return strerr.Errorf("strand: inspect %s: parked row %x: %w", dir, rest, r.Err)
			}
			id := fmt.Sprintf("%s\x00%d", src, part)
			pk, ok := parked[id]
			if !ok {
				pk = &Parked{Source: src, Partition: part}
				parked[id] = pk
				parkedOrder = append(parkedOrder, id)
			}
			switch kind {
			case rows.ParkedKindMeta:
				pk.Keys++
			case rows.ParkedKindRecord:
				pk.Records++
			}
		case state.FamilyHolds:
			r := rows.Reader{B: rest}
			src := r.String()
			key := r.String()
			if r.Err != nil || len(value) < 9 || value[0] != rows.SeqFormat {
				return fmt.Errorf("strand: inspect %s: hold row %x: malformed", dir, rest)
			}
			id := fmt.Sprintf("%s\x00%d", src, part)
			h, ok := held[id]
			if !ok {
				h = &Held{Source: src, Partition: part}
				held[id] = h
				heldOrder = append(heldOrder, id)
			}
			if k, ok := lastHeldKey[id]; !ok || k != key {
				h.Keys++
				lastHeldKey[id] = key
			}
			h.Records++
			since := time.Unix(0, int64(binary.BigEndian.Uint64(value[1:9])))
			if h.Oldest.IsZero() || since.Before(h.Oldest) {
				h.Oldest = since
			}
		case state.FamilyOutbox:
			src, seq, messages, err := rows.ParseOutboxKey(rest)
			if err != nil {
				return strerr.Errorf("strand: inspect %s: %w", dir, err)
			}
			if !messages {
				return nil // the next-seq row
			}
			n, err := rows.OutboxCount(seq, value)
			if err != nil {
				return strerr.Errorf("strand: inspect %s: %w", dir, err)
			}
			id := fmt.Sprintf("%s\x00%d", src, part)
			o, ok := outbox[id]
			if !ok {
				o = &Outbox{Source: src, Partition: part}
				outbox[id] = o
				outboxOrder = append(outboxOrder, id)
			}
			o.Messages += n
		case state.FamilyReplayMark, state.FamilyOrigins, state.FamilySequences, state.FamilyChangelog, state.FamilyLogHead:
			evolveRows(&in, f, part, rest, value) // evolve.go
		case state.FamilyDeadLetters:
			var d deadletter.Letter
			if err := rows.DecodeLetter(bytes.Clone(value), &d); err != nil {
				return strerr.Errorf("strand: inspect %s: dead-letter row %x: %w", dir, rest, err)
			}
			in.DeadLetters = append(in.DeadLetters, d)
		}
		return nil
	})
	if err != nil {
		return in, err
	}
	in.Layout, in.Fingerprint, in.Sources, in.Description = meta.Layout, meta.Fingerprint, meta.Sources, meta.Description
	for name, id := range meta.Tables {
		in.Tables = append(in.Tables, Table{Name: name, ID: id, Rows: perTable[id]})
	}
	slices.SortFunc(in.Tables, func(a, b Table) int { return strings.Compare(a.Name, b.Name) })
	for _, id := range parkedOrder {
		in.Parked = append(in.Parked, *parked[id])
	}
	for _, id := range heldOrder {
		in.Held = append(in.Held, *held[id])
	}
	for _, id := range outboxOrder {
		in.Outbox = append(in.Outbox, *outbox[id])
	}
	return in, nil
}
