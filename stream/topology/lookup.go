package topology

import (
	"context"
	"fmt"
	"slices"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
)

// Readable is a table a stream's functions may read with Lookup: a *Table
// of the topology. Only this package implements it.
type Readable interface {
	Name() string
	attacher() state.Attacher
}

func (t *Table[K, V]) attacher() state.Attacher { return t.t }

// Errors a Lookup returns for a misuse; each also wraps stream.Permanent,
// so the event is dead-lettered with it rather than retried.
var (
	// ErrLookupContext: Lookup was given a context that is not the one a
	// fold (ProjectContext), ForEach, To or KeyByContext function got.
	ErrLookupContext = executor.ErrLookupContext
	// ErrLookupUndeclared: the stream did not declare the table with
	// Reads.
	ErrLookupUndeclared = executor.ErrLookupUndeclared
	// ErrLookupKey: the key may not be read from here: it is in another
	// partition, or the table is written by the reader's own input and the
	// key is not the event's own key.
	ErrLookupKey = executor.ErrLookupKey
)

// Reads declares that the functions attached to s (its projections written
// with ProjectContext, ForEach, To and KeyByContext functions) read tables
// with Lookup. Build refuses what it cannot make exact (docs/design.md
// §20):
//
//   - a table no projection of the topology writes;
//   - a table the stream's own event type projects into (the fold has the
//     row in its value already);
//   - a table another event type of the stream's own input writes, when
//     both types may be Relaxed: their events of one key may be reordered,
//     so what the lookup saw would depend on the batching. Give one of them
//     a fence, or feed the table from another input.
//
// A table written by another input (another Source, ForeignSource, or a
// KeyBy's repartition topic) can be read at any key of the event's
// partition; a table written by the stream's own input, at the event's own
// key only. Every input that reads or writes a table has the same
// partition count (Open refuses otherwise) and takes writer turns with the
// table's writers (docs/design.md §2). Reads returns s for chaining.
func (s *Stream[K, E]) Reads(tables ...Readable) *Stream[K, E] {
	s.core().reads(tables)
	return s
}

// Lookup returns the row of key in table as the function that got ctx
// sees it, and false when key has no row: table as committed before the
// batch's writer turn, with what the event's earlier runs in the batch
// wrote to it (docs/design.md §20). ctx must be the context a fold
// (ProjectContext), a ForEach, To or KeyByContext function was given, on
// a stream that declared table with Reads.
//
// A misuse fails the event for good (the error wraps stream.Permanent, so
// it is dead-lettered, and one of ErrLookupContext, ErrLookupUndeclared or
// ErrLookupKey): a table not declared, a key of another partition, or a
// key other than the event's own in a table written by the event's own
// input. A value with pointers, maps or slices is a copy the caller may
// keep and change.
func Lookup[K, V any](ctx context.Context, table *Table[K, V], key K) (V, bool, error) {
	if table == nil {
		var zero V
		return zero, false, fmt.Errorf("strand: topology.Lookup: nil table")
	}
	return executor.Lookup(ctx, table.t, key)
}

// KeyByContext is KeyBy with a key function that is given the run's
// context, so that it can read tables with Lookup (declared with Reads on
// s): a parcel re-keyed by the depot its address row names, for example.
// The re-keyed stream takes each record's key from its headers (what the
// step computed when it forwarded it), since the key cannot be computed
// again from the event alone.
func KeyByContext[K, E, K2 any](s *Stream[K, E], name string, key func(ctx context.Context, e E) (K2, error), opts ...KeyByOption) *Stream[K2, E] {
	return keyBy(s, name, nil, key, opts)
}

// feedsItself reports whether the topology publishes to source itself: a
// KeyBy's repartition topic, or a topic a To step publishes to that the
// topology also reads (a ToJoin's enriched events read back).
func (p *Program) feedsItself(source string) bool {
	if _, ok := p.feeders[source]; ok {
		return true
	}
	return slices.Contains(p.Outputs(), source)
}

// runsOf reports whether the App processes partition pt of source: every
// partition of a global source, else as runs says.
func (a *App) runsOf(source string, pt uint32) bool {
	return a.prog.global[source] || a.runs(pt)
}

// Global makes the source global (Kafka Streams' GlobalKTable, Goka's
// lookup tables): every instance of the topology reads all of its
// partitions, whatever topology.WithPartitions or its group (WithGroup)
// gives it, into tables of its own store, and any function of the topology
// may look those tables up (Lookup, declared with Reads) at any key,
// whatever its partition.
//
// Freshness (docs/design.md §20): the folds of the other sources start (at
// Run, and in a group whenever the instance's partitions are assigned or
// move) only once the global tables caught up to the ends of their topics
// observed then, so a row published before is always seen. Afterwards a
// lookup of a global table reads the table as last committed when the
// lookup runs (not as of the batch: the global source's pipelines commit
// beside the reader's), so it may be behind the global topic by what its
// pipelines have not committed yet (their lag, in Stats), never by more,
// and never goes back. Nothing orders a global source's records with
// another input's: a fold that needs a row that may not have arrived yet
// fails and is retried (WithRetry).
//
// Restart: the global source's checkpoints and rows commit like any
// source's (in a group, in a store of their own, GlobalStoreDir, that the
// changelog and ownership moves leave alone), so a restart resumes from
// them without replay.
//
// Build refuses, on a global source, anything but projections into tables
// that only global sources feed (a ForEach, To or KeyBy would happen once
// per instance), lookups, and joins of global tables; Open refuses a group
// whose sources are all global. Global returns s.
func (s *SourceNode[K]) Global() *SourceNode[K] {
	s.t.sources[s.idx].global = true
	return s
}
