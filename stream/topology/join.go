package topology

import (
	"context"
	"fmt"
	"slices"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// JoinKind says what a join does when the other side has no row.
type JoinKind uint8

const (
	// Inner keeps only what has a row on both sides: a stream-table join
	// skips the event (for this step only), a table-table join has no row
	// for a key that misses one side.
	Inner JoinKind = iota + 1
	// Left keeps every event (or every left row) and hands the join
	// function the zero row and found false when the other side misses.
	Left
)

// String returns "inner" or "left".
func (k JoinKind) String() string {
	switch k {
	case Inner:
		return "inner"
	case Left:
		return "left"
	}
	return fmt.Sprintf("JoinKind(%d)", uint8(k))
}

func (k JoinKind) check(what string) error {
	if k != Inner && k != Left {
		return fmt.Errorf("%s: unknown join kind %d; use topology.Inner or topology.Left", what, uint8(k))
	}
	return nil
}

// Join is the table side of a stream-table join: the table, the function
// that gives an event the key of its row there, and what happens when the
// row is missing. Make one with JoinOn; use it with ProjectJoin and ToJoin.
type Join[E, RK, R any] struct {
	table *Table[RK, R]
	on    func(E) RK
	kind  JoinKind
}

// JoinOn joins the events of a stream with the rows of table: on gives an
// event the key of its row (the event's own key, or another key of its
// partition; for a row elsewhere, re-key the stream with KeyBy first: a
// foreign-key join). kind says what happens when the row is missing.
func JoinOn[E, RK, R any](table *Table[RK, R], on func(E) RK, kind JoinKind) *Join[E, RK, R] {
	return &Join[E, RK, R]{table: table, on: on, kind: kind}
}

// attach checks j for s and declares the lookup; false when it is refused
// (the error is in the topology's).
func attachJoin[K, E, RK, R any](s *Stream[K, E], j *Join[E, RK, R], what string) bool {
	if !s.check(what) {
		return false
	}
	t := s.src.t
	where := fmt.Sprintf("source %q: type tag %d (%s): %s", s.node().name, s.decl.Tag(), s.decl.Name(), what)
	switch {
	case j == nil || j.table == nil:
		t.errs = append(t.errs, fmt.Errorf("%s: a join without a table (use topology.JoinOn)", where))
		return false
	case j.on == nil:
		t.errs = append(t.errs, fmt.Errorf("%s: the join on table %q has a nil key function", where, j.table.Name()))
		return false
	}
	if err := j.kind.check(where); err != nil {
		t.errs = append(t.errs, err)
		return false
	}
	s.Reads(j.table)
	return true
}

// row looks the event's row up.
func (j *Join[E, RK, R]) row(ctx context.Context, e E) (R, bool, error) {
	return Lookup(ctx, j.table, j.on(e))
}

// ProjectJoin folds the events of s, each joined with its row of j's
// table, into table (a stream-table join, Kafka Streams' KStream-KTable
// join followed by an aggregation): fold gets the event, the row and
// whether it was found. With Inner an event without a row is not folded
// (the key's row is still written, as after any run: the zero value if it
// had none); with Left fold gets the zero row and found false. The row is
// what a Lookup sees (docs/design.md §20): the table as its writers
// committed it before the batch, with this event's key's earlier writes.
// Everything else is as ProjectContext. ProjectJoin returns s.
func ProjectJoin[K, E, RK, R, V any](s *Stream[K, E], j *Join[E, RK, R], table *Table[K, V], fold func(v *V, e E, r R, found bool) error) *Stream[K, E] {
	if !attachJoin(s, j, "ProjectJoin") {
		return s
	}
	if fold == nil {
		return project(s, table, nil)
	}
	return ProjectContext(s, table, func(ctx context.Context, v *V, e E) error {
		r, found, err := j.row(ctx, e)
		switch {
		case err != nil:
			return err
		case !found && j.kind == Inner:
			return nil
		}
		return fold(v, e, r, found)
	})
}

// ToJoin publishes what fn derives from each event of s joined with its
// row of j's table (a stream-table join sent on: orders enriched with
// their customer), exactly once, as To does. With Inner fn is not called
// for an event without a row; with Left it gets the zero row and found
// false. ToJoin returns s.
func ToJoin[K, E, RK, R, K2, E2 any](s *Stream[K, E], j *Join[E, RK, R], name, topic string, out *stream.Event[K2, E2],
	fn func(ctx context.Context, key K, e E, r R, found bool, emit func(E2)) error) *Stream[K, E] {
	if !attachJoin(s, j, fmt.Sprintf("ToJoin %q", name)) {
		return s
	}
	if fn == nil {
		return To[K, E, K2, E2](s, name, topic, out, nil)
	}
	return To(s, name, topic, out, func(ctx context.Context, key K, e E, emit func(E2)) error {
		r, found, err := j.row(ctx, e)
		switch {
		case err != nil:
			return err
		case !found && j.kind == Inner:
			return nil
		}
		return fn(ctx, key, e, r, found, emit)
	})
}

// JoinTables adds a table named name kept as the join of left and right
// on their key (a table-table join, Kafka Streams' KTable-KTable join):
// whenever a projection writes a key's row of left or right, the same run
// writes the key's row of the join, join(left row, right row, found), in
// the same commit. With Inner a key has a row only while both sides have
// one; with Left while left has one (found says whether right does). So
// after every commit, for every key, the join table holds exactly the join
// of the two rows (docs/design.md §20). Both sides must be tables of t
// written by projections, co-partitioned (Open checks the partition
// counts); the sources that write them take writer turns. join must not
// keep or change its arguments.
//
// Build refuses a join table written by anything else, used as a side of
// another join, or whose two sides are written by one event type. Rows
// written before the join table existed are not joined: a new table
// changes the topology's fingerprint, so a state directory of the old
// topology is refused.
func JoinTables[K, L, R, V any](t *Topology, name string, left *Table[K, L], right *Table[K, R], kind JoinKind, values stream.Codec[V],
	join func(l L, r R, found bool) V, opts ...TableOption) *Table[K, V] {
	out := NewTable[K, V](t, name, values, opts...)
	where := fmt.Sprintf("JoinTables %q", name)
	switch {
	case left == nil || right == nil:
		t.errs = append(t.errs, fmt.Errorf("%s: a nil side", where))
		return out
	case join == nil:
		t.errs = append(t.errs, fmt.Errorf("%s: nil join function", where))
		return out
	case state.Attacher(left.t) == state.Attacher(right.t):
		t.errs = append(t.errs, fmt.Errorf("%s: joins table %q with itself", where, left.Name()))
		return out
	}
	if err := kind.check(where); err != nil {
		t.errs = append(t.errs, err)
		return out
	}
	lt, rt, vt := left.t, right.t, out.t
	derive := func(tx *state.Txn, p uint32, key []byte, l L, lok bool, r R, rok bool) (func(), error) {
		if !lok || (!rok && kind == Inner) {
			return func() { _ = vt.Delete(tx, p, key) }, nil
		}
		return vt.Stage(tx, p, key, join(l, r, rok))
	}
	t.spec.Hooks = append(t.spec.Hooks,
		executor.HookSpec{Input: lt, Derived: vt, Hook: func(tx *state.Txn, p uint32, key []byte, v any) (func(), error) {
			if v == nil { // the left row was deleted (topology.Delete)
				var l L
				return derive(tx, p, key, l, false, *new(R), false)
			}
			l, err := lt.Clone(v.(L))
			if err != nil {
				return nil, err
			}
			r, rok, err := rt.Peek(tx, p, key)
			if err != nil {
				return nil, err
			}
			return derive(tx, p, key, l, true, r, rok)
		}},
		executor.HookSpec{Input: rt, Derived: vt, Hook: func(tx *state.Txn, p uint32, key []byte, v any) (func(), error) {
			l, lok, err := lt.Peek(tx, p, key)
			if err != nil {
				return nil, err
			}
			if v == nil { // the right row was deleted (topology.Delete)
				var r R
				return derive(tx, p, key, l, lok, r, false)
			}
			r, err := rt.Clone(v.(R))
			if err != nil {
				return nil, err
			}
			return derive(tx, p, key, l, lok, r, true)
		}})
	t.after = append(t.after, func() error {
		ln, rn, vn := t.table(lt), t.table(rt), t.table(vt)
		switch {
		case ln == nil:
			return fmt.Errorf("%s: table %q was not made with topology.NewTable on this topology", where, left.Name())
		case rn == nil:
			return fmt.Errorf("%s: table %q was not made with topology.NewTable on this topology", where, right.Name())
		}
		for _, side := range []*tableNode{ln, rn} {
			if side.ttl > 0 || slices.ContainsFunc(t.timers, func(tm timerNode) bool { return state.Attacher(tm.table) == side.attacher }) {
				return fmt.Errorf("%s: table %q has a TTL or a timer handler: its expiries and timer writes are not carried "+
					"into a join table yet; join tables without WithTTL and OnTimer", where, side.name)
			}
		}
		switch {
		case ln.hasKeys && rn.hasKeys && !stream.SameKeyCodec(ln.keyCodec, rn.keyCodec):
			return fmt.Errorf("%s: table %q encodes keys with %T, table %q with %T; a join needs one key codec",
				where, left.Name(), ln.keyCodec, right.Name(), rn.keyCodec)
		}
		for _, sn := range slices.Concat(ln.sources, rn.sources) {
			if !slices.Contains(vn.sources, sn) {
				vn.sources = append(vn.sources, sn)
			}
		}
		return nil
	})
	return out
}
