package executor

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// Windows (docs/design.md §18, "Windows"): a window table folds the events
// of a keyed stream into one aggregate per key and window, on event time.
//
// Each window table has, per partition of its source, a stream time: the
// highest event time of its input records seen so far, in log order. An
// event belongs to the windows its event time falls in; a window [start,
// end) is open while the stream time is below end + grace, then closed:
// its result is final, emitted once (EmitFinal) and kept for queries until
// the stream time passes end + retention. An event whose windows are all
// closed at its offset is late. Lateness is judged against the stream time
// at the event's own offset (the highest event time of the records before
// it and itself), so window contents do not depend on the batching.
//
// Idle partitions: with an idleness d, a partition that received no input
// record for d on the App's clock has its stream time advanced with the
// clock: at a batch or sweep at time now, it is max(stream time, the stream
// time at the last input record + (now − that record's arrival − d)).
//
// Rows (FamilyTimers, under the partition):
//
//	'M' uvarint(len(table)) table                       → st, anchor, last (3×i64 BE)  the stream time
//	'W' uvarint(len(table)) table 0x00 at(u64 BE) key   → empty       the index, in event-time order
//	'W' uvarint(len(table)) table 0x01 key              → at(u64 BE)  the key's next window action
//
// A key's next action is the earliest of its open windows' end + grace and
// its closed windows' end + retention. A sweep walks the index up to the
// stream time, in the batch's Txn like the timers' sweep: it closes and
// emits, drops expired windows, and sets the key's next action. The stream
// time row commits with the checkpoint, so a restart resumes it exactly.

// WindowKind is the shape of a window table's windows.
type WindowKind uint8

// The window shapes.
const (
	// WindowTumbling: consecutive windows of one size, [k·size, (k+1)·size).
	WindowTumbling WindowKind = iota + 1
	// WindowHopping: windows of one size starting every advance; an event
	// belongs to size/advance of them.
	WindowHopping
	// WindowSession: per key, events less than a gap apart share a window
	// [first event, last event + gap).
	WindowSession
)

// String names the kind.
func (k WindowKind) String() string {
	switch k {
	case WindowTumbling:
		return "tumbling"
	case WindowHopping:
		return "hopping"
	case WindowSession:
		return "session"
	}
	return fmt.Sprintf("WindowKind(%d)", uint8(k))
}

// WindowShape says which windows an event belongs to.
type WindowShape struct {
	Kind WindowKind
	// Size and Advance of tumbling (Advance = Size) and hopping windows;
	// Gap of session windows.
	Size, Advance, Gap time.Duration
}

// Check returns an error for a shape that cannot work.
func (s WindowShape) Check() error {
	switch s.Kind {
	case WindowTumbling:
		if s.Size <= 0 {
			return fmt.Errorf("tumbling window size %v, want more than 0", s.Size)
		}
	case WindowHopping:
		if s.Size <= 0 || s.Advance <= 0 || s.Advance > s.Size {
			return fmt.Errorf("hopping windows of size %v every %v, want 0 < advance <= size", s.Size, s.Advance)
		}
		if s.Size/s.Advance > 1000 {
			return fmt.Errorf("hopping windows of size %v every %v: an event would belong to %d windows, want at most 1000", s.Size, s.Advance, s.Size/s.Advance)
		}
	case WindowSession:
		if s.Gap <= 0 {
			return fmt.Errorf("session gap %v, want more than 0", s.Gap)
		}
	default:
		return fmt.Errorf("unknown window kind %d", s.Kind)
	}
	return nil
}

// floorDiv is a/b rounded towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// assign appends the [start, end) of the fixed windows et belongs to, in
// start order (not for sessions).
func (s WindowShape) assign(dst [][2]int64, et int64) [][2]int64 {
	size := int64(s.Size)
	adv := size
	if s.Kind == WindowHopping {
		adv = int64(s.Advance)
	}
	last := floorDiv(et, adv) * adv
	first := last
	for first-adv > et-size {
		first -= adv
	}
	for st := first; st <= last; st += adv {
		dst = append(dst, [2]int64{st, st + size})
	}
	return dst
}

// WindowEntry is one window of a key: its bounds in Unix nanoseconds,
// whether it is closed (final) and its aggregate.
type WindowEntry[A any] struct {
	Start, End int64
	Closed     bool
	Agg        A
}

// WindowRow is the value a window table stores per key: its windows, in
// start order (then end order: two sessions may start together).
type WindowRow[A any] struct {
	Windows []WindowEntry[A]
}

// WindowRowCodec encodes a WindowRow with the aggregate's codec.
func WindowRowCodec[A any](agg state.Codec[A]) state.Codec[WindowRow[A]] {
	if agg == nil {
		return nil
	}
	return windowRowCodec[A]{agg}
}

type windowRowCodec[A any] struct{ agg state.Codec[A] }

func (c windowRowCodec[A]) Append(dst []byte, v WindowRow[A]) ([]byte, error) {
	dst = append(dst, 1) // format version
	dst = binary.AppendUvarint(dst, uint64(len(v.Windows)))
	for _, w := range v.Windows {
		dst = binary.AppendVarint(dst, w.Start)
		dst = binary.AppendVarint(dst, w.End-w.Start)
		if w.Closed {
			dst = append(dst, 1)
		} else {
			dst = append(dst, 0)
		}
		lenAt := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		var err error
		if dst, err = c.agg.Append(dst, w.Agg); err != nil {
			return nil, fmt.Errorf("window aggregate: %w", err)
		}
		binary.BigEndian.PutUint32(dst[lenAt:], uint32(len(dst)-lenAt-4))
	}
	return dst, nil
}

var errWindowRow = errors.New("malformed window row")

func (c windowRowCodec[A]) Decode(data []byte) (WindowRow[A], error) {
	var v WindowRow[A]
	if len(data) == 0 || data[0] != 1 {
		return v, fmt.Errorf("%w: unknown format", errWindowRow)
	}
	data = data[1:]
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)) {
		return v, fmt.Errorf("%w: count", errWindowRow)
	}
	data = data[k:]
	v.Windows = make([]WindowEntry[A], 0, n)
	for range n {
		start, k := binary.Varint(data)
		if k <= 0 {
			return v, fmt.Errorf("%w: start", errWindowRow)
		}
		data = data[k:]
		size, k := binary.Varint(data)
		if k <= 0 || len(data) < k+5 {
			return v, fmt.Errorf("%w: size", errWindowRow)
		}
		data = data[k:]
		closed := data[0] == 1
		l := binary.BigEndian.Uint32(data[1:5])
		data = data[5:]
		if uint64(l) > uint64(len(data)) {
			return v, fmt.Errorf("%w: aggregate length", errWindowRow)
		}
		a, err := c.agg.Decode(data[:l])
		if err != nil {
			return v, fmt.Errorf("window aggregate: %w", err)
		}
		data = data[l:]
		v.Windows = append(v.Windows, WindowEntry[A]{Start: start, End: start + size, Closed: closed, Agg: a})
	}
	return v, nil
}

// WindowConfig is a window table's configuration, shared by its
// aggregations and its sweep.
type WindowConfig struct {
	Shape WindowShape
	// Grace: how long (in event time) a window stays open after its end.
	// Retention: how long (in event time) after its end a window stays
	// queryable; at least Grace.
	Grace, Retention time.Duration
	// Idleness: after this long without an input record on the App's
	// clock, a partition's stream time advances with the clock; 0: never.
	Idleness time.Duration
	// DeadLetterLate: late events are dead-lettered (stream.Permanent)
	// instead of only counted.
	DeadLetterLate bool
}

// WindowCore is the engine's side of one window table; make one with
// NewWindowCore and give it to Aggregate and a WindowSpec.
type WindowCore[K, A any] struct {
	table *state.Table[K, WindowRow[A]]
	keys  stream.Codec[K]
	cfg   WindowConfig
	merge func(a, b A) A
	// final: the final result's envelope (EmitFinal); nil: none.
	final func(key K, start, end time.Time, agg A) (stream.Envelope, error)
	dest  string
}

// NewWindowCore returns the core of a window table. merge combines two
// aggregates (session windows that an event joins); it may be nil for
// tumbling and hopping windows.
func NewWindowCore[K, A any](table *state.Table[K, WindowRow[A]], keys stream.Codec[K], cfg WindowConfig, merge func(a, b A) A) *WindowCore[K, A] {
	return &WindowCore[K, A]{table: table, keys: keys, cfg: cfg, merge: merge}
}

// SetFinal makes the core emit each window's final result to dest when it
// closes.
func (c *WindowCore[K, A]) SetFinal(dest string, fn func(key K, start, end time.Time, agg A) (stream.Envelope, error)) {
	c.dest, c.final = dest, fn
}

// Config returns the core's configuration.
func (c *WindowCore[K, A]) Config() WindowConfig { return c.cfg }

func (c *WindowCore[K, A]) windowTable() state.Attacher { return c.table }
func (c *WindowCore[K, A]) windowName() string          { return c.table.Name() }
func (c *WindowCore[K, A]) windowDest() string          { return c.dest }
func (c *WindowCore[K, A]) windowConfig() WindowConfig  { return c.cfg }
func (c *WindowCore[K, A]) hasMerge() bool              { return c.merge != nil }

// windowCore is what the compiler and the sweep need of a WindowCore.
type windowCore interface {
	windowTable() state.Attacher
	windowName() string
	windowDest() string
	windowConfig() WindowConfig
	hasMerge() bool
	sweepKey(rc *runCtx, wt *windowTime, st int64, out *[]emitted) (next int64, closed int, failed []windowFailure, err error)
}

// WindowSpec puts a window table in a Program: Source's Tasks keep its
// stream time and sweep it. Every aggregation into it must be a handler
// of Source.
type WindowSpec struct {
	Core   windowCore
	Source string
}

// windowTime is what a Program knows of one window table.
type windowTime struct {
	name   string
	core   windowCore
	cfg    WindowConfig
	idx    int // in its source's wins
	pre    []byte
	mkey   []byte
	inputs map[planner.Tag]func(*connector.Record) (int64, bool)
}

// wmState is a partition's stream time of one window table: st, the stream
// time at the last input record (anchor) and that record's arrival on the
// App's clock (last, Unix ns); set: an input record was seen.
type wmState struct {
	st, anchor, last int64
	set              bool
	// due: the earliest action time (event time) of the table's keys that
	// may be due; MaxInt64: none.
	due int64
}

// winBatch is a batch's view of one window table.
type winBatch struct {
	st0 int64   // stream time at the batch's start (idle advance included)
	st  []int64 // per record: the stream time at it (MinInt64: not an input)
	end wmState // after the batch
	// minSet: the earliest action time the batch's aggregations set
	minSet atomic.Int64
	late   atomic.Int64
	dirty  bool
}

func encodeWM(w wmState) []byte {
	v := make([]byte, 24)
	binary.BigEndian.PutUint64(v[0:], uint64(w.st))
	binary.BigEndian.PutUint64(v[8:], uint64(w.anchor))
	binary.BigEndian.PutUint64(v[16:], uint64(w.last))
	return v
}

// loadWindows reads the stream times and earliest actions of the Task's
// window tables.
func (t *Task) loadWindows(ctx context.Context) error {
	t.wms = make([]wmState, len(t.src.wins))
	for i, wt := range t.src.wins {
		w := wmState{st: math.MinInt64, anchor: math.MinInt64, due: math.MaxInt64}
		v, ok, err := t.db.Row(FamilyTimers, t.partition, wt.mkey)
		if err != nil {
			return fmt.Errorf("read the stream time of window table %q: %w", wt.name, err)
		}
		if ok {
			if len(v) != 24 {
				return fmt.Errorf("window table %q: stream time row of %d bytes, want 24: the store is damaged", wt.name, len(v))
			}
			w.st = int64(binary.BigEndian.Uint64(v[0:]))
			w.anchor = int64(binary.BigEndian.Uint64(v[8:]))
			w.last = int64(binary.BigEndian.Uint64(v[16:]))
			w.set = true
		}
		at, ok, err := t.firstIndex(ctx, wt.pre)
		if err != nil {
			return err
		}
		if ok {
			w.due = at.UnixNano()
		}
		t.wms[i] = w
		t.lowerDue(w.clockDue(wt.cfg))
	}
	return nil
}

// streamTimeAt returns the stream time at now: the committed one, advanced
// with the clock when the partition has been idle for the idleness.
func (w *wmState) streamTimeAt(cfg WindowConfig, now int64) int64 {
	st := w.st
	if cfg.Idleness > 0 && w.set {
		if idle := now - w.last - int64(cfg.Idleness); idle > 0 {
			st = max(st, satAdd(w.anchor, idle))
		}
	}
	return st
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

// clockDue returns when, on the App's clock, the earliest action may be
// due: MinInt64 when the stream time reached it, the time the idle advance
// reaches it, or MaxInt64 (only input records can bring it).
func (w *wmState) clockDue(cfg WindowConfig) int64 {
	switch {
	case w.due == math.MaxInt64:
		return math.MaxInt64
	case w.set && w.due <= w.st:
		return math.MinInt64
	case cfg.Idleness > 0 && w.set:
		return satAdd(satAdd(w.last, int64(cfg.Idleness)), w.due-w.anchor)
	}
	return math.MaxInt64
}

// windowsStart gives b its view of the Task's window tables: the stream
// time at the batch's start. Call it before the sweep.
func (t *Task) windowsStart(b *batch) {
	if len(t.src.wins) == 0 {
		return
	}
	now := b.now.UnixNano()
	b.win = make([]winBatch, len(t.src.wins))
	for i, wt := range t.src.wins {
		w := &b.win[i]
		w.end = t.wms[i]
		w.st0 = w.end.streamTimeAt(wt.cfg, now)
		if w.st0 != w.end.st {
			w.end.st, w.dirty = w.st0, true
		}
		w.minSet.Store(math.MaxInt64)
	}
}

// windowsPrepass computes, per record, the stream time at it. Call it
// after the sweep, before the records run.
func (t *Task) windowsPrepass(b *batch) {
	now := b.now.UnixNano()
	for i, wt := range t.src.wins {
		w := &b.win[i]
		st, seen := w.st0, false
		w.st = make([]int64, len(b.records))
		for j := range b.records {
			r := &b.records[j]
			w.st[j] = math.MinInt64
			if r.HeaderErr != nil {
				continue
			}
			f := wt.inputs[r.Headers.Tag]
			if f == nil {
				continue
			}
			et, ok := f(r)
			if !ok {
				continue
			}
			st, seen = max(st, et), true
			w.st[j] = st
		}
		if seen {
			w.end.st, w.end.anchor, w.end.last, w.end.set, w.dirty = st, st, now, true, true
		}
	}
}

// windowsFinish writes the batch's stream times into its Txn and counts
// its late events.
func (t *Task) windowsFinish(b *batch, res *Result) {
	for i, wt := range t.src.wins {
		w := &b.win[i]
		if w.dirty {
			b.tx.PutRow(FamilyTimers, t.partition, wt.mkey, encodeWM(w.end))
		}
		res.Late += int(w.late.Load())
	}
}

// windowsApply takes over a staged batch's stream times and wakes the
// partition when an action is due.
func (t *Task) windowsApply(b *batch) {
	for i, wt := range t.src.wins {
		w := &b.win[i]
		wm := w.end
		wm.due = min(t.wms[i].due, w.minSet.Load())
		t.wms[i] = wm
		t.lowerDue(wm.clockDue(wt.cfg))
	}
}

// sweepWindows closes, emits and drops the windows due at the batch's
// stream times. It runs in sweep, before the batch's records.
func (t *Task) sweepWindows(b *batch, res *Result) (parked bool, _ error) {
	for i, wt := range t.src.wins {
		w := &b.win[i]
		st := w.st0
		from := rows.DeadlineIndex(wt.pre)
		var dueRows []dueRow
		next := int64(math.MaxInt64)
		if w.end.set || st != math.MinInt64 {
			lim := rows.EncodeDeadline(time.Unix(0, st))
			err := t.db.RowsFrom(b.ctx, FamilyTimers, t.partition, from, func(k, _ []byte) error {
				if len(k) < len(from)+8 || string(k[:len(from)]) != string(from) {
					return errStopScan
				}
				at := binary.BigEndian.Uint64(k[len(from):])
				if at > lim || len(dueRows) >= sweepLimit {
					next = rows.DecodeDeadline(at).UnixNano()
					return errStopScan
				}
				dueRows = append(dueRows, dueRow{index: slices.Clone(k), key: slices.Clone(k[len(from)+8:]), at: at})
				return nil
			})
			if err != nil && !errors.Is(err, errStopScan) {
				return false, fmt.Errorf("sweep window table %q: %w", wt.name, err)
			}
		} else if at, ok, err := t.firstIndex(b.ctx, wt.pre); err != nil {
			return false, err
		} else if ok {
			next = at.UnixNano()
		}
		tx := b.tx
		for _, r := range dueRows {
			kr := rows.DeadlineKey(wt.pre, r.key)
			val, ok, err := t.db.Row(FamilyTimers, t.partition, kr)
			if err != nil {
				return false, fmt.Errorf("sweep window table %q: %w", wt.name, err)
			}
			if !ok || len(val) != 8 || binary.BigEndian.Uint64(val) != r.at {
				tx.DeleteRow(FamilyTimers, t.partition, r.index) // stale
				continue
			}
			if _, ok := t.parked[string(r.key)]; ok {
				parked = true // after the key's parked events
				continue
			}
			tx.DeleteRow(FamilyTimers, t.partition, r.index)
			rc := &runCtx{ctx: b.ctx, tx: tx, partition: t.partition, key: r.key, b: b}
			var out []emitted
			n, closed, failed, err := wt.core.sweepKey(rc, wt, st, &out)
			if err != nil {
				return false, errFatal{err}
			}
			for _, f := range failed {
				t.deadLetterWindow(b, res, wt, r.key, f)
			}
			res.WindowsClosed += closed
			b.timerEmits = append(b.timerEmits, out...)
			if n == math.MaxInt64 {
				tx.DeleteRow(FamilyTimers, t.partition, kr)
			} else {
				setWindowAction(tx, t.partition, wt.pre, r.key, n)
				next = min(next, n)
			}
		}
		w.end.due = next
		t.wms[i].due = next
		if !parked {
			t.lowerDue(w.end.clockDue(wt.cfg))
		}
	}
	return parked, nil
}

// setWindowAction writes a key's next window action (event time, ns).
func setWindowAction(tx *state.Txn, partition uint32, pre, key []byte, at int64) {
	v := rows.EncodeDeadline(time.Unix(0, at))
	var val [8]byte
	binary.BigEndian.PutUint64(val[:], v)
	tx.PutRow(FamilyTimers, partition, rows.DeadlineKey(pre, key), val[:])
	tx.PutRow(FamilyTimers, partition, rows.DeadlineIndexKey(pre, v, key), nil)
}

// nextAction returns a row's earliest action time, MaxInt64 when it has no
// window.
func nextAction[A any](cfg WindowConfig, row *WindowRow[A]) int64 {
	n := int64(math.MaxInt64)
	for _, w := range row.Windows {
		if w.Closed {
			n = min(n, satAdd(w.End, int64(cfg.Retention)))
		} else {
			n = min(n, satAdd(w.End, int64(cfg.Grace)))
		}
	}
	return n
}

func (c *WindowCore[K, A]) sweepKey(rc *runCtx, wt *windowTime, st int64, out *[]emitted) (next int64, closed int, failed []windowFailure, err error) {
	row, ok, err := c.table.Read(rc.tx, rc.partition, rc.key)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("read window table %q: %w", wt.name, err)
	}
	if !ok {
		return math.MaxInt64, 0, nil, nil
	}
	var key K
	var keyErr error
	keyDone := false
	kept := row.Windows[:0]
	for _, w := range row.Windows {
		if !w.Closed && satAdd(w.End, int64(c.cfg.Grace)) <= st {
			w.Closed = true
			closed++
			if c.final != nil {
				if !keyDone {
					if key, keyErr = c.keys.Decode(rc.key); keyErr != nil {
						keyErr = fmt.Errorf("decode key: %w", keyErr)
					}
					keyDone = true
				}
				ferr := keyErr
				if ferr == nil {
					var env stream.Envelope
					if env, ferr = callFinal(c.final, key, time.Unix(0, w.Start), time.Unix(0, w.End), w.Agg); ferr == nil {
						*out = append(*out, emittedOf(c.dest, &env))
					}
				}
				if ferr != nil {
					failed = append(failed, c.failure(w, ferr))
				}
			}
		}
		if w.Closed && satAdd(w.End, int64(c.cfg.Retention)) <= st {
			continue // retention over
		}
		kept = append(kept, w)
	}
	row.Windows = kept
	if len(kept) == 0 {
		if err := c.table.Delete(rc.tx, rc.partition, rc.key); err != nil {
			return 0, 0, nil, fmt.Errorf("delete from window table %q: %w", wt.name, err)
		}
		return math.MaxInt64, closed, failed, nil
	}
	write, err := c.table.Stage(rc.tx, rc.partition, rc.key, row)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("write window table %q: %w", wt.name, err)
	}
	write()
	return nextAction(c.cfg, &row), closed, failed, nil
}

func callFinal[K, A any](fn func(K, time.Time, time.Time, A) (stream.Envelope, error), key K, s, e time.Time, a A) (env stream.Envelope, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fn(key, s, e, a)
}

// ErrLate is wrapped by the error a late event is dead-lettered with
// (WindowConfig.DeadLetterLate).
var ErrLate = errors.New("strand: late event")

// Aggregate returns the handler that folds the events of ev into the
// windows of core, with their event time from eventTime (nil: the record's
// timestamp). fold may fail its event like a projection's.
func Aggregate[K, E, A any](ev *stream.Event[K, E], core *WindowCore[K, A], eventTime func(E) time.Time, fold func(acc *A, e E) error) Handler {
	return &windowAgg[K, E, A]{ev: ev, core: core, et: eventTime, fold: fold}
}

type windowAgg[K, E, A any] struct {
	ev   *stream.Event[K, E]
	core *WindowCore[K, A]
	et   func(E) time.Time
	fold func(acc *A, e E) error
}

func (h *windowAgg[K, E, A]) decl() declaration {
	if h.ev == nil {
		return nil
	}
	return typedDecl[K, E]{h.ev}
}

func (h *windowAgg[K, E, A]) info() handlerInfo {
	hi := handlerInfo{kind: "project", tableType: fmt.Sprintf("%T", h.core.table)}
	hi.table = h.core.table.Name()
	hi.name = "window into " + hi.table
	hi.attacher = h.core.table
	return hi
}

func (h *windowAgg[K, E, A]) tableName() string { return h.core.table.Name() }

// windowInput is what the compiler needs of an aggregation.
type windowInput interface {
	windowName() string
	inputTag() planner.Tag
	eventTimeOf(r *connector.Record) (int64, bool)
}

func (h *windowAgg[K, E, A]) windowName() string    { return h.core.table.Name() }
func (h *windowAgg[K, E, A]) inputTag() planner.Tag { return h.ev.Tag() }

// eventTimeOf returns the event time of a record of the aggregation's
// type: its timestamp, or eventTime of its decoded payload (false when it
// does not decode: it is dead-lettered when its run decodes it).
func (h *windowAgg[K, E, A]) eventTimeOf(r *connector.Record) (et int64, ok bool) {
	if h.et == nil {
		return int64(r.Timestamp) * 1000, true
	}
	defer func() {
		if p := recover(); p != nil {
			ok = false
		}
	}()
	e, err := h.ev.PayloadCodec().Decode(r.Payload)
	if err != nil {
		return 0, false
	}
	return h.et(e).UnixNano(), true
}

func (h *windowAgg[K, E, A]) apply(rc *runCtx, events []E) (int, error) {
	write, at, err := h.prepare(rc, events)
	if err != nil {
		return at, err
	}
	write()
	return 0, nil
}

func (h *windowAgg[K, E, A]) revert(rc *runCtx) error {
	if err := h.core.table.Revert(rc.tx, rc.partition, rc.key); err != nil {
		return errFatal{fmt.Errorf("revert window table %q: %w", h.core.table.Name(), err)}
	}
	return nil
}

// prepare folds the run's events, unreduced (runCtx.win), into the key's
// windows.
func (h *windowAgg[K, E, A]) prepare(rc *runCtx, reduced []E) (func(), int, error) {
	b := rc.b
	wt := b.t.prog.windows[h.core.table.Name()]
	if wt == nil || rc.win == nil {
		return nil, 0, errFatal{fmt.Errorf("window table %q is not swept by source %q", h.core.table.Name(), b.t.src.name)}
	}
	w := &b.win[wt.idx]
	events, _ := rc.win.events.([]E)
	idx, owner := rc.win.idx, rc.win.owner
	row, _, err := h.core.table.Read(rc.tx, rc.partition, rc.key)
	if err != nil {
		return nil, 0, errFatal{fmt.Errorf("read window table %q: %w", wt.name, err)}
	}
	before := nextAction(h.core.cfg, &row)
	row.Windows = slices.Clone(row.Windows) // the read value may be shared with the Txn's cache
	late := 0
	var spans [][2]int64
	for j, e := range events {
		if owner[j] >= len(reduced) {
			break
		}
		i := idx[j]
		var et int64
		if h.et == nil {
			et = int64(b.records[i].Timestamp) * 1000
		} else if t, err := callEventTime(h.et, e); err != nil {
			return nil, owner[j], err
		} else {
			et = t.UnixNano()
		}
		st := w.st[i]
		if st == math.MinInt64 || b.fromRow[i] {
			st = max(w.st0, et) // a retried event: judged at the batch's stream time
		}
		added, err := h.add(&row, et, st, e, &spans)
		if err != nil {
			return nil, owner[j], err
		}
		if !added {
			if h.core.cfg.DeadLetterLate {
				return nil, owner[j], stream.Permanent(fmt.Errorf("%w: event time %s, window table %q: every window it belongs to closed (stream time %s, grace %v)",
					ErrLate, time.Unix(0, et).UTC().Format(time.RFC3339Nano), wt.name, time.Unix(0, st).UTC().Format(time.RFC3339Nano), h.core.cfg.Grace))
			}
			late++
		}
	}
	after := nextAction(h.core.cfg, &row)
	if len(row.Windows) == 0 {
		return func() { w.late.Add(int64(late)) }, 0, nil
	}
	write, err := h.core.table.Stage(rc.tx, rc.partition, rc.key, row)
	if err != nil {
		return nil, 0, errFatal{fmt.Errorf("write window table %q: %w", wt.name, err)}
	}
	return func() {
		write()
		w.late.Add(int64(late))
		if after != before {
			setWindowAction(rc.tx, rc.partition, wt.pre, rc.key, after)
			for {
				cur := w.minSet.Load()
				if after >= cur || w.minSet.CompareAndSwap(cur, after) {
					break
				}
			}
		}
	}, 0, nil
}

func callEventTime[E any](fn func(E) time.Time, e E) (t time.Time, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("event time function panicked: %v", p)
		}
	}()
	return fn(e), nil
}

func callFold[E, A any](fn func(*A, E) error, a *A, e E) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fn(a, e)
}

// add folds e (event time et, stream time st at it) into the open windows
// of row it belongs to; false: every one is closed (late).
func (h *windowAgg[K, E, A]) add(row *WindowRow[A], et, st int64, e E, spans *[][2]int64) (bool, error) {
	cfg := h.core.cfg
	open := func(end int64) bool { return satAdd(end, int64(cfg.Grace)) > st }
	if cfg.Shape.Kind == WindowSession {
		gap := int64(cfg.Shape.Gap)
		end := satAdd(et, gap)
		var kept, merged []WindowEntry[A]
		for _, w := range row.Windows {
			if !w.Closed && open(w.End) && et > w.Start-gap && et < w.End {
				merged = append(merged, w)
				continue
			}
			kept = append(kept, w)
		}
		if len(merged) == 0 && !open(end) {
			return false, nil
		}
		var acc A
		if err := callFold(h.fold, &acc, e); err != nil {
			return false, err
		}
		start := et
		if len(merged) > 0 {
			// Merge in start order, the new event's aggregate where it falls.
			var out A
			first, placed := true, false
			put := func(a A) {
				if first {
					out, first = a, false
				} else {
					out = h.core.merge(out, a)
				}
			}
			for _, m := range merged {
				if !placed && et < m.Start {
					put(acc)
					placed = true
				}
				put(m.Agg)
				start, end = min(start, m.Start), max(end, m.End)
			}
			if !placed {
				put(acc)
			}
			acc = out
		}
		row.Windows = insertWindow(kept, WindowEntry[A]{Start: start, End: end, Agg: acc})
		return true, nil
	}
	*spans = cfg.Shape.assign((*spans)[:0], et)
	added := false
	for _, sp := range *spans {
		if !open(sp[1]) {
			continue
		}
		k, found := slices.BinarySearchFunc(row.Windows, sp, func(w WindowEntry[A], sp [2]int64) int {
			if w.Start != sp[0] {
				if w.Start < sp[0] {
					return -1
				}
				return 1
			}
			return 0
		})
		if found && row.Windows[k].Closed {
			continue // closed earlier (a retried event)
		}
		if !found {
			row.Windows = slices.Insert(row.Windows, k, WindowEntry[A]{Start: sp[0], End: sp[1]})
		}
		if err := callFold(h.fold, &row.Windows[k].Agg, e); err != nil {
			return false, err
		}
		added = true
	}
	return added, nil
}

func insertWindow[A any](ws []WindowEntry[A], w WindowEntry[A]) []WindowEntry[A] {
	k, _ := slices.BinarySearchFunc(ws, w, func(x, w WindowEntry[A]) int {
		switch {
		case x.Start != w.Start:
			return cmp.Compare(x.Start, w.Start)
		}
		return cmp.Compare(x.End, w.End)
	})
	return slices.Insert(ws, k, w)
}

// FindWindow returns the window of row that starts at start.
func FindWindow[A any](row WindowRow[A], start int64) (WindowEntry[A], bool) {
	for _, w := range row.Windows {
		if w.Start == start {
			return w, true
		}
	}
	return WindowEntry[A]{}, false
}

// runWin is a run's unreduced events (a []E), the record index of each and
// the reduced event each went into, for the window aggregations of the
// run's type.
type runWin struct {
	events any
	idx    []int
	owner  []int
}
