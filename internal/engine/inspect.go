package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/strand-io/strand/internal/rowenc"
	"github.com/strand-io/strand/internal/rowfmt"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/deadletter"
)

// Inspection is what a store holds, read without a topology (Inspect).
type Inspection struct {
	Layout      int
	Fingerprint []byte
	// Sources maps source names to their partition counts.
	Sources map[string]uint32
	// Checkpoints, Tables and Parked are in key order.
	Checkpoints []InspectedCheckpoint
	Tables      []InspectedTable
	Parked      []InspectedParked
	// DeadLetters are the committed dead letters not yet published.
	DeadLetters []deadletter.Letter
}

// InspectedCheckpoint is one committed checkpoint.
type InspectedCheckpoint struct {
	Source    string
	Partition uint32
	Next      uint64
}

// InspectedTable is one table and how many rows it has.
type InspectedTable struct {
	Name string
	ID   uint32
	Rows int
}

// InspectedParked counts the parked keys and records of a source partition.
type InspectedParked struct {
	Source        string
	Partition     uint32
	Keys, Records int
}

// Inspect reads the store in dir read-only (see state.ScanReadOnly: it
// fails while an App has the store open).
func Inspect(dir string) (Inspection, error) {
	var in Inspection
	rows := map[uint32]int{}
	parked := map[string]*InspectedParked{}
	var parkedOrder []string
	meta, err := state.ScanReadOnly(dir, func(f state.Family, part uint32, rest, value []byte) error {
		switch f {
		case state.FamilyCheckpoint:
			if len(value) != 8 {
				return fmt.Errorf("stream: inspect %s: checkpoint %q partition %d has %d bytes", dir, rest, part, len(value))
			}
			in.Checkpoints = append(in.Checkpoints, InspectedCheckpoint{Source: string(rest), Partition: part, Next: binary.BigEndian.Uint64(value)})
		case state.FamilyTable:
			if len(rest) >= 4 {
				rows[binary.BigEndian.Uint32(rest)]++
			}
		case state.FamilyParked:
			r := rowenc.Reader{B: rest}
			src := r.String()
			kind := r.Byte()
			if r.Err != nil {
				return fmt.Errorf("stream: inspect %s: parked row %x: %w", dir, rest, r.Err)
			}
			id := fmt.Sprintf("%s\x00%d", src, part)
			pk, ok := parked[id]
			if !ok {
				pk = &InspectedParked{Source: src, Partition: part}
				parked[id] = pk
				parkedOrder = append(parkedOrder, id)
			}
			switch kind {
			case parkedMeta:
				pk.Keys++
			case parkedRecord:
				pk.Records++
			}
		case state.FamilyDeadLetters:
			var d deadletter.Letter
			if err := rowfmt.DecodeLetter(bytes.Clone(value), &d); err != nil {
				return fmt.Errorf("stream: inspect %s: dead-letter row %x: %w", dir, rest, err)
			}
			in.DeadLetters = append(in.DeadLetters, d)
		}
		return nil
	})
	if err != nil {
		return in, err
	}
	in.Layout, in.Fingerprint, in.Sources = meta.Layout, meta.Fingerprint, meta.Sources
	for name, id := range meta.Tables {
		in.Tables = append(in.Tables, InspectedTable{Name: name, ID: id, Rows: rows[id]})
	}
	slices.SortFunc(in.Tables, func(a, b InspectedTable) int { return strings.Compare(a.Name, b.Name) })
	for _, id := range parkedOrder {
		in.Parked = append(in.Parked, *parked[id])
	}
	return in, nil
}
