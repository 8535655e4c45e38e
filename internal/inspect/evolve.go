package inspect

import (
	"encoding/binary"
	"strings"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
)

// evolveRows counts the rows of the families a reset deals with
// (internal/reset): replay marks, origins, re-sequencer rows, changelog
// rows.
func evolveRows(in *Report, f state.Family, part uint32, rest, value []byte) {
	switch f {
	case state.FamilyReplayMark:
		r := rows.Reader{B: rest}
		src := r.String()
		if r.Err == nil && len(value) == 8 {
			in.ReplayMarks = append(in.ReplayMarks, Checkpoint{Source: src, Partition: part, Next: binary.BigEndian.Uint64(value)})
		}
	case state.FamilyOrigins:
		in.Origins++
	case state.FamilySequences:
		in.Sequences++
	case state.FamilyChangelog, state.FamilyLogHead:
		in.Grouped = true
	case state.FamilyBuild:
		if len(value) == 8 {
			in.Builds = append(in.Builds, BuildPart{Table: string(rest), Partition: part, Next: binary.BigEndian.Uint64(value), HandedOver: true})
		}
	}
}

// BuildPart is one partition of a table built in the background
// (docs/design.md §19): its build reader's checkpoint (Source is the
// source it reads), or the offset it was handed over at.
type BuildPart struct {
	Table, Source string
	Partition     uint32
	Next          uint64
	HandedOver    bool
}

// buildCheckpoint files a build reader's checkpoint (state.BuildSourceName)
// under in.Builds and reports whether it was one.
func buildCheckpoint(in *Report, name string, part uint32, value []byte) bool {
	rest, ok := strings.CutPrefix(name, state.BuildSourcePrefix)
	if !ok || len(value) != 8 {
		return false
	}
	table, source, _ := strings.Cut(rest, "\x00")
	in.Builds = append(in.Builds, BuildPart{Table: table, Source: source, Partition: part, Next: binary.BigEndian.Uint64(value)})
	return true
}
