package metamorphic

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// Time in read models (issue 31): with Knobs.Time, the first depth-0 node
// of an unreduced type (a static or per-event fence) that projects into a
// table also folds into the table "meta-time", with a ProjectContext fold
// that deletes its row on every event whose id is a multiple of 5, sets
// the key's timer (far in the future) on multiples of 3 and cancels it on
// multiples of 7, and otherwise appends the id; the table has a TTL and a
// timer handler that counts its firings. No random draw decides any of it,
// so seeds keep their cases.
//
// The model derives the expected rows from the lane of that node in its
// first table (the ids applied, in order). After the case's run, the
// clock jumps past every timer (each must fire exactly once, counted by
// its row and by Counters.TimersFired), then past the TTL (every row must
// expire, counted once by Counters.Expired).

const (
	timeTable = "meta-time"
	timeTTL   = 5000 * time.Hour
	// timersAt is when every timer is set to fire: after anything a case's
	// clock reaches, before the TTL.
	timersAt = 1000 * time.Hour
)

// TRow is the value of the time table.
type TRow struct {
	Seen  []int `json:"s,omitempty"`
	Fired int   `json:"f,omitempty"`
}

// timeNode returns the index in c.Nodes of the node that feeds the time
// table, or -1.
func (c *Case) timeNode() int {
	if !c.Knobs.Time {
		return -1
	}
	for i, n := range c.Nodes {
		if n.Depth != 0 || len(n.Tables) == 0 || c.Inputs[n.Input].Global {
			continue
		}
		if k := c.Inputs[n.Input].Types[n.Type].Kind; k == KindFence || k == KindFenceBy {
			return i
		}
	}
	return -1
}

// timeFold is the time table's fold of one event, shared by the topology
// (with ctx) and the model (ctx nil). It reports the timer change: +1
// set, -1 cancelled (a delete cancels too), 0 none.
func timeFold(ctx context.Context, base time.Time, r *TRow, id int) (timer int, err error) {
	switch {
	case id%5 == 0:
		if ctx != nil {
			err = topology.Delete(ctx)
		}
		*r = TRow{}
		return -1, err
	case id%7 == 0:
		if ctx != nil {
			err = topology.CancelTimer(ctx)
		}
		timer = -1
	case id%3 == 0:
		if ctx != nil {
			err = topology.Schedule(ctx, base.Add(timersAt))
		}
		timer = 1
	}
	r.Seen = append(r.Seen, id)
	return timer, err
}

// addTime adds the time table to b's topology, fed by the node timeNode
// names.
func (b *Built) addTime(topo *topology.Topology, srcs []*topology.SourceNode[string], streams map[int]*topology.Stream[string, Ev], base time.Time) {
	i := b.c.timeNode()
	if i < 0 {
		return
	}
	n := b.c.Nodes[i]
	b.Time = topology.NewTable[string, TRow](topo, timeTable, stream.JSON[TRow](), topology.WithTTL(timeTTL))
	topology.ProjectContext(streams[n.ID], b.Time, func(ctx context.Context, r *TRow, e Ev) error {
		_, err := timeFold(ctx, base, r, e.ID)
		return err
	})
	topology.OnTimer(srcs[n.Input], b.Time, func(_ context.Context, _ string, r *TRow, _ time.Time) error {
		r.Fired++
		return nil
	})
}

// expectTime fills x's expectation of the time table from the events the
// model folded in the node that feeds it (Expected.timeIDs: not its
// table's lanes, which a deleting node may clear, Case.deleters).
func expectTime(c *Case, x *Expected) {
	if c.timeNode() < 0 {
		return
	}
	x.Time = map[string]TRow{}
	for key, ids := range x.timeIDs {
		var r TRow
		present, timer := false, false
		for _, id := range ids {
			t, _ := timeFold(nil, time.Time{}, &r, id)
			present = id%5 != 0
			if t != 0 {
				timer = t > 0
			}
		}
		if timer {
			r.Fired = 1
			x.TimeFired++
		}
		if present {
			x.Time[key] = r
		}
	}
}

// runTime moves d's clock past every timer, reads the time table, then
// past the TTL, and records what fired and expired in o.
func runTime(d *topologytest.Driver, b *Built, o *Observed) error {
	if b.Time == nil {
		return nil
	}
	totals := func() (fired, expired uint64) {
		for _, st := range d.App().Stats() {
			fired += st.Total.TimersFired
			expired += st.Total.Expired
		}
		return fired, expired
	}
	ctx := context.Background()
	fired0, expired0 := totals()
	d.AdvanceClock(timersAt + time.Hour)
	d.Advance()
	o.Time = map[string]TRow{}
	if err := b.Time.Scan(ctx, func(k string, v TRow) bool { o.Time[k] = v; return true }); err != nil {
		return fmt.Errorf("scanning the time table: %w", err)
	}
	fired1, _ := totals()
	o.TimeFired = int(fired1 - fired0)
	d.AdvanceClock(timeTTL + time.Hour)
	d.Advance()
	if err := b.Time.Scan(ctx, func(string, TRow) bool { o.TimeLeft++; return true }); err != nil {
		return fmt.Errorf("scanning the time table: %w", err)
	}
	_, expired2 := totals()
	o.TimeExpired = int(expired2 - expired0)
	return nil
}

func compareTime(_ *Case, x *Expected, o *Observed) error {
	if x.Time == nil {
		return nil
	}
	for _, k := range sortedKeys(o.Time, x.Time) {
		g, gok := o.Time[k]
		w, wok := x.Time[k]
		switch {
		case !wok:
			return diff("table %s key %q: a row %+v, want none (deleted)", timeTable, k, g)
		case !gok:
			return diff("table %s key %q: no row, want %+v", timeTable, k, w)
		case !slices.Equal(g.Seen, w.Seen) || g.Fired != w.Fired:
			return diff("table %s key %q: %+v, want %+v", timeTable, k, g, w)
		}
	}
	switch {
	case o.TimeFired != x.TimeFired:
		return diff("table %s: %d timers fired, want %d", timeTable, o.TimeFired, x.TimeFired)
	case o.TimeLeft != 0:
		return diff("table %s: %d rows left after the TTL, want none", timeTable, o.TimeLeft)
	case o.TimeExpired != len(o.Time):
		return diff("table %s: %d rows expired, want %d", timeTable, o.TimeExpired, len(o.Time))
	}
	return nil
}

// timeBase is topologytest's clock at start.
var timeBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
