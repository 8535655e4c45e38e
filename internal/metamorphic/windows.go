package metamorphic

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// Windows (issue 31): with Knobs.Time, the node that feeds the time table
// (Case.timeNode) also aggregates into "meta-windows", a window table of
// tumbling windows of winSize of event time, the event time of event id
// being timeBase + id minutes; each window holds the ids of its events in
// the key's order. The grace is longer than any case's event times, so no
// event is late and no window closes however the run parks, retries or
// restarts (a parked event is judged at the stream time of its retry): the
// model folds the node's events per key in log order into their windows,
// and after the run every key's windows must hold exactly those ids, none
// final. No random draw decides any of it, so seeds keep their cases.

const (
	winTable = "meta-windows"
	winSize  = 10 * time.Minute
	winGrace = 100_000 * time.Hour
)

// winTime is the event time of an event of the windowed node.
func winTime(e Ev) time.Time { return timeBase.Add(time.Duration(e.ID) * time.Minute) }

// winStart returns the start of the window of e, in minutes after
// timeBase.
func winStart(e Ev) int64 {
	return int64(winTime(e).Sub(timeBase)/winSize) * int64(winSize/time.Minute)
}

// addWindows adds the window table to b's topology, fed by the node
// timeNode names.
func (b *Built) addWindows(topo *topology.Topology, streams map[int]*topology.Stream[string, Ev]) {
	i := b.c.timeNode()
	if i < 0 {
		return
	}
	n := b.c.Nodes[i]
	b.Windows = topology.NewWindowTable[string, []int](topo, winTable, topology.Tumbling(winSize), stream.JSON[[]int](),
		topology.WithGrace(winGrace), topology.WithRetention(winGrace))
	topology.Aggregate(streams[n.ID], b.Windows, topology.EventTimeOf(winTime),
		func(ids *[]int, e Ev) error { *ids = append(*ids, e.ID); return nil })
}

// expectWindow adds e, folded by the windowed node for key, to x's
// windows.
func (x *Expected) expectWindow(key string, e Ev) {
	if x.Windows == nil {
		x.Windows = map[string]map[int64][]int{}
	}
	if x.Windows[key] == nil {
		x.Windows[key] = map[int64][]int{}
	}
	s := winStart(e)
	x.Windows[key][s] = append(x.Windows[key][s], e.ID)
}

// observeWindows reads the window table into o.
func observeWindows(b *Built, o *Observed) error {
	if b.Windows == nil {
		return nil
	}
	o.Windows = map[string]map[int64][]int{}
	err := b.Windows.Scan(context.Background(), func(k string, ws []topology.WindowResult[[]int]) bool {
		m := map[int64][]int{}
		for _, w := range ws {
			if w.Final {
				o.WindowsFinal++
			}
			m[int64(w.Start.Sub(timeBase)/time.Minute)] = w.Value
		}
		o.Windows[k] = m
		return true
	})
	if err != nil {
		return fmt.Errorf("scanning the window table: %w", err)
	}
	return nil
}

func compareWindows(c *Case, x *Expected, o *Observed) error {
	if c.timeNode() < 0 {
		return nil
	}
	if o.WindowsFinal != 0 {
		return diff("table %s: %d windows final, want none (the grace outlasts the case)", winTable, o.WindowsFinal)
	}
	for _, k := range sortedKeys(o.Windows, x.Windows) {
		g, w := o.Windows[k], x.Windows[k]
		for _, s := range sortedKeys(g, w) {
			if !slices.Equal(g[s], w[s]) {
				return diff("table %s key %q window at +%d min: ids %v, want %v", winTable, k, s, g[s], w[s])
			}
		}
	}
	return nil
}
