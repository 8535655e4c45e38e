package executor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// ResequenceSpec turns the re-sequencer on for a source (docs/design.md §10):
// records of sequenced types (stream.WithSequence) are applied in the order of
// their strand-seq headers, per key, whatever order the log has them in.
// Zero fields take the defaults given.
type ResequenceSpec struct {
	// Start says where a key's sequence starts; default stream.StartAtOne.
	Start stream.SeqStart
	// Gap is the gap policy; default stream.GapWait.
	Gap stream.GapPolicy
	// GapTimeout is how long (on the processor's clock) the oldest record
	// held behind a gap waits before the gap is given up under GapSkip or
	// GapDeadLetter; 0 means no timeout (only a bound's overflow gives a
	// gap up). It must be 0 under GapWait.
	GapTimeout time.Duration
	// MaxHeldPerKey and MaxHeld bound the records held per key and per
	// partition; defaults 10,000 and 100,000. An overflow gives up the
	// key's first gap at once (GapWait: as GapDeadLetter).
	MaxHeldPerKey, MaxHeld int
	// Duplicates is the duplicate policy; default stream.DropDuplicates.
	Duplicates stream.DuplicatePolicy
	// OnGap, if set, is called after each commit with every gap notice
	// that commit recorded (the durable record is the notice's row; see
	// Gaps). It runs on the partition's goroutine and must not block.
	OnGap func(stream.GapNotice)
}

const (
	defaultMaxHeldPerKey = 10_000
	defaultMaxHeld       = 100_000
)

// check fills defaults and returns the problems of the spec.
func (r *ResequenceSpec) check() []error {
	var errs []error
	if r.Start == 0 {
		r.Start = stream.StartAtOne
	}
	if r.Gap == 0 {
		r.Gap = stream.GapWait
	}
	if r.Duplicates == 0 {
		r.Duplicates = stream.DropDuplicates
	}
	if r.MaxHeldPerKey == 0 {
		r.MaxHeldPerKey = defaultMaxHeldPerKey
	}
	if r.MaxHeld == 0 {
		r.MaxHeld = defaultMaxHeld
	}
	if !r.Start.Valid() {
		errs = append(errs, fmt.Errorf("strand: unknown start %d", uint8(r.Start)))
	}
	if !r.Gap.Valid() {
		errs = append(errs, fmt.Errorf("strand: unknown gap policy %d", uint8(r.Gap)))
	}
	if !r.Duplicates.Valid() {
		errs = append(errs, fmt.Errorf("strand: unknown duplicate policy %d", uint8(r.Duplicates)))
	}
	if r.GapTimeout < 0 {
		errs = append(errs, fmt.Errorf("strand: gap timeout %v is negative", r.GapTimeout))
	}
	if r.Gap == stream.GapWait && r.GapTimeout > 0 {
		errs = append(errs, fmt.Errorf("strand: gap timeout %v with gap policy wait, which never times out; choose skip or dead-letter", r.GapTimeout))
	}
	if r.MaxHeldPerKey < 1 || r.MaxHeld < 1 {
		errs = append(errs, fmt.Errorf("strand: bounds %d per key, %d per partition; want at least 1", r.MaxHeldPerKey, r.MaxHeld))
	}
	return errs
}

// seqState is the re-sequencer's state of one key: the next expected
// number and the records held, ascending by number. A batch changes it in
// place; its first change in a batch saves the old value (seqBatch.undo)
// so that a batch that is not committed can be rolled back.
type seqState struct {
	key  string
	next uint64 // 0: not started (StartAtFirstSeen, nothing seen yet)
	held []*holdEntry
	gen  uint64 // the last batch that touched it
}

// seqUndo is a key's state before a batch touched it.
type seqUndo struct {
	s     *seqState
	next  uint64
	held  []*holdEntry
	fresh bool // the key was not in Task.seq before the batch
}

// holdEntry is one held record. Its payload stays in memory (rec) only
// while the row that holds it may not be committed yet; then it is read
// back from its row when let through.
type holdEntry struct {
	seq    uint64
	offset uint64
	since  int64 // unix nanoseconds on the task's clock
	rec    *connector.Record
	gen    uint64 // the batch that held it (its row is written at the end of that batch)
}

func (s *seqState) oldest() int64 {
	o := s.held[0].since
	for _, h := range s.held[1:] {
		o = min(o, h.since)
	}
	return o
}

func (s *seqState) find(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(s.held, seq, func(h *holdEntry, seq uint64) int { return cmpU64(h.seq, seq) })
}

// The re-sequencer's rows (held records in state.FamilyHolds; next numbers,
// their delta rows and gap notices in state.FamilySequences) are laid out
// by internal/rows (rows.HoldKey, rows.SeqNextKey, rows.DeltaKey,
// rows.GapKey).

// deltaRowsMax is how many delta rows a partition keeps before a batch
// folds them into the keys' own rows: one Pebble write per batch instead of
// one per key, and loading reads at most deltaRowsMax deltas.
const deltaRowsMax = 64

// loadHolds reads the task's held records (without payloads) and their
// keys' next expected numbers.
func (t *Task) loadHolds(ctx context.Context) error {
	if t.src.reseq == nil {
		return nil
	}
	err := t.db.Rows(ctx, state.FamilyHolds, t.partition, func(key, value []byte) error {
		rd := rows.Reader{B: key}
		if rd.String() != t.src.name {
			return nil
		}
		k := rd.Bytes()
		seq := rd.U64()
		if rd.Err != nil {
			return fmt.Errorf("%w: hold row key %x: %w", stream.ErrCodec, key, rd.Err)
		}
		since, r, err := rows.DecodeHold(t.partition, value)
		if err != nil {
			return fmt.Errorf("key %q seq %d: %w", k, seq, err)
		}
		s := t.seq[string(k)]
		if s == nil {
			s = &seqState{key: string(k)}
			t.seq[s.key] = s
		}
		s.held = append(s.held, &holdEntry{seq: seq, offset: r.Offset, since: since})
		t.heldTotal++
		return nil
	})
	if err != nil {
		return err
	}
	// The delta rows, in order: the latest next numbers of the keys they
	// name. A partition without sequence rows of the source has never been
	// re-sequenced: keys this Task has not seen need no read.
	t.seqFresh = true
	t.deltaFirst, t.deltaNext = 0, 0
	deltas := map[string]uint64{}
	errDone := errors.New("done")
	err = t.db.Rows(ctx, state.FamilySequences, t.partition, func(key, value []byte) error {
		rd := rows.Reader{B: key}
		if rd.String() != t.src.name {
			return nil
		}
		t.seqFresh = false
		if rd.Byte() != rows.SeqKindDelta {
			return errDone // 'g' and 'n' rows sort after the deltas
		}
		n := rd.U64()
		if rd.Err != nil {
			return fmt.Errorf("%w: sequence delta row key %x: %w", stream.ErrCodec, key, rd.Err)
		}
		if t.deltaNext == 0 {
			t.deltaFirst = n
		}
		t.deltaNext = n + 1
		return rows.DecodeDelta(value, func(k []byte, next uint64) { deltas[string(k)] = next })
	})
	if errors.Is(err, errDone) {
		err = nil
	}
	if err != nil {
		return err
	}
	for k, next := range deltas {
		s := t.seq[k]
		if s == nil {
			s = &seqState{key: k}
			t.seq[k] = s
		}
		s.next = next
		t.deltaDirty = append(t.deltaDirty, s)
	}
	for k, s := range t.seq {
		if _, ok := deltas[k]; !ok {
			next, err := t.readNext([]byte(k))
			if err != nil {
				return err
			}
			s.next = next
		}
		if len(s.held) > 0 {
			t.heldKeys[k] = s
		}
	}
	t.refreshHoldTimes()
	return nil
}

// readNext reads a key's committed next expected number (0 when none).
func (t *Task) readNext(key []byte) (uint64, error) {
	v, ok, err := t.db.Row(state.FamilySequences, t.partition, rows.SeqNextKey(t.src.name, key))
	if err != nil || !ok {
		return 0, err
	}
	rd := rows.Reader{B: v}
	if f := rd.Byte(); f != rows.SeqFormat {
		return 0, fmt.Errorf("%w: sequence row of key %q: format %d unknown", stream.ErrCodec, key, f)
	}
	next := rd.Uvarint()
	if rd.Err != nil {
		return 0, fmt.Errorf("%w: sequence row of key %q: %w", stream.ErrCodec, key, rd.Err)
	}
	return next, nil
}

// refreshHoldTimes recomputes the oldest hold of the partition.
func (t *Task) refreshHoldTimes() {
	t.oldestHold, t.hasHold = 0, false
	for _, s := range t.heldKeys {
		if o := s.oldest(); !t.hasHold || o < t.oldestHold {
			t.oldestHold, t.hasHold = o, true
		}
	}
}

// nextGapTimeout returns when the earliest gap times out.
func (t *Task) nextGapTimeout() (time.Time, bool) {
	rs := t.src.reseq
	if rs == nil || !t.hasHold || rs.GapTimeout <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, t.oldestHold).Add(rs.GapTimeout), true
}

// HeldStats returns how many keys the re-sequencer holds records of, how
// many records, when the oldest was held (zero when none), and when the
// earliest gap times out (zero when none will).
func (t *Task) HeldStats() (keys, records int, oldest, timeout time.Time) {
	if t.hasHold {
		oldest = time.Unix(0, t.oldestHold)
	}
	timeout, _ = t.nextGapTimeout()
	return len(t.heldKeys), t.heldTotal, oldest, timeout
}

// seqNote marks a record of a batch for prepare: let through from a hold
// (exempt from the stale check) or dead-lettered by the re-sequencer.
type seqNote struct {
	kind   uint8
	reason deadletter.Reason
	err    error
}

const (
	noteNone uint8 = iota
	noteLetThrough
	noteDead
)

// seqBatch is the re-sequencer's work on one batch.
type seqBatch struct {
	t          *Task
	tx         *state.Txn
	now        time.Time
	gen        uint64
	undo       []seqUndo // the keys touched, in first-touch order
	compact    bool      // this batch folds the delta rows into key rows
	delta      bool      // this batch wrote a delta row
	heldNow    int       // held records of the partition, with this batch
	memNew     []*holdEntry
	heldOffs   []uint64
	letThrough int
	dups       int
	dropped    int // duplicates dropped (not in the batch's input)
	// readmitted counts replayed events passed at their key's position
	// (replay.go).
	readmitted int
	gaps       []stream.GapNotice
	err        error

	in      []connector.Record
	fromRow []bool
	attempt []int
	notes   []seqNote
}

func (sb *seqBatch) state(key []byte) (*seqState, error) {
	t := sb.t
	s, ok := t.seq[unsafe.String(unsafe.SliceData(key), len(key))]
	if ok {
		if s.gen != sb.gen {
			// First change in this batch: keep the old state (the held
			// slice is copied, it may be changed in place).
			sb.undo = append(sb.undo, seqUndo{s: s, next: s.next, held: slices.Clone(s.held)})
			s.gen = sb.gen
		}
		return s, nil
	}
	var next uint64
	if !t.seqFresh {
		var err error
		if next, err = t.readNext(key); err != nil {
			return nil, err
		}
	}
	if next == 0 && t.src.reseq.Start == stream.StartAtOne {
		next = 1
	}
	s = &seqState{key: string(key), next: next, gen: sb.gen}
	t.seq[s.key] = s
	sb.undo = append(sb.undo, seqUndo{s: s, fresh: true})
	return s, nil
}

// rollback puts every key the batch touched back as it was.
func (sb *seqBatch) rollback() {
	t := sb.t
	for i := len(sb.undo) - 1; i >= 0; i-- {
		u := sb.undo[i]
		if u.fresh {
			delete(t.seq, u.s.key)
			continue
		}
		u.s.next, u.s.held, u.s.gen = u.next, u.held, 0
	}
	sb.undo = nil
}

func (sb *seqBatch) add(r connector.Record, n seqNote) {
	sb.in = append(sb.in, r)
	sb.fromRow = append(sb.fromRow, false)
	sb.attempt = append(sb.attempt, 1)
	sb.notes = append(sb.notes, n)
}

// load returns a held record, from memory or from its row.
func (sb *seqBatch) load(key []byte, h *holdEntry) (connector.Record, error) {
	if h.rec != nil {
		return *h.rec, nil
	}
	t := sb.t
	v, ok, err := t.db.Row(state.FamilyHolds, t.partition, rows.HoldKey(t.src.name, key, h.seq))
	if err != nil {
		return connector.Record{}, err
	}
	if !ok {
		return connector.Record{}, fmt.Errorf("strand: source %q partition %d: held record of key %q seq %d has no row", t.src.name, t.partition, key, h.seq)
	}
	_, r, err := rows.DecodeHold(t.partition, v)
	return r, err
}

// take removes the first held record of s (whose number is s.next), adds
// it to the batch with note n and deletes its row.
func (sb *seqBatch) take(key []byte, s *seqState, n seqNote) error {
	h := s.held[0]
	r, err := sb.load(key, h)
	if err != nil {
		return err
	}
	s.held = s.held[1:]
	s.next++
	sb.heldNow--
	sb.letThrough++
	if h.gen != sb.gen { // held by an earlier batch: it has a row
		sb.tx.DeleteRow(state.FamilyHolds, sb.t.partition, rows.HoldKey(sb.t.src.name, key, h.seq))
	}
	sb.add(r, n)
	return nil
}

// letThroughContiguous lets through every held record that now follows on.
func (sb *seqBatch) letThroughContiguous(key []byte, s *seqState) error {
	for len(s.held) > 0 && s.held[0].seq == s.next {
		if err := sb.take(key, s, seqNote{kind: noteLetThrough}); err != nil {
			return err
		}
	}
	return nil
}

// giveUp gives up the first gap of key: records a notice and lets through or
// dead-letters the held records that follow it, by the gap policy.
func (sb *seqBatch) giveUp(key []byte, s *seqState, cause stream.GapCause) error {
	rs := sb.t.src.reseq
	policy := rs.Gap
	if policy == stream.GapWait {
		policy = stream.GapDeadLetter
	}
	g := stream.GapNotice{
		Source: sb.t.src.name, Partition: sb.t.partition, Key: bytes.Clone(key),
		From: s.next, To: s.held[0].seq - 1, Age: sb.now.Sub(time.Unix(0, s.oldest())), At: sb.now,
		Cause: cause, Policy: policy,
	}
	sb.gaps = append(sb.gaps, g)
	sb.tx.PutRow(state.FamilySequences, sb.t.partition, rows.GapKey(sb.t.src.name, key, g.From), rows.AppendGap(nil, &g))
	s.next = s.held[0].seq
	if policy == stream.GapSkip {
		return sb.letThroughContiguous(key, s)
	}
	reason := deadletter.ReasonGapTimeout
	if cause == stream.GapOverflow {
		reason = deadletter.ReasonHoldOverflow
	}
	for len(s.held) > 0 && s.held[0].seq == s.next {
		err := fmt.Errorf("%w: seq %d..%d of key %q missing (%s)", stream.ErrGap, g.From, g.To, key, cause)
		if err := sb.take(key, s, seqNote{kind: noteDead, reason: reason, err: err}); err != nil {
			return err
		}
	}
	return nil
}

// resequence builds the batch's input after the parked records: the
// records of sequenced types in their keys' sequence order (held ones
// left out, ones let through put where the record that let them through was),
// everything else as it came. Gaps that timed out are given up first.
func (t *Task) resequence(sb *seqBatch, records []connector.Record) error {
	rs := t.src.reseq
	// Timeouts first: what they let through is older than the batch.
	if deadline, ok := t.nextGapTimeout(); ok && !deadline.After(sb.now) {
		limit := sb.now.Add(-rs.GapTimeout).UnixNano()
		keys := make([]string, 0, len(t.heldKeys))
		for k, s := range t.heldKeys {
			if s.oldest() <= limit {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			key := []byte(k)
			s, err := sb.state(key)
			if err != nil {
				return err
			}
			for len(s.held) > 0 && s.oldest() <= limit {
				if err := sb.giveUp(key, s, stream.GapTimedOut); err != nil {
					return err
				}
			}
		}
	}
	for i := range records {
		r := &records[i]
		rt := t.src.routes[r.Headers.Tag]
		if rt == nil || !rt.sequenced || (t.hasNext && r.Offset < t.next) || r.HeaderErr != nil || r.Headers.Validate() != nil {
			sb.add(*r, seqNote{})
			continue
		}
		if rows.IsReplayOrigin(r.Headers.Origin) {
			// A replay (strand dlq replay): its strand-seq is the one the
			// producer gave it long ago; it is applied where its key is now,
			// at most once (its origin).
			sb.readmitted++
			sb.add(*r, seqNote{})
			continue
		}
		if !r.Headers.HasSeq || r.Headers.Seq == 0 {
			what := "missing"
			if r.Headers.HasSeq {
				what = "0 (sequence numbers start at 1)"
			}
			sb.add(*r, seqNote{kind: noteDead, reason: deadletter.ReasonBadSequence,
				err: fmt.Errorf("%w: type tag %d is sequenced, its %s header is %s", stream.ErrBadSequence, r.Headers.Tag, connector.HeaderSeq, what)})
			continue
		}
		key, seq := r.Headers.Key, r.Headers.Seq
		s, err := sb.state(key)
		if err != nil {
			return err
		}
		if s.next == 0 { // StartAtFirstSeen
			s.next = seq
		}
		dup := seq < s.next
		if !dup && seq > s.next {
			_, dup = s.find(seq)
		}
		switch {
		case dup:
			sb.dups++
			if rs.Duplicates == stream.DeadLetterDuplicates {
				sb.add(*r, seqNote{kind: noteDead, reason: deadletter.ReasonDuplicate,
					err: fmt.Errorf("%w: seq %d of key %q (next expected %d)", stream.ErrDuplicate, seq, key, s.next)})
			} else {
				sb.dropped++
			}
		case seq == s.next:
			sb.add(*r, seqNote{})
			s.next++
			if err := sb.letThroughContiguous(key, s); err != nil {
				return err
			}
		default:
			// The batch's own record until the end of the batch: most
			// holds are let through by the same batch.
			h := &holdEntry{seq: seq, offset: r.Offset, since: sb.now.UnixNano(), rec: r, gen: sb.gen}
			at, _ := s.find(seq)
			s.held = slices.Insert(s.held, at, h)
			sb.heldNow++
			sb.heldOffs = append(sb.heldOffs, r.Offset)
			for len(s.held) > 0 && (len(s.held) > rs.MaxHeldPerKey || sb.heldNow > rs.MaxHeld) {
				if err := sb.giveUp(key, s, stream.GapOverflow); err != nil {
					return err
				}
			}
		}
	}
	// Rows: the records held by this batch and still held, and every
	// touched key's next number.
	var kb, vb, delta []byte
	nDelta := 0
	prefix := rows.AppendString(nil, t.src.name)
	sb.compact = t.deltaNext-t.deltaFirst >= deltaRowsMax
	putNext := func(s *seqState) {
		kb = rows.AppendSeqNextKey(kb[:0], prefix, s.key)
		vb = binary.AppendUvarint(append(vb[:0], rows.SeqFormat), s.next)
		sb.tx.PutRow(state.FamilySequences, t.partition, kb, vb) // copies both
	}
	for _, u := range sb.undo {
		s := u.s
		for _, h := range s.held {
			if h.gen == sb.gen {
				own := ownRecord(*h.rec)
				h.rec = &own
				sb.memNew = append(sb.memNew, h)
				sb.tx.PutRow(state.FamilyHolds, t.partition, rows.HoldKey(t.src.name, []byte(s.key), h.seq), rows.AppendHold(nil, h.since, h.rec))
			}
		}
		if s.next == 0 {
			continue
		}
		if sb.compact {
			putNext(s)
			continue
		}
		delta = rows.AppendString(delta, s.key)
		delta = binary.AppendUvarint(delta, s.next)
		nDelta++
	}
	switch {
	case sb.compact:
		// Fold the deltas into the keys' own rows (the keys of this batch
		// are written above; a key in both is written twice, the same value).
		for _, s := range t.deltaDirty {
			if s.gen != sb.gen && s.next != 0 {
				putNext(s)
			}
		}
		for n := t.deltaFirst; n < t.deltaNext; n++ {
			sb.tx.DeleteRow(state.FamilySequences, t.partition, rows.DeltaKey(t.src.name, n))
		}
	case nDelta > 0:
		v := binary.AppendUvarint([]byte{rows.SeqFormat}, uint64(nDelta))
		sb.tx.PutRow(state.FamilySequences, t.partition, rows.DeltaKey(t.src.name, t.deltaNext), append(v, delta...))
		sb.delta = true
	}
	return nil
}

// applySeq installs a staged batch's re-sequencer state in the Task.
func (t *Task) applySeq(sb *seqBatch) {
	for _, u := range sb.undo {
		s := u.s
		if len(s.held) > 0 {
			t.heldKeys[s.key] = s
		} else {
			delete(t.heldKeys, s.key)
		}
	}
	switch {
	case sb.compact:
		t.deltaFirst = t.deltaNext
		t.deltaDirty = t.deltaDirty[:0]
	case sb.delta:
		if t.deltaNext == t.deltaFirst {
			t.deltaDirty = t.deltaDirty[:0]
		}
		t.deltaNext++
		for _, u := range sb.undo {
			t.deltaDirty = append(t.deltaDirty, u.s)
		}
	}
	sb.undo = nil
	t.heldTotal = sb.heldNow
	// Every batch before this one has committed (Submit installs a batch
	// after the previous commit finished): the rows of the records they
	// held are durable, so their payloads are read back from there. This
	// batch's stay in memory until the next one is installed.
	for _, h := range t.memHeld {
		h.rec = nil
	}
	t.memHeld = append(t.memHeld[:0], sb.memNew...)
	t.refreshHoldTimes()
}

// canonicalParked puts the sequenced records among a parked key's records
// in sequence order, in the places they take in offset order: parked rows
// reload in offset order, but the re-sequencer let them through in sequence
// order.
func (t *Task) canonicalParked(recs []connector.Record) []connector.Record {
	var idx []int
	for i := range recs {
		if rt := t.src.routes[recs[i].Headers.Tag]; rt != nil && rt.sequenced && recs[i].Headers.HasSeq {
			idx = append(idx, i)
		}
	}
	if len(idx) < 2 {
		return recs
	}
	seqd := make([]connector.Record, len(idx))
	for j, i := range idx {
		seqd[j] = recs[i]
	}
	if slices.IsSortedFunc(seqd, func(a, b connector.Record) int { return cmpU64(a.Headers.Seq, b.Headers.Seq) }) {
		return recs
	}
	slices.SortStableFunc(seqd, func(a, b connector.Record) int { return cmpU64(a.Headers.Seq, b.Headers.Seq) })
	out := slices.Clone(recs)
	for j, i := range idx {
		out[i] = seqd[j]
	}
	return out
}

// ReadHolds returns the committed held records of one key of a source
// partition, in sequence order.
func ReadHolds(ctx context.Context, db *state.DB, source string, partition uint32, key []byte) ([]stream.HeldRecord, error) {
	var out []stream.HeldRecord
	prefix := rows.HoldsPrefix(source, key)
	err := db.Rows(ctx, state.FamilyHolds, partition, func(k, v []byte) error {
		if !bytes.HasPrefix(k, prefix) || len(k) != len(prefix)+8 {
			return nil
		}
		since, r, err := rows.DecodeHold(partition, v)
		if err != nil {
			return err
		}
		out = append(out, stream.HeldRecord{Record: r, Since: time.Unix(0, since)})
		return nil
	})
	if err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: read holds of key %q: %w", source, partition, key, err)
	}
	return out, nil
}

// ReadGaps returns the committed gap notices of one key of a source
// partition (every key's when key is nil), in key and sequence order.
func ReadGaps(ctx context.Context, db *state.DB, source string, partition uint32, key []byte) ([]stream.GapNotice, error) {
	var out []stream.GapNotice
	err := db.Rows(ctx, state.FamilySequences, partition, func(k, v []byte) error {
		rd := rows.Reader{B: k}
		if rd.String() != source || rd.Byte() != rows.SeqKindGap {
			return nil
		}
		kb := rd.Bytes()
		from := rd.U64()
		if rd.Err != nil || (key != nil && !bytes.Equal(kb, key)) {
			return nil
		}
		g, err := rows.DecodeGap(source, partition, kb, from, v)
		if err != nil {
			return err
		}
		out = append(out, g)
		return nil
	})
	if err != nil {
		return nil, strerr.Errorf("strand: source %q partition %d: read gaps: %w", source, partition, err)
	}
	return out, nil
}
