package metamorphic

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/strand-io/strand/planner"
)

// Cross-input lookups and global tables (Knobs.CrossReads,
// docs/design.md §20). A fold that reads a table other inputs write sees
// it as they committed it before the batch's writer turn, which depends on
// polling and timing; a lookup of a global table sees it as last
// committed. Neither is a function of the log alone, so the model checks
// what the documented answers promise: the digest a fold saw of a row is
// between 0 and the digest of the row's final value (the tables read only
// grow: no deleting node writes them), and the events of one node and key
// saw digests that never decrease in their log order (a table never goes
// back, and a key's events of one type are folded in log order).

// crossReads returns, per node, the table its folds read that only other
// inputs write (Knobs.CrossReads). Derived from the case, not drawn: a
// depth-0 node with context folds of a type that is never reduced, that
// reads no table of its own input (Case.lookups), reads the first table it
// does not project into whose writers all read other physical inputs and
// none of which deletes rows; a global table (addGlobal) first.
func (c *Case) crossReads() map[int]int {
	if !c.Knobs.CrossReads {
		return nil
	}
	writers := map[int][]NodeDesc{}
	for _, n := range c.Nodes {
		for _, t := range n.Tables {
			writers[t] = append(writers[t], n)
		}
	}
	looks, dels := c.lookups(), c.deleters()
	deleted := map[int]bool{}
	for _, t := range dels {
		deleted[t] = true
	}
	// A global table first (addGlobal), then the others.
	var order []int
	for t := range c.Tables {
		if slices.ContainsFunc(writers[t], func(w NodeDesc) bool { return c.Inputs[w.Input].Global }) {
			order = slices.Insert(order, 0, t)
		} else {
			order = append(order, t)
		}
	}
	out := map[int]int{}
	for _, n := range c.Nodes {
		kind := c.Inputs[n.Input].Types[n.Type].Kind
		if _, ok := looks[n.ID]; ok || n.Depth != 0 || !n.CtxFolds || len(n.Tables) == 0 || (kind != KindFence && kind != KindFenceBy) {
			continue
		}
		if _, ok := dels[n.ID]; ok {
			continue
		}
	tables:
		for _, t := range order {
			if slices.Contains(n.Tables, t) || len(writers[t]) == 0 || deleted[t] {
				continue
			}
			for _, w := range writers[t] {
				if w.Topic == n.Topic {
					continue tables
				}
			}
			out[n.ID] = t
			break
		}
	}
	return out
}

// addGlobal adds, with Knobs.CrossReads and for one seed in three, a
// global input (SourceNode.Global): one Relaxed type projected into a
// table of its own ("g<n>"), with 5 to 14 events over the keys the other
// inputs use, published at random places of the log. It draws from a
// random source of its own, after every other draw, so that the rest of
// the case is the one the seed had without it.
func (c *Case) addGlobal() {
	if !c.Knobs.CrossReads || c.Seed%3 != 0 || len(c.Log) == 0 {
		return
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x610ba1))
	gi, gt := len(c.Inputs), len(c.Tables)
	c.Inputs = append(c.Inputs, InputDesc{Name: "meta/global", Global: true,
		Types: []TypeDesc{{Tag: 1, Kind: KindFence, Fence: planner.Relaxed}}})
	c.Tables = append(c.Tables, fmt.Sprintf("g%d", gt))
	c.Nodes = append(c.Nodes, NodeDesc{ID: len(c.Nodes), Input: gi, Parent: -1, Topic: "meta/global", Tables: []int{gt}, Child: -1})
	id := 0
	for _, rec := range c.Gen {
		id = max(id, rec.Ev.ID)
	}
	for range 5 + r.IntN(10) {
		rec := Rec{Input: gi, Kind: RecEvent, Ev: Ev{K: fmt.Sprintf("k%d", r.IntN(5)), Amt: int64(1 + r.IntN(9))}}
		pos := r.IntN(len(c.Log) + 1)
		c.Log = slices.Insert(c.Log, pos, rec)
		start := 0
		for i, n := range c.Chunks { // the chunk that publishes pos
			if pos < start+n || i == len(c.Chunks)-1 {
				c.Chunks[i]++
				break
			}
			start += n
		}
	}
	// Ids in publication order, which is the input's true order.
	for i := range c.Log {
		if c.Log[i].Input == gi {
			id++
			c.Log[i].Ev.ID = id
			c.Gen = append(c.Gen, c.Log[i])
		}
	}
}

// globalInput returns the index of the case's global input, or -1.
func (c *Case) globalInput() int {
	for i, in := range c.Inputs {
		if in.Global {
			return i
		}
	}
	return -1
}

// xlook records, in r, the digest of the row a cross-input or global read
// saw (checked against bounds, not a value: see crossReads).
func (r *Row) xlook(id int, d int64) {
	if r.XLooks == nil {
		r.XLooks = map[int]int64{}
	}
	r.XLooks[id] = d
}

// xread is an event's read of another input's table, in the model.
type xread struct {
	node, table int
	key         string
}

// expectCrossReads sets, for every event whose fold read a table of
// other inputs, the most its read may have seen: the digest of the row's
// final value in the model.
func expectCrossReads(x *Expected) {
	x.XBound = map[int]int64{}
	for id, r := range x.xreads {
		x.XBound[id] = digest(x.Tables[r.table][r.key])
	}
}

// compareCrossReads checks the reads of tables of other inputs: every event
// the model folded into a row recorded one, between 0 and its bound, and
// the events of one node and key saw digests that never decrease in their
// log order.
func compareCrossReads(c *Case, x *Expected, o *Observed) error {
	for i, want := range x.Tables {
		for k, w := range want {
			g := o.Tables[i][k]
			ids := sortedKeys(w.XLooks, g.XLooks)
			last := map[int]int64{} // node → digest of its previous event
			for _, id := range ids {
				d, ok := g.XLooks[id]
				_, wok := w.XLooks[id]
				switch {
				case !wok:
					return diff("table %s key %q: event #%d recorded a read of another input's table, want none", c.Tables[i], k, id)
				case !ok:
					return diff("table %s key %q: event #%d recorded no read of another input's table, want one", c.Tables[i], k, id)
				case d < 0 || d > x.XBound[id]:
					return diff("table %s key %q: event #%d read a row of digest %d from another input's table, want 0..%d (its final value)", c.Tables[i], k, id, d, x.XBound[id])
				case d < last[x.xreads[id].node]:
					return diff("table %s key %q: event #%d of node %d read a row of digest %d after an earlier event of the node read %d: the table went back",
						c.Tables[i], k, id, x.xreads[id].node, d, last[x.xreads[id].node])
				}
				last[x.xreads[id].node] = d
			}
		}
	}
	return nil
}
