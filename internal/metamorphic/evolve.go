package metamorphic

import (
	"fmt"
	"slices"
)

// Evolution (Knobs.Evolve, docs/design.md §19): at one restart the case's
// topology changes in a way Open makes in place, and the table concerned
// is built in the background from the log while everything else runs.
// Either the table is new then (before, the topology has neither it nor
// its projections), or it gets a new version (its fold is the same, so
// the rebuilt rows must equal the old ones). The model does not change:
// every table still equals the fold of the events applied, each To
// message and dead letter is published once and ForEach sees each event
// once (a build publishes and calls nothing).
//
// The table is the first one a build can take: fed by the nodes of one
// physical input (a source or a repartition topic) that is not
// re-sequenced, not global, and none of whose nodes reads a table (a
// lookup, a stream-table join or a cross read: the source's handlers would
// read today's rows, not the build's past); not a side of a join nor read
// by any node; whose nodes have no event that fails for good (the main
// pipeline dead-letters the event for every handler of the node, a build
// runs the table's fold only); and whose input has no handler that always
// fails (the build would retry it on the driver's clock, which the driver
// does not advance while it waits for the build). Transient failures are
// fine: the build finds them spent. When no table can be taken, one is
// added for the evolution (addEvolveTable). The restart is the first one
// that is not a reset. Not random draws: seeds keep their cases.

func (c *Case) genEvolve() {
	c.EvolveAt, c.EvolveTable = 0, 0
	if !c.Knobs.Evolve {
		return
	}
	at := -1
	for i, r := range c.Restart {
		if r && (i >= len(c.Reset) || !c.Reset[i]) {
			at = i
			break
		}
	}
	if at < 0 {
		return
	}
	t := c.evolvable()
	add := (len(c.Log)+at)%2 == 0
	if t < 0 {
		if t = c.addEvolveTable(); t < 0 {
			return
		}
		add = true
	}
	c.EvolveAt, c.EvolveTable, c.EvolveAdd = at+1, t, add
}

// addEvolveTable adds, when no table of the case can be built (they are
// fed by several inputs, read by other nodes or fed by nodes that fail),
// a table of its own ("e<n>") to the first node that could feed it alone,
// and returns its index (-1: none could). The node must have no generated
// failure (a handler's index would move past the new projection) and the
// table must change nothing else the case derives from its tables
// (lookups, cross reads, joins, deletes, the time node): it is added at
// the evolution and equals the fold of the node's events, which the
// model computes as for any table.
func (c *Case) addEvolveTable() int {
	fails := map[int]bool{}
	for _, f := range c.Fail {
		fails[f.Node] = true
	}
	derived := func() string {
		return fmt.Sprint(c.lookups(), c.crossReads(), c.joins(), c.deleters(), c.timeNode(), c.readKinds())
	}
	before := derived()
	for i, n := range c.Nodes {
		in := c.Inputs[n.Input]
		if fails[n.ID] || in.Reseq || in.Global {
			continue
		}
		t := len(c.Tables)
		c.Tables = append(c.Tables, fmt.Sprintf("e%d", t))
		c.Nodes[i].Tables = append(slices.Clip(n.Tables), t)
		if derived() == before && c.evolvable() == t {
			return t
		}
		c.Tables, c.Nodes[i].Tables = c.Tables[:t], n.Tables
	}
	return -1
}

// evolvable returns the first table a build can take, or -1.
func (c *Case) evolvable() int {
	failing := map[int]bool{}     // nodes with an event that fails for good
	retrying := map[string]bool{} // topics with a handler that always fails
	for _, f := range c.Fail {
		if f.Permanent || f.Always {
			failing[f.Node] = true
		}
		if f.Always {
			retrying[c.Nodes[f.Node].Topic] = true
		}
	}
	lookupTopics := map[string]bool{}
	read := map[int]bool{}
	for node, t := range c.lookups() {
		read[t] = true
		lookupTopics[c.Nodes[node].Topic] = true
	}
	for node, t := range c.crossReads() {
		read[t] = true
		lookupTopics[c.Nodes[node].Topic] = true
	}
	for _, j := range c.joins() {
		read[j.Left], read[j.Right] = true, true
	}
tables:
	for t := range c.Tables {
		if read[t] {
			continue
		}
		topic := ""
		for _, n := range c.Nodes {
			if !slices.Contains(n.Tables, t) {
				continue
			}
			in := c.Inputs[n.Input]
			if failing[n.ID] || retrying[n.Topic] || in.Reseq || in.Global || lookupTopics[n.Topic] ||
				(topic != "" && topic != n.Topic) {
				continue tables
			}
			topic = n.Topic
		}
		if topic != "" {
			return t
		}
	}
	return -1
}
