package executor

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/deadletter"
)

// Failed final results (docs/design.md §18, "Windows"). A window whose
// EmitFinal function fails as it closes (an error, such as a result that
// does not encode, or a panic; or a key that does not decode) is closed as
// on success, and its result is dead-lettered in the same commit
// (deadletter.ReasonWindowFinal), with the window's aggregate so that the
// result can be computed again. The function is a pure mapping of the
// aggregate, so a failure is permanent in practice: it is not retried, and
// the failure policy (PassPoison, BlockPoisonedKey) does not apply: a closed
// window cannot wait. Every failing window of a key has its own letter.

// windowFailure is a window whose final result failed: its bounds, its
// aggregate encoded with the table's codec (nil when it did not encode)
// and the error.
type windowFailure struct {
	start, end int64
	agg        []byte
	err        error
}

// failure describes the failed final result of w.
func (c *WindowCore[K, A]) failure(w WindowEntry[A], err error) windowFailure {
	f := windowFailure{start: w.Start, end: w.End, err: err}
	_, vc := c.table.Codecs()
	rc, ok := vc.(windowRowCodec[A])
	if !ok {
		f.err = fmt.Errorf("%w (the aggregate is not in the dead letter: the table has no value codec)", err)
		return f
	}
	agg, aerr := rc.agg.Append(nil, w.Agg)
	if aerr != nil {
		f.err = fmt.Errorf("%w (the aggregate is not in the dead letter: it does not encode: %w)", err, aerr)
		return f
	}
	f.agg = agg
	return f
}

// deadLetterWindow writes the dead letter of a window's failed final
// result into b's Txn, ordered at the offset of the batch's last record
// (the checkpoint's predecessor for a batch without records), so it is
// published once the commit returned, like the batch's own dead letters;
// its row key names the window (rows.WindowDeadLetterKey) and its message
// id hashes its payload.
func (t *Task) deadLetterWindow(b *batch, res *Result, wt *windowTime, key []byte, f windowFailure) {
	res.TimerFailures++
	start, end := time.Unix(0, f.start).UTC(), time.Unix(0, f.end).UTC()
	werr := fmt.Errorf("final result of window [%s, %s) of table %q: %w",
		start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), wt.name, f.err)
	off := max(t.next, 1) - 1
	if b.last.ok {
		off = b.last.offset
	}
	dl := deadletter.Letter{
		Source: t.src.name, Partition: t.partition, Offset: off,
		Reason: deadletter.ReasonWindowFinal, Err: werr, Attempts: 1,
		Payload: deadletter.Window{Table: wt.name, Key: append([]byte(nil), key...), Start: start, End: end, Aggregate: f.agg}.Payload(),
	}
	rk := rows.WindowDeadLetterKey(t.src.name, off, wt.name, rows.EncodeDeadline(start), rows.EncodeDeadline(end), key)
	b.tx.PutRow(state.FamilyDeadLetters, t.partition, rk, rows.AppendLetter(nil, dl))
	res.DeadLetters = append(res.DeadLetters, dl)
	t.log.Error("strand: a window's final result failed: the window is closed and its result dead-lettered",
		slog.String("source", t.src.name), slog.Uint64("partition", uint64(t.partition)),
		slog.String("table", wt.name), slog.String("key", fmt.Sprintf("%q", key)),
		slog.Time("start", start), slog.Time("end", end), slog.Any("err", f.err))
}
