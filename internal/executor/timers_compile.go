package executor

import (
	"fmt"
	"slices"
	"time"

	"github.com/strand-io/strand/internal/rows"
)

// compileTimes checks the TTLs and timer handlers of a Spec and gives each
// source the tables it sweeps. The fingerprint does not cover them: a TTL
// or a timer handler added to, or removed from, a table keeps its rows'
// meaning (a removed one leaves its deadline rows unread).
func (c *compiler) compileTimes(spec Spec) {
	p := c.p
	get := func(name string) *tableTime {
		if p.times == nil {
			p.times = map[string]*tableTime{}
		}
		tt := p.times[name]
		if tt == nil {
			tt = &tableTime{name: name}
			p.times[name] = tt
		}
		return tt
	}
	sweeper := func(src, table, what string) *programSource {
		ps := p.sources[src]
		if ps == nil {
			c.fail("table %q: %s is swept by source %q, which the topology does not read", table, what, src)
		}
		return ps
	}
	for _, x := range spec.TTLs {
		if x.Table == nil {
			c.fail("a TTL without a table")
			continue
		}
		name := tableName(x.Table)
		if !slices.Contains(p.tableNames, name) {
			c.addTable(name, fmt.Sprintf("%T", x.Table), x.Table)
		}
		switch {
		case x.TTL <= 0 || x.TTL > 100*365*24*time.Hour:
			c.fail("table %q: TTL %v, want more than 0 and at most 100 years", name, x.TTL)
			continue
		case x.Delete == nil:
			c.fail("table %q: TTL without a delete function", name)
			continue
		}
		tt := get(name)
		if tt.ttl > 0 {
			c.fail("table %q: two TTLs", name)
			continue
		}
		ps := sweeper(x.Source, name, "its TTL")
		if ps == nil {
			continue
		}
		tt.ttl, tt.del, tt.ttlSrc, tt.xpre = x.TTL, x.Delete, x.Source, rows.DeadlinePrefix(rows.DeadlineExpiry, name)
		if !slices.Contains(ps.sweeps, tt) {
			ps.sweeps = append(ps.sweeps, tt)
		}
	}
	for _, x := range spec.Timers {
		if x.Table == nil || x.Handler == nil {
			c.fail("a timer handler without a table or a function")
			continue
		}
		name := tableName(x.Table)
		if !slices.Contains(p.tableNames, name) {
			c.addTable(name, fmt.Sprintf("%T", x.Table), x.Table)
		}
		tt := get(name)
		if tt.timer != nil {
			c.fail("table %q: two timer handlers", name)
			continue
		}
		ps := sweeper(x.Source, name, "its timer handler")
		if ps == nil {
			continue
		}
		tt.timer, tt.timerSrc, tt.tpre = x.Handler, x.Source, rows.DeadlinePrefix(rows.DeadlineTimer, name)
		if x.Dest != "" {
			ps.emits = true
			if !slices.Contains(ps.dests, x.Dest) {
				ps.dests = append(ps.dests, x.Dest)
			}
		}
		if !slices.Contains(ps.sweeps, tt) {
			ps.sweeps = append(ps.sweeps, tt)
		}
	}
}
