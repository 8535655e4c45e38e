package metamorphic

import (
	"context"
	"fmt"
	"slices"

	"github.com/strand-io/strand/planner"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// JoinDesc is a table-table join of the case (topology.JoinTables): the
// join of tables Left and Right on their key, Inner or Left.
type JoinDesc struct {
	Name        string
	Left, Right int
	Inner       bool
}

// JoinRow is a row of a join table: the two sides' rows, and whether the
// right one was there.
type JoinRow struct {
	L     Row  `json:"l"`
	R     Row  `json:"r"`
	Found bool `json:"found"`
}

func joinRows(l, r Row, found bool) JoinRow { return JoinRow{L: l, R: r, Found: found} }

// joins returns the case's table-table joins. They are derived from the
// case, not drawn (seeds keep their cases, and a shrunk case keeps a valid
// join): with Knobs.Joins, tables t0 and t1 are joined when both are
// projected into and no node projects into both (Build refuses that: one
// run would fold one side before the other saw it); Inner for even seeds,
// Left for odd ones.
func (c *Case) joins() []JoinDesc {
	if !c.Knobs.Joins || len(c.Tables) < 2 {
		return nil
	}
	fed := [2]bool{}
	for _, n := range c.Nodes {
		if c.Inputs[n.Input].Global && slices.ContainsFunc(n.Tables, func(t int) bool { return t < 2 }) {
			return nil // joins of global tables are refused
		}
		has := [2]bool{}
		for _, t := range n.Tables {
			if t < 2 {
				has[t], fed[t] = true, true
			}
		}
		if has[0] && has[1] {
			return nil
		}
	}
	if !fed[0] || !fed[1] {
		return nil
	}
	return []JoinDesc{{Name: "join-t0-t1", Left: 0, Right: 1, Inner: c.Seed%2 == 0}}
}

// buildJoins adds the case's joins to the topology.
func (b *Built) buildJoins() {
	for _, j := range b.c.joins() {
		kind := topology.Left
		if j.Inner {
			kind = topology.Inner
		}
		b.Joins = append(b.Joins, topology.JoinTables(b.Topo, j.Name, b.Tables[j.Left], b.Tables[j.Right], kind,
			stream.JSON[JoinRow](), joinRows))
	}
}

// expectJoins is the model of the joins: each key's row is the join of the
// model's rows of the two sides.
func expectJoins(c *Case, x *Expected) {
	for _, j := range c.joins() {
		rows := map[string]JoinRow{}
		for k, l := range x.Tables[j.Left] {
			r, ok := x.Tables[j.Right][k]
			if !ok && j.Inner {
				continue
			}
			rows[k] = joinRows(l, r, ok)
		}
		x.Joins = append(x.Joins, rows)
	}
}

// observeJoins scans the join tables.
func observeJoins(b *Built, o *Observed) error {
	for _, t := range b.Joins {
		rows := map[string]JoinRow{}
		if err := t.Scan(context.Background(), func(k string, v JoinRow) bool { rows[k] = v; return true }); err != nil {
			return fmt.Errorf("scanning join table %s: %w", t.Name(), err)
		}
		o.Joins = append(o.Joins, rows)
	}
	return nil
}

func compareJoins(c *Case, x *Expected, o *Observed) error {
	js := c.joins()
	for i, want := range x.Joins {
		got := o.Joins[i]
		for _, k := range sortedKeys(got, want) {
			g, gok := got[k]
			w, wok := want[k]
			switch {
			case !wok:
				return diff("join table %s key %q: a row (found=%v), want none", js[i].Name, k, g.Found)
			case !gok:
				return diff("join table %s key %q: no row, want one (found=%v)", js[i].Name, k, w.Found)
			case g.Found != w.Found:
				return diff("join table %s key %q: found=%v, want %v", js[i].Name, k, g.Found, w.Found)
			case !equalRows(g.L, w.L):
				return diff("join table %s key %q: left %s", js[i].Name, k, diffRows(g.L, w.L))
			case !equalRows(g.R, w.R):
				return diff("join table %s key %q: right %s", js[i].Name, k, diffRows(g.R, w.R))
			}
		}
	}
	return nil
}

// lookups returns, per node, the table its folds read with topology.Lookup
// (Knobs.Lookups). Derived from the case, not drawn: a node at depth 0 of a
// strand source whose type has a static fence other than Relaxed and whose
// folds get a context reads the first table it does not project into that
// only other types of its own input write (depth 0). What it sees is then
// what the sequential fold of its input has at the event (docs/design.md
// §20), which the model computes.
func (c *Case) lookups() map[int]int {
	if !c.Knobs.Lookups {
		return nil
	}
	writers := map[int][]NodeDesc{}
	for _, n := range c.Nodes {
		for _, t := range n.Tables {
			writers[t] = append(writers[t], n)
		}
	}
	out := map[int]int{}
	for _, n := range c.Nodes {
		td := c.Inputs[n.Input].Types[n.Type]
		if n.Depth != 0 || !n.CtxFolds || len(n.Tables) == 0 || c.Inputs[n.Input].Foreign ||
			td.Kind != KindFence || td.Fence == planner.Relaxed {
			continue
		}
	tables:
		for t := range c.Tables {
			if slices.Contains(n.Tables, t) || len(writers[t]) == 0 {
				continue
			}
			for _, w := range writers[t] {
				if w.Depth != 0 || w.Input != n.Input || w.Type == n.Type {
					continue tables
				}
			}
			out[n.ID] = t
			break
		}
	}
	return out
}

// digest is what a lookup records of the row it read: how many ids and
// how much sum the row holds.
func digest(r Row) int64 {
	var d int64
	for _, ids := range r.Lanes {
		d += int64(len(ids))
	}
	for _, s := range r.Sums {
		d += s
	}
	return d
}

// look records, in r, the digest of the row the event's lookup saw
// (lookDigest).
func (r *Row) look(id int, d int64) {
	if r.Looks == nil {
		r.Looks = map[int]int64{}
	}
	r.Looks[id] = d
}
