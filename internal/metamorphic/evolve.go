package metamorphic

import "slices"

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
// The table is the first one a build can take: fed by nodes of depth 0 of
// one input that is not re-sequenced and has no lookups, not a side of a
// join nor read by a lookup, and whose nodes have no generated failure
// (a build does not call ForEach, so a run that a failing ForEach stops
// in the main pipeline would be folded by the build). The restart is the
// first one that is not a reset. Not random draws: seeds keep their cases.

func (c *Case) genEvolve() {
	c.EvolveAt, c.EvolveTable = 0, 0
	if !c.Knobs.Evolve || c.Knobs.CrossReads || c.Knobs.StreamJoins {
		// Cross reads, global inputs and stream joins (merged after this
		// knob) are not yet told apart from the tables a build can take:
		// run with -meta.cross-reads=false -meta.stream-joins=false.
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
	if t < 0 {
		return
	}
	c.EvolveAt, c.EvolveTable, c.EvolveAdd = at+1, t, (len(c.Log)+at)%2 == 0
}

// evolvable returns the first table a build can take, or -1.
func (c *Case) evolvable() int {
	failing := map[int]bool{}
	for _, f := range c.Fail {
		failing[f.Node] = true
	}
	lookupTopics := map[string]bool{}
	read := map[int]bool{}
	for node, t := range c.lookups() {
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
			if n.Depth != 0 || failing[n.ID] || c.Inputs[n.Input].Reseq || lookupTopics[n.Topic] ||
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
