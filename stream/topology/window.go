package topology

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// Windows (docs/design.md §18, "Windows"): a window table aggregates the
// events of a keyed stream per key and window of event time.
//
//	hourly := topology.NewWindowTable[AccountID, int64](t, "deposits_hourly",
//		topology.Tumbling(time.Hour), stream.JSON[int64](), topology.WithGrace(5*time.Minute))
//	topology.Aggregate(topology.On(src, Deposits), hourly,
//		topology.EventTimeOf(func(e Deposited) time.Time { return e.At }),
//		func(sum *int64, e Deposited) error { *sum += e.Amount; return nil })
//	topology.EmitFinal(hourly, "bank/hourly", HourlyTotals,
//		func(id AccountID, w topology.Window, sum int64) HourlyTotal { ... })
//
// Each partition of the window table's source has a stream time: the
// highest event time of the table's input records so far, in log order. A
// window [Start, End) takes events until the stream time reaches End plus
// the grace (WithGrace); then it is closed: its result is final, emitted
// once with EmitFinal, and queryable until the stream time passes End plus
// the retention (WithRetention). An event whose windows are all closed at
// its offset is late: counted in stream.Counters.LateEvents or
// dead-lettered (WithLateEvents). With WithIdleness, a partition that gets
// no input record for that long on the App's clock has its stream time
// advanced with the clock, so its windows close without new records.

// Windows is the shape of a window table's windows: Tumbling, Hopping or
// Sessions.
type Windows struct {
	shape executor.WindowShape
}

// Tumbling returns consecutive windows of size: [k·size, (k+1)·size) from
// the Unix epoch. Every event belongs to exactly one.
func Tumbling(size time.Duration) Windows {
	return Windows{executor.WindowShape{Kind: executor.WindowTumbling, Size: size, Advance: size}}
}

// Hopping returns windows of size starting every advance (from the Unix
// epoch): an event belongs to size/advance of them. advance must be more
// than 0 and at most size.
func Hopping(size, advance time.Duration) Windows {
	return Windows{executor.WindowShape{Kind: executor.WindowHopping, Size: size, Advance: advance}}
}

// Sessions returns session windows: per key, events less than gap apart in
// event time share a window [first event, last event + gap); an event that
// bridges two sessions merges them (WithMerge combines their aggregates,
// and a session table needs it).
func Sessions(gap time.Duration) Windows {
	return Windows{executor.WindowShape{Kind: executor.WindowSession, Gap: gap}}
}

// String describes the windows.
func (w Windows) String() string {
	switch w.shape.Kind {
	case executor.WindowTumbling:
		return fmt.Sprintf("tumbling %v", w.shape.Size)
	case executor.WindowHopping:
		return fmt.Sprintf("hopping %v every %v", w.shape.Size, w.shape.Advance)
	case executor.WindowSession:
		return fmt.Sprintf("sessions with gap %v", w.shape.Gap)
	}
	return "no windows"
}

// LatePolicy says what happens to a late event: one whose windows were
// all closed when it came.
type LatePolicy uint8

const (
	// LateCount drops late events from the windows and counts them in
	// stream.Counters.LateEvents (the default).
	LateCount LatePolicy = iota
	// LateDeadLetter sends each late event to the dead-letter topic with an
	// error wrapping ErrLate (and stream.ErrPermanent); the key's other
	// events go on.
	LateDeadLetter
)

// String names the policy.
func (p LatePolicy) String() string {
	switch p {
	case LateCount:
		return "count"
	case LateDeadLetter:
		return "dead-letter"
	}
	return fmt.Sprintf("LatePolicy(%d)", uint8(p))
}

// ErrLate is wrapped by the error a late event is dead-lettered with under
// LateDeadLetter.
var ErrLate = executor.ErrLate

// WindowOption configures a window table (NewWindowTable).
type WindowOption interface {
	apply(*windowOptions)
}

// windowOptionFunc adapts a function to WindowOption.
type windowOptionFunc func(*windowOptions)

func (f windowOptionFunc) apply(c *windowOptions) { f(c) }

type windowOptions struct {
	cfg          executor.WindowConfig
	retentionSet bool
	merge        any
	errs         []error
}

// WithGrace keeps each window open for d of event time after its end, for
// events that come out of order: a window [Start, End) closes when the
// stream time reaches End + d. The default is 0 (a window closes as soon
// as an event at or after its end is seen). d must be 0 or more and at
// most 100 years.
func WithGrace(d time.Duration) WindowOption {
	return windowOptionFunc(func(o *windowOptions) {
		if d < 0 || d > 100*365*24*time.Hour {
			o.errs = append(o.errs, fmt.Errorf("strand: topology.WithGrace: %v, want 0 or more and at most 100 years", d))
			return
		}
		o.cfg.Grace = d
	})
}

// WithRetention keeps each closed window queryable until the stream time
// passes its end + d; then it is removed. d must be at least the grace
// and at most 100 years; the default is 24 hours (or the grace, if
// longer).
func WithRetention(d time.Duration) WindowOption {
	return windowOptionFunc(func(o *windowOptions) {
		if d < 0 || d > 100*365*24*time.Hour {
			o.errs = append(o.errs, fmt.Errorf("strand: topology.WithRetention: %v, want 0 or more and at most 100 years", d))
			return
		}
		o.cfg.Retention, o.retentionSet = d, true
	})
}

// WithIdleness makes time pass on idle partitions: once a partition has
// had no input record of the table for d on the App's clock (WithClock),
// its stream time advances with the clock — at clock time now it is at
// least the stream time at the last input record plus (now − that
// record's arrival − d) — so its windows close and their results are
// emitted without new records. The default, 0, keeps the stream time
// still while no record comes. d must be 0 or more and at most 100 years.
func WithIdleness(d time.Duration) WindowOption {
	return windowOptionFunc(func(o *windowOptions) {
		if d < 0 || d > 100*365*24*time.Hour {
			o.errs = append(o.errs, fmt.Errorf("strand: topology.WithIdleness: %v, want 0 (never) or more and at most 100 years", d))
			return
		}
		o.cfg.Idleness = d
	})
}

// WithLateEvents sets what happens to late events (LateCount, the
// default, or LateDeadLetter).
func WithLateEvents(p LatePolicy) WindowOption {
	return windowOptionFunc(func(o *windowOptions) {
		switch p {
		case LateCount, LateDeadLetter:
			o.cfg.DeadLetterLate = p == LateDeadLetter
		default:
			o.errs = append(o.errs, fmt.Errorf("strand: topology.WithLateEvents: unknown policy %d", p))
		}
	})
}

// WithMerge gives a session table the function that combines the
// aggregates of two sessions an event joins (a holds the earlier events).
// Session tables need it; A must be the table's aggregate type.
func WithMerge[A any](merge func(a, b A) A) WindowOption {
	return windowOptionFunc(func(o *windowOptions) {
		if merge == nil {
			o.errs = append(o.errs, fmt.Errorf("strand: topology.WithMerge: nil function"))
			return
		}
		o.merge = merge
	})
}

// WindowTable holds the windows of a window table: per key, its windows'
// aggregates. Make one with NewWindowTable and feed it with Aggregate.
// Reads see the last durable commit, like Table.Get.
type WindowTable[K, A any] struct {
	t    *state.Table[K, executor.WindowRow[A]]
	core *executor.WindowCore[K, A]
	topo *Topology
}

// Window is the bounds of one window: [Start, End).
type Window struct {
	Start, End time.Time
}

// WindowResult is one window of a key: its bounds, its aggregate, and
// whether it is final (closed: no event will change it).
type WindowResult[A any] struct {
	Window
	Value A
	Final bool
}

// NewWindowTable makes a window table of t: aggregates of type A per key
// and window, stored with values. Build refuses windows that cannot work
// (a size, advance or gap of 0), a retention shorter than the grace, a
// session table without WithMerge, a table fed by no Aggregate or by
// several sources.
func NewWindowTable[K, A any](t *Topology, name string, windows Windows, values stream.Codec[A], opts ...WindowOption) *WindowTable[K, A] {
	o := windowOptions{}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	o.cfg.Shape = windows.shape
	if !o.retentionSet {
		o.cfg.Retention = max(24*time.Hour, o.cfg.Grace)
	}
	var merge func(a, b A) A
	if o.merge != nil {
		m, ok := o.merge.(func(a, b A) A)
		if !ok {
			o.errs = append(o.errs, fmt.Errorf("window table %q: WithMerge's function %T does not merge %s", name, o.merge, reflect.TypeFor[A]()))
		}
		merge = m
	}
	if err := windows.shape.Check(); err != nil {
		o.errs = append(o.errs, fmt.Errorf("window table %q: %w", name, err))
	}
	if windows.shape.Kind == executor.WindowSession && merge == nil && o.merge == nil {
		o.errs = append(o.errs, fmt.Errorf("window table %q: session windows need topology.WithMerge", name))
	}
	if o.cfg.Retention < o.cfg.Grace {
		o.errs = append(o.errs, fmt.Errorf("window table %q: retention %v is shorter than the grace %v", name, o.cfg.Retention, o.cfg.Grace))
	}
	tn := tableNode{name: name, typ: fmt.Sprintf("%s→window(%s)", reflect.TypeFor[K](), reflect.TypeFor[A]()), hasValues: values != nil}
	keys, err := stream.DefaultKeyCodec[K]()
	if err != nil {
		tn.keyErr = fmt.Errorf("window table %q: %w", name, err)
	}
	tn.keyCodec, tn.hasKeys = keys, keys != nil
	var kc state.Codec[K]
	if keys != nil {
		kc = keys
	}
	var vc state.Codec[A]
	if values != nil {
		vc = values
	}
	tab := state.NewTable[K, executor.WindowRow[A]](name, kc, executor.WindowRowCodec(vc))
	tn.attacher, tn.partitioner = tab, tab
	tn.optErrs = o.errs
	t.tables = append(t.tables, tn)
	w := &WindowTable[K, A]{t: tab, topo: t, core: executor.NewWindowCore(tab, keys, o.cfg, merge)}
	t.windows = append(t.windows, windowNode{table: tab, core: w.core})
	return w
}

// windowNode is a window table of a topology; source is set by its first
// Aggregate.
type windowNode struct {
	table  state.Attacher
	core   interface{ Config() executor.WindowConfig }
	source string
	spec   func(source string) executor.WindowSpec
}

// Name returns the table's name.
func (w *WindowTable[K, A]) Name() string { return w.t.Name() }

// Windows returns the table's window shape.
func (w *WindowTable[K, A]) Windows() Windows { return Windows{w.core.Config().Shape} }

func resultOf[A any](e executor.WindowEntry[A]) WindowResult[A] {
	return WindowResult[A]{Window: Window{Start: time.Unix(0, e.Start), End: time.Unix(0, e.End)}, Value: e.Agg, Final: e.Closed}
}

// Get returns the window of key that starts at start, and false when the
// key has no such window (none of its events fell in it, or it was removed
// after its retention).
func (w *WindowTable[K, A]) Get(ctx context.Context, key K, start time.Time) (WindowResult[A], bool, error) {
	row, ok, err := w.t.Get(ctx, key)
	if err != nil || !ok {
		return WindowResult[A]{}, false, wrapNotOpen(err)
	}
	e, ok := executor.FindWindow(row, start.UnixNano())
	if !ok {
		return WindowResult[A]{}, false, nil
	}
	return resultOf(e), true, nil
}

// Range returns the windows of key that start in [from, to), in start
// order; a zero from or to leaves that side open.
func (w *WindowTable[K, A]) Range(ctx context.Context, key K, from, to time.Time) ([]WindowResult[A], error) {
	row, ok, err := w.t.Get(ctx, key)
	if err != nil || !ok {
		return nil, wrapNotOpen(err)
	}
	var out []WindowResult[A]
	f, e := from.UnixNano(), to.UnixNano()
	if from.IsZero() {
		f = math.MinInt64
	}
	if to.IsZero() {
		e = math.MaxInt64
	}
	for _, x := range row.Windows {
		if x.Start >= f && x.Start < e {
			out = append(out, resultOf(x))
		}
	}
	return out, nil
}

// Scan calls fn with every key's windows (start order), partition by
// partition, until fn returns false; it reads one durable state like
// Table.Scan.
func (w *WindowTable[K, A]) Scan(ctx context.Context, fn func(key K, windows []WindowResult[A]) bool) error {
	return wrapNotOpen(w.t.Scan(ctx, func(k K, row executor.WindowRow[A]) bool {
		rs := make([]WindowResult[A], len(row.Windows))
		for i, x := range row.Windows {
			rs[i] = resultOf(x)
		}
		return fn(k, rs)
	}))
}

// EventTime says where an aggregation takes its events' time from:
// EventTimeOf (a field of the event) or MessageTime (the broker's
// timestamp).
type EventTime[E any] struct {
	fn  func(E) time.Time
	set bool
}

// EventTimeOf takes the event time from the event itself.
func EventTimeOf[E any](fn func(E) time.Time) EventTime[E] {
	return EventTime[E]{fn: fn, set: fn != nil}
}

// MessageTime takes the event time from the record's timestamp (the
// broker's append time).
func MessageTime[E any]() EventTime[E] { return EventTime[E]{set: true} }

// Aggregate folds the events of s into the windows of w they belong to:
// fold adds one event to one window's aggregate (the zero value for a new
// window). It runs like a projection's fold (exactly once, in each key's
// order; an error fails the event and follows the failure policy) and is
// called once per window the event belongs to. Every Aggregate into one
// window table must read the same source. Build refuses a nil fold or an
// EventTime made neither by EventTimeOf nor by MessageTime.
func Aggregate[K, E, A any](s *Stream[K, E], w *WindowTable[K, A], at EventTime[E], fold func(acc *A, e E) error) *Stream[K, E] {
	if !s.check("window aggregation") {
		return s
	}
	t := s.src.t
	n := s.node()
	switch {
	case w == nil:
		t.errs = append(t.errs, fmt.Errorf("source %q: Aggregate without a window table", n.name))
		return s
	case fold == nil:
		t.errs = append(t.errs, fmt.Errorf("source %q: Aggregate into %q has a nil fold function", n.name, w.Name()))
		return s
	case !at.set:
		t.errs = append(t.errs, fmt.Errorf("source %q: Aggregate into %q has no event time (topology.EventTimeOf or topology.MessageTime)", n.name, w.Name()))
		return s
	case w.topo != t:
		t.errs = append(t.errs, fmt.Errorf("source %q: window table %q was not made on this topology", n.name, w.Name()))
		return s
	}
	for i := range t.windows {
		wn := &t.windows[i]
		if wn.table != state.Attacher(w.t) {
			continue
		}
		if wn.source == "" {
			wn.source = n.name
			core := w.core
			wn.spec = func(source string) executor.WindowSpec { return executor.WindowSpec{Core: core, Source: source} }
		} else if wn.source != n.name {
			t.errs = append(t.errs, fmt.Errorf("window table %q: aggregated from sources %q and %q; a window table has one source", w.Name(), wn.source, n.name))
			return s
		}
	}
	return project(s, &Table[K, executor.WindowRow[A]]{t: w.t}, executor.Aggregate(s.decl, w.core, at.fn, fold))
}

// EmitFinal publishes each window's final result once, when the window
// closes: fn's event, encoded by out, goes to topic exactly once, like
// To's (docs/design.md §11): written to the outbox in the commit that
// closes the window and published after it. A result that fn panics on,
// or that does not encode, is dead-lettered instead, in the same commit
// (deadletter.ReasonWindowFinal: Letter.Window gives the window and its
// aggregate), logged and counted in stream.Counters.TimerFailures; it is
// not retried. A window table has at most one EmitFinal.
func EmitFinal[K, A, K2, E2 any](w *WindowTable[K, A], topic string, out *stream.Event[K2, E2], fn func(key K, win Window, agg A) E2) {
	if w == nil {
		return
	}
	t := w.topo
	switch {
	case fn == nil:
		t.errs = append(t.errs, fmt.Errorf("window table %q: EmitFinal %q has a nil function", w.Name(), topic))
		return
	case out == nil:
		t.errs = append(t.errs, fmt.Errorf("window table %q: EmitFinal %q has a nil output declaration", w.Name(), topic))
		return
	case out.Err() != nil:
		t.errs = append(t.errs, fmt.Errorf("window table %q: EmitFinal %q: output declaration: %w", w.Name(), topic, out.Err()))
		return
	case topic == "":
		t.errs = append(t.errs, fmt.Errorf("window table %q: EmitFinal has no topic", w.Name()))
		return
	}
	w.core.SetFinal(topic, func(key K, start, end time.Time, agg A) (stream.Envelope, error) {
		env, err := out.Envelope(fn(key, Window{Start: start, End: end}, agg))
		if err != nil {
			return env, fmt.Errorf("EmitFinal %q: encode %s: %w", topic, out.Name(), err)
		}
		return env, nil
	})
	tab := w.t
	t.after = append(t.after, func() error {
		for _, wn := range t.windows {
			if wn.table != state.Attacher(tab) || wn.source == "" {
				continue
			}
			for i := range t.sources {
				if n := &t.sources[i]; n.name == wn.source && !slices.Contains(n.outputs, topic) {
					n.outputs = append(n.outputs, topic)
				}
			}
		}
		return nil
	})
}

// windowSpecs returns the window tables of the topology for its engine
// Spec, and the problems found.
func (t *Topology) windowSpecs() (specs []executor.WindowSpec, errs []error) {
	for _, wn := range t.windows {
		if wn.spec == nil {
			errs = append(errs, fmt.Errorf("window table %q: no Aggregate feeds it", tableName(wn.table)))
			continue
		}
		specs = append(specs, wn.spec(wn.source))
	}
	return specs, errs
}

func tableName(a state.Attacher) string {
	if n, ok := a.(interface{ Name() string }); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", a)
}
