package metamorphic

import (
	"context"
	"fmt"

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
