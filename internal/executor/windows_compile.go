package executor

import (
	"fmt"
	"slices"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// compileWindows checks the window tables of a Spec and gives each source
// the window tables it keeps the stream time of and sweeps (windows.go).
func (c *compiler) compileWindows(spec Spec) {
	p := c.p
	for _, w := range spec.Windows {
		if w.Core == nil {
			c.fail("a window table without its core")
			continue
		}
		name := w.Core.windowName()
		cfg := w.Core.windowConfig()
		if err := cfg.Shape.Check(); err != nil {
			c.fail("window table %q: %v", name, err)
			continue
		}
		switch {
		case cfg.Grace < 0:
			c.fail("window table %q: grace %v, want 0 or more", name, cfg.Grace)
			continue
		case cfg.Retention < cfg.Grace:
			c.fail("window table %q: retention %v is shorter than the grace %v", name, cfg.Retention, cfg.Grace)
			continue
		case cfg.Idleness < 0:
			c.fail("window table %q: idleness %v, want 0 (never) or more", name, cfg.Idleness)
			continue
		case cfg.Shape.Kind == WindowSession && !w.Core.hasMerge():
			c.fail("window table %q: session windows need a merge function", name)
			continue
		}
		if p.windows[name] != nil {
			c.fail("window table %q: declared twice", name)
			continue
		}
		if !slices.Contains(p.tableNames, name) {
			c.addTable(name, fmt.Sprintf("%T", w.Core.windowTable()), w.Core.windowTable())
		}
		ps := p.sources[w.Source]
		if ps == nil {
			c.fail("window table %q: its source %q is not read by the topology", name, w.Source)
			continue
		}
		wt := &windowTime{name: name, core: w.Core, cfg: cfg, idx: len(ps.wins),
			pre:    rows.DeadlinePrefix(rows.DeadlineWindow, name),
			mkey:   rows.DeadlinePrefix(rows.DeadlineStreamTime, name),
			inputs: map[planner.Tag]func(*connector.Record) (int64, bool){}}
		for _, src := range spec.Sources {
			for _, h := range src.Handlers {
				in, ok := h.(windowInput)
				if !ok || in.windowName() != name {
					continue
				}
				if src.Name != w.Source {
					c.fail("window table %q: aggregated from source %q, but its stream time is kept by source %q; a window table has one source", name, src.Name, w.Source)
					continue
				}
				if wt.inputs[in.inputTag()] != nil {
					c.fail("window table %q: two aggregations of type tag %d", name, in.inputTag())
					continue
				}
				wt.inputs[in.inputTag()] = in.eventTimeOf
			}
		}
		if len(wt.inputs) == 0 {
			c.fail("window table %q: no aggregation feeds it", name)
			continue
		}
		if d := w.Core.windowDest(); d != "" {
			ps.emits = true
			if !slices.Contains(ps.dests, d) {
				ps.dests = append(ps.dests, d)
			}
		}
		if p.windows == nil {
			p.windows = map[string]*windowTime{}
		}
		p.windows[name] = wt
		ps.wins = append(ps.wins, wt)
	}
}
