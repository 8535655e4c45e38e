package metamorphic

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/topology"
)

// JoinKind is how a node that reads a table (Case.lookups) reads it.
type JoinKind uint8

// The ways a node reads its table.
const (
	// ReadLookup: its folds call topology.Lookup (ProjectContext).
	ReadLookup JoinKind = iota
	// ReadLeft: its folds are a left stream-table join (ProjectJoin, Left):
	// called for every event, with found false when the row is missing.
	ReadLeft
	// ReadInner: an inner stream-table join (ProjectJoin, Inner): an event
	// without a row is not folded, the key's row is still written.
	ReadInner
)

// String names the kind.
func (k JoinKind) String() string { return nameOf(int(k), "lookup", "left-join", "inner-join") }

// readKinds returns how each lookup node reads its table (Knobs.StreamJoins;
// without it every one is a lookup). Derived from the case, not drawn: by
// the node's id, except that an inner join is never given to a node one of
// whose events fails for good (the model dead-letters the event before its
// folds, and an inner join that finds no row would not call the fold).
func (c *Case) readKinds() map[int]JoinKind {
	looks := c.lookups()
	if len(looks) == 0 {
		return nil
	}
	out := map[int]JoinKind{}
	for id := range looks {
		k := ReadLookup
		if c.Knobs.StreamJoins {
			k = JoinKind((id / 2) % 3)
		}
		if k == ReadInner {
			for _, f := range c.Fail {
				if f.Node == id && (f.Permanent || f.Always) {
					k = ReadLeft
				}
			}
		}
		out[id] = k
	}
	return out
}

// lookDigest is what a node records of the row its read found: its digest,
// or -1 for a left join that found none.
func lookDigest(kind JoinKind, r Row, found bool) int64 {
	if kind == ReadLeft && !found {
		return -1
	}
	return digest(r)
}

// deleters returns, per node, the side table of a table-table join whose
// row its folds delete on every event whose id is a multiple of 4
// (topology.Delete), instead of folding it (Knobs.Joins). Derived from the
// case: a node deletes from a join side only when it is a depth-0 node of
// a strand source, with context folds, of a type with a static fence other
// than Relaxed, and every writer of the side is a depth-0 node of the same
// input: a delete does not commute with other folds, and the fence keeps it
// in log order with every event of its key of that input (guarantee 3),
// which is the order the model folds in. A node that reads a table with a
// stream-table join (Case.readKinds) does not delete.
func (c *Case) deleters() map[int]int {
	js := c.joins()
	if len(js) == 0 {
		return nil
	}
	writers := map[int][]NodeDesc{}
	for _, n := range c.Nodes {
		for _, t := range n.Tables {
			writers[t] = append(writers[t], n)
		}
	}
	isJoin := map[int]bool{}
	for id, k := range c.readKinds() {
		isJoin[id] = k != ReadLookup
	}
	out := map[int]int{}
	for _, j := range js {
	sides:
		for _, t := range []int{j.Left, j.Right} {
			for _, n := range writers[t] {
				td := c.Inputs[n.Input].Types[n.Type]
				if n.Depth != 0 || !n.CtxFolds || isJoin[n.ID] || c.Inputs[n.Input].Foreign ||
					td.Kind != KindFence || td.Fence == planner.Relaxed {
					continue
				}
				for _, w := range writers[t] {
					if w.Depth != 0 || w.Input != n.Input {
						continue sides
					}
				}
				out[n.ID] = t
				continue sides
			}
		}
	}
	return out
}

// deletes reports whether event e deletes the row of a deleting node.
func deletes(e Ev) bool { return e.ID%4 == 0 }

// projectRead adds node n's projection h into table t, reading table lt as
// kind says, and deleting rows when del says so.
// xt >= 0 is a table of other inputs it reads too (Case.crossReads).
func (b *Built) projectRead(s *topology.Stream[string, Ev], n NodeDesc, h, t int, td TypeDesc, lt int, kind JoinKind, looks, del bool, xt int) {
	fold := b.fold(n, h, td)
	guard := func(ctx context.Context) error {
		if ctx.Err() != nil {
			// The harness never stops an App mid-batch for good: a fold
			// must not see its context done.
			return fmt.Errorf("metamorphic: fold of node %d ran with a done context: %w", n.ID, ctx.Err())
		}
		return nil
	}
	remove := func(ctx context.Context, e Ev) error {
		if mode, err := b.check(n.ID, h, e.ids()); err != nil {
			if mode == FailPanic {
				panic(err)
			}
			return err
		}
		return topology.Delete(ctx)
	}
	if looks && kind != ReadLookup {
		jk := topology.Left
		if kind == ReadInner {
			jk = topology.Inner
		}
		j := topology.JoinOn(b.Tables[lt], func(e Ev) string { return e.K }, jk)
		topology.ProjectJoin(s, j, b.Tables[t], func(r *Row, e Ev, seen Row, found bool) error {
			r.look(e.ID, lookDigest(kind, seen, found))
			return fold(r, e)
		})
		return
	}
	topology.ProjectContext(s, b.Tables[t], func(ctx context.Context, r *Row, e Ev) error {
		if err := guard(ctx); err != nil {
			return err
		}
		if looks {
			seen, _, err := topology.Lookup(ctx, b.Tables[lt], e.K)
			if err != nil {
				return err
			}
			r.look(e.ID, digest(seen))
		}
		if xt >= 0 {
			seen, _, err := topology.Lookup(ctx, b.Tables[xt], e.K)
			if err != nil {
				return err
			}
			r.xlook(e.ID, digest(seen))
		}
		if del && deletes(e) {
			return remove(ctx, e)
		}
		return fold(r, e)
	})
}
