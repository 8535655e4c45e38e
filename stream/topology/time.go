package topology

import (
	"context"
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// Time in read models (docs/design.md §17): deletes, a table's time to
// live, and timers.
//
// Everything a fold asks of its row beyond its new value goes through the
// context it is given, so a fold that deletes or schedules is written with
// ProjectContext (or is a timer handler, OnTimer): Delete removes the row,
// Schedule and CancelTimer set the key's timer. What a fold asks is
// applied with its write, in the same commit as the checkpoint, and not at
// all when its run fails; calling them with any other context returns an
// error wrapping ErrNoFold.

// ErrNoFold is wrapped by the error of Delete, Schedule and CancelTimer
// when ctx is not the context of a running ProjectContext fold or timer
// handler.
var ErrNoFold = executor.ErrNoFold

// ErrNoTimers is wrapped by Schedule's error when the table folded has no
// timer handler (OnTimer).
var ErrNoTimers = executor.ErrNoTimers

// Delete removes the row the fold is folding, once the current event is
// folded: it is a deletion in the commit (Table.Get answers not found, the
// query server 404), carried by the changelog, snapshots and restores like
// any write. The next event of the same run, if any, folds into the zero
// value, and the row exists again only if a later event of the run does
// not delete it. Delete also cancels the key's timer, unless the fold
// schedules one afterwards. ctx must be the context the fold was called
// with (ProjectContext, OnTimer).
//
//	topology.ProjectContext(topology.On(src, Delivered), parcels,
//		func(ctx context.Context, p *Parcel, e ParcelDelivered) error {
//			return topology.Delete(ctx)
//		})
func Delete(ctx context.Context) error { return executor.DeleteRow(ctx) }

// Schedule sets the timer of the key being folded to fire at at, replacing
// the timer the key had in this table: when the App's clock (WithClock)
// reaches at, the table's timer handler (OnTimer) runs for the key, in
// order with the key's events (after every event committed before, before
// the events of the batch it fires in), exactly once. A time already past
// fires with the next batch or retry of the partition. ctx must be the
// context of a running ProjectContext fold or timer handler of a table
// that has a timer handler; otherwise the error wraps ErrNoFold or
// ErrNoTimers. A fold that returns Schedule's error fails its event like
// any other error.
func Schedule(ctx context.Context, at time.Time) error { return executor.ScheduleTimer(ctx, at) }

// CancelTimer cancels the timer of the key being folded, if it has one.
func CancelTimer(ctx context.Context) error { return executor.CancelTimer(ctx) }

// WithTTL gives the table a time to live: a row that no projection (or
// timer handler) has written for d, on the App's clock (WithClock), is
// removed, in a commit of its partition, exactly once, and counted in
// stream.Counters.Expired. Rows are removed at the first batch or retry of
// their partition after they expire: a Get between the expiry and that
// commit still finds the row. It costs two small rows per written key and
// commit (an index ordered by expiry) and, when nothing expires, one time
// comparison per batch. d must be more than 0 and at most 100 years;
// otherwise Build refuses it. The table must be written by a projection.
func WithTTL(d time.Duration) TableOption {
	return tableOptionFunc(func(o *tableOptions) {
		if d <= 0 || d > 100*365*24*time.Hour {
			o.errs = append(o.errs, fmt.Errorf("strand: topology.WithTTL: %v, want more than 0 and at most 100 years", d))
			return
		}
		o.ttl = d
	})
}

// OnTimer sets the timer handler of table, run on the partitions of src:
// fn runs when a timer set for a key with Schedule is due, with the key's
// value in the table (the zero value when it has no row), and its changes
// to *v are written like a fold's. Through ctx it may Delete the row or
// Schedule the key's timer again. It runs like an event at that point of
// the key's history: after every event of the key committed before, before
// the events of the batch it fires in, never ahead of a parked event of
// the key (it waits until the key goes on). Its writes and the timer's
// removal commit together with the batch, so each timer fires exactly
// once across crashes, restarts and ownership moves (timers are rows of
// the partition: the changelog and snapshots carry them).
//
// An error or a panic of fn undoes its writes and follows the failure
// policy of an event (docs/design.md §18): the timer is kept and tried
// again with the topology's retry policy (WithRetry), its key's later
// events waiting behind it; on a stream.Permanent error or its last try it
// is dead-lettered (deadletter.ReasonTimer: a dead letter describing its
// table, key, due time and error, exactly once) and the key goes on, or,
// under stream.BlockPoisonedKey, it blocks its key with the timer kept
// until App.Unblock. Each failed try is logged and counted in
// stream.Counters.TimerFailures.
// A table has at most one timer handler; src must be one of the sources
// whose events are projected into table (or its partition count must be
// theirs). Build refuses a nil function or a table not made on this
// topology.
func OnTimer[K, V any](src *SourceNode[K], table *Table[K, V], fn func(ctx context.Context, key K, v *V, at time.Time) error) {
	if fn == nil {
		src.t.errs = append(src.t.errs, fmt.Errorf("source %q: OnTimer has a nil function", src.Name()))
		return
	}
	onTimer(src, table, "", func(tab *state.Table[K, V], kc stream.Codec[K]) executor.TimerHandler {
		return executor.OnTimer(tab, kc, fn)
	})
}

// OnTimerTo is OnTimer for a timer handler that also publishes: the
// events fn passes to emit are encoded by out and published to topic
// exactly once, like To's (docs/design.md §11): written to the outbox in
// the commit that fires the timer, ahead of what the batch's records
// emit, and never for a handler that fails. An event that does not
// encode fails the handler.
//
//	topology.OnTimerTo(src, parcels, "parcels/alerts", Alerts,
//		func(ctx context.Context, id ParcelID, p *Parcel, at time.Time, emit func(StuckAlert)) error {
//			emit(StuckAlert{Parcel: id, Since: p.Seen})
//			return nil
//		})
func OnTimerTo[K, V, K2, E2 any](src *SourceNode[K], table *Table[K, V], topic string, out *stream.Event[K2, E2],
	fn func(ctx context.Context, key K, v *V, at time.Time, emit func(E2)) error) {
	t := src.t
	switch {
	case fn == nil:
		t.errs = append(t.errs, fmt.Errorf("source %q: OnTimerTo %q has a nil function", src.Name(), topic))
		return
	case out == nil:
		t.errs = append(t.errs, fmt.Errorf("source %q: OnTimerTo %q has a nil output declaration", src.Name(), topic))
		return
	case out.Err() != nil:
		t.errs = append(t.errs, fmt.Errorf("source %q: OnTimerTo %q: output declaration: %w", src.Name(), topic, out.Err()))
		return
	case topic == "":
		t.errs = append(t.errs, fmt.Errorf("source %q: OnTimerTo has no topic", src.Name()))
		return
	}
	n := &t.sources[src.idx]
	if !containsString(n.outputs, topic) {
		n.outputs = append(n.outputs, topic)
	}
	onTimer(src, table, topic, func(tab *state.Table[K, V], kc stream.Codec[K]) executor.TimerHandler {
		return executor.OnTimerTo(tab, kc, topic, func(ctx context.Context, key K, v *V, at time.Time, emit func(stream.Envelope)) error {
			var encErr error
			err := fn(ctx, key, v, at, func(e E2) {
				if encErr != nil {
					return
				}
				env, err := out.Envelope(e)
				if err != nil {
					encErr = fmt.Errorf("OnTimerTo %q: encode %s: %w", topic, out.Name(), err)
					return
				}
				emit(env)
			})
			if err == nil {
				err = encErr
			}
			return err
		})
	})
}

func onTimer[K, V any](src *SourceNode[K], table *Table[K, V], dest string, build func(*state.Table[K, V], stream.Codec[K]) executor.TimerHandler) {
	t := src.t
	if table == nil {
		t.errs = append(t.errs, fmt.Errorf("source %q: OnTimer without a table", src.Name()))
		return
	}
	tn := t.table(table.t)
	if tn == nil {
		t.errs = append(t.errs, fmt.Errorf("source %q: OnTimer: table %q was not made with topology.NewTable on this topology", src.Name(), table.Name()))
		return
	}
	srcName := src.Name()
	t.timers = append(t.timers, timerNode{table: table.t, source: srcName, dest: dest, build: func() (executor.TimerHandler, error) {
		tn := t.table(table.t)
		if tn.keyErr != nil || !tn.hasKeys {
			return nil, fmt.Errorf("OnTimer of table %q: the table has no key codec", table.Name())
		}
		kc, ok := tn.keyCodec.(stream.Codec[K])
		if !ok {
			return nil, fmt.Errorf("OnTimer of table %q: key codec %T does not encode %T", table.Name(), tn.keyCodec, *new(K))
		}
		return build(table.t, kc), nil
	}})
	if !containsString(tn.sources, srcName) {
		tn.sources = append(tn.sources, srcName)
	}
}

type timerNode struct {
	table  state.Attacher
	source string
	dest   string // OnTimerTo's topic
	build  func() (executor.TimerHandler, error)
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// timeSpecs returns the TTLs and timer handlers of the topology's tables
// for its engine Spec, and the problems found.
func (t *Topology) timeSpecs() (ttls []executor.TTLSpec, timers []executor.TimerSpec, errs []error) {
	for _, tn := range t.tables {
		errs = append(errs, tn.optErrs...)
		if tn.ttl <= 0 {
			continue
		}
		if len(tn.sources) == 0 {
			errs = append(errs, fmt.Errorf("table %q: WithTTL on a table no projection writes", tn.name))
			continue
		}
		ttls = append(ttls, executor.TTLSpec{Table: tn.attacher, TTL: tn.ttl, Source: tn.sources[0], Delete: tn.del})
	}
	for _, tm := range t.timers {
		h, err := tm.build()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		timers = append(timers, executor.TimerSpec{Table: tm.table, Source: tm.source, Handler: h, Dest: tm.dest})
	}
	return ttls, timers, errs
}
