package metamorphic

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/deadletter"
)

// Row is the value of every generated table. Its fold is built so that a
// check of it does not depend on the orders strand may choose: per lane
// (one physical input, one origin key, one type) the ids applied, in order,
// or for a sum the total; and at every fenced event how far each lane of its
// physical input and origin key had got, which is exact only if the fence
// held every earlier event in front of it and every later one behind.
type Row struct {
	Lanes map[string][]int         `json:"l,omitempty"`
	Sums  map[string]int64         `json:"s,omitempty"`
	Obs   map[int]map[string]int64 `json:"o,omitempty"`
	// Looks: per event of a node that reads a table (Case.lookups), the
	// digest of the row its lookup saw.
	Looks map[int]int64 `json:"k,omitempty"`
	// XLooks: per event of a node that reads another input's table
	// (Case.crossReads), the digest of the row it saw: checked against
	// bounds (crossread.go), not compared.
	XLooks map[int]int64 `json:"x,omitempty"`
}

// lane names a lane: physical input, origin key, type tag.
func lane(topic, origin string, tag planner.Tag) string {
	return fmt.Sprintf("%s|%s|%d", topic, origin, tag)
}

// apply folds e, of type td read from topic by a node at depth, into r. The
// App's projections and the model both fold with it. A sum's lane is of the
// row's key (a reduced sum read behind a KeyBy mixes origin keys); a fold
// keeps each id's origin key.
func (r *Row) apply(topic string, depth int, td TypeDesc, e Ev) {
	fenced := (td.Kind == KindFence && td.Fence != planner.Relaxed) ||
		(td.Kind == KindFenceBy && e.Fence != planner.Relaxed && e.Fence != 0)
	if fenced {
		prefix := topic + "|" + e.K + "|"
		obs := map[string]int64{}
		for name, ids := range r.Lanes {
			if strings.HasPrefix(name, prefix) && len(ids) > 0 {
				obs[name] = int64(len(ids))
			}
		}
		for name, sum := range r.Sums {
			if strings.HasPrefix(name, prefix) && sum != 0 {
				obs[name] = sum
			}
		}
		if r.Obs == nil {
			r.Obs = map[int]map[string]int64{}
		}
		r.Obs[e.ID] = obs
	}
	if td.Kind == KindSum {
		if r.Sums == nil {
			r.Sums = map[string]int64{}
		}
		r.Sums[lane(topic, e.keyAt(depth), td.Tag)] += e.Amt
		return
	}
	if r.Lanes == nil {
		r.Lanes = map[string][]int{}
	}
	ks := e.origins()
	for i, id := range e.ids() {
		l := lane(topic, ks[i], td.Tag)
		r.Lanes[l] = append(r.Lanes[l], id)
	}
}

// ExpDL is a dead letter the model expects.
type ExpDL struct {
	Reason deadletter.Reason
	// Err, when not empty, must be in the dead letter's error.
	Err string
}

// Expected is what the model says a case leaves behind.
type Expected struct {
	// Tables: per table, key → row.
	Tables []map[string]Row
	// DLs: per record (see identity), the one dead letter it must get.
	DLs map[string]ExpDL
	// Outputs: per node with To, the events it publishes, in true order.
	Outputs map[int][]Ev
	// ForEach: per node with ForEach, the ids it must see at least once.
	ForEach map[int][]int
	// Time: the time table's rows once every timer fired, and how many
	// timers fire (time.go); nil without one.
	Time      map[string]TRow
	TimeFired int
	// Windows: the window table, key → window start (minutes after
	// timeBase) → ids (windows.go); nil without one.
	Windows map[string]map[int64][]int
	// Joins: per join of the case (Case.joins), key → row.
	Joins []map[string]JoinRow
	// XBound: per event that read another input's table (Case.crossReads),
	// the most it may have seen (crossread.go).
	XBound map[int]int64
	xreads map[int]xread
	// timeIDs: per key, the ids the node that feeds the time table
	// folded, in order (expectTime).
	timeIDs map[string][]int
}

// logIdentity names a record of an input by its place in the log;
// idIdentity names an event read from a repartition topic by its id.
func logIdentity(topic string, idx int) string { return fmt.Sprintf("%s#%d", topic, idx) }
func idIdentity(topic string, id int) string   { return fmt.Sprintf("%s@%d", topic, id) }

// failText is in the error of a handler that fails on event id.
func failText(id int) string { return fmt.Sprintf("event #%d ", id) }

// Expect runs the reference model of the documented guarantees over c.
func Expect(c *Case) *Expected {
	x := &Expected{Tables: make([]map[string]Row, len(c.Tables)), DLs: map[string]ExpDL{},
		Outputs: map[int][]Ev{}, ForEach: map[int][]int{}}
	for i := range x.Tables {
		x.Tables[i] = map[string]Row{}
	}
	first := map[int]int{} // event id → log index of its first copy
	for i, rec := range c.Log {
		if _, ok := first[rec.Ev.ID]; !ok {
			first[rec.Ev.ID] = i
		}
		in := c.Inputs[rec.Input]
		reason := deadletter.Reason(0)
		switch rec.Kind {
		case RecDup:
			if in.DupDeadLetter {
				reason = deadletter.ReasonDuplicate
			}
		case RecBadPayload:
			reason = deadletter.ReasonDecode
		case RecUnknownType:
			reason = deadletter.ReasonUnknownType
		case RecBadHeaders:
			reason = deadletter.ReasonBadHeaders
		case RecUnclassified:
			reason = deadletter.ReasonUnclassified
		}
		if reason != 0 {
			x.DLs[logIdentity(in.Name, i)] = ExpDL{Reason: reason}
		}
	}
	lookups, kinds, deleters, cross := c.lookups(), c.readKinds(), c.deleters(), c.crossReads()
	x.xreads, x.timeIDs = map[int]xread{}, map[string][]int{}
	timeNode := c.timeNode()
	var walk func(n NodeDesc, e Ev)
	walk = func(n NodeDesc, e Ev) {
		ident := idIdentity(n.Topic, e.ID)
		if n.Depth == 0 {
			ident = logIdentity(n.Topic, first[e.ID])
		}
		if n.Child >= 0 && (e.RK[n.Depth] == noKey || e.RK[n.Depth] == panicKey) {
			x.DLs[ident] = ExpDL{Reason: deadletter.ReasonKeyBy}
			return
		}
		if f, ok := c.Fail[e.ID]; ok && f.Node == n.ID && (f.Permanent || f.Always) {
			r := deadletter.ReasonExhausted
			if f.Permanent {
				r = deadletter.ReasonPermanent
			}
			x.DLs[ident] = ExpDL{Reason: r, Err: failText(e.ID)}
			return
		}
		td := c.Inputs[n.Input].Types[n.Type]
		key := e.keyAt(n.Depth)
		if n.ID == timeNode {
			x.timeIDs[key] = append(x.timeIDs[key], e.ids()...)
			x.expectWindow(key, e)
		}
		lt, looks := lookups[n.ID]
		xt, xreads := cross[n.ID]
		kind := kinds[n.ID]
		dt, del := deleters[n.ID]
		for _, t := range n.Tables {
			row := x.Tables[t][key]
			if looks {
				seen, found := x.Tables[lt][key]
				if kind == ReadInner && !found {
					x.Tables[t][key] = row // not folded, the row still written
					continue
				}
				row.look(e.ID, lookDigest(kind, seen, found))
			}
			if xreads {
				row.xlook(e.ID, 0) // its value is bounded, not known
				x.xreads[e.ID] = xread{node: n.ID, table: xt, key: key}
			}
			if del && t == dt && deletes(e) {
				delete(x.Tables[t], key)
				continue
			}
			row.apply(n.Topic, n.Depth, td, e)
			x.Tables[t][key] = row
		}
		if n.To {
			x.Outputs[n.ID] = append(x.Outputs[n.ID], e)
		}
		if n.ForEach {
			x.ForEach[n.ID] = append(x.ForEach[n.ID], e.ID)
		}
		if n.Child >= 0 {
			walk(c.Nodes[n.Child], e)
		}
	}
	for _, rec := range c.Gen {
		if rec.Kind != RecEvent {
			continue
		}
		for _, n := range c.Nodes {
			if n.Depth == 0 && n.Input == rec.Input && n.Type == rec.Type {
				walk(n, rec.Ev)
			}
		}
	}
	expectTime(c, x)
	expectJoins(c, x)
	expectCrossReads(x)
	return x
}

// equalRows reports whether two rows are equal, nil and empty maps alike.
func equalRows(a, b Row) bool {
	return maps.EqualFunc(a.Lanes, b.Lanes, slices.Equal) && maps.Equal(a.Sums, b.Sums) &&
		maps.EqualFunc(a.Obs, b.Obs, func(x, y map[string]int64) bool { return maps.Equal(x, y) }) &&
		maps.Equal(a.Looks, b.Looks)
}

// diffRows describes the first difference between two rows.
func diffRows(got, want Row) string {
	for _, l := range sortedKeys(got.Lanes, want.Lanes) {
		if !slices.Equal(got.Lanes[l], want.Lanes[l]) {
			return fmt.Sprintf("lane %s: ids %v, want %v", l, got.Lanes[l], want.Lanes[l])
		}
	}
	for _, l := range sortedKeys(got.Sums, want.Sums) {
		if got.Sums[l] != want.Sums[l] {
			return fmt.Sprintf("lane %s: sum %d, want %d", l, got.Sums[l], want.Sums[l])
		}
	}
	for _, id := range sortedKeys(got.Obs, want.Obs) {
		if !maps.Equal(got.Obs[id], want.Obs[id]) {
			return fmt.Sprintf("fenced event #%d saw %v applied before it, want %v", id, got.Obs[id], want.Obs[id])
		}
	}
	for _, id := range sortedKeys(got.Looks, want.Looks) {
		if got.Looks[id] != want.Looks[id] {
			return fmt.Sprintf("event #%d's lookup saw a row of digest %d, want %d", id, got.Looks[id], want.Looks[id])
		}
	}
	return "equal"
}

// sortedKeys returns the keys of m and n, sorted, once each.
func sortedKeys[K cmp.Ordered, V, W any](m map[K]V, n map[K]W) []K {
	ks := slices.AppendSeq(slices.Collect(maps.Keys(m)), maps.Keys(n))
	slices.Sort(ks)
	return slices.Compact(ks)
}
