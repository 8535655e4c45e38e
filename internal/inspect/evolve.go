package inspect

import (
	"encoding/binary"

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
	}
}
