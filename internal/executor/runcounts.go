package executor

import (
	"sync/atomic"

	"github.com/strand-io/strand/planner"
)

// runCounters count an event runner's work since the program was built
// (all partitions, failed runs included). Every run adds to them, from
// every worker of every partition: one shared counter would be a cache line
// that all cores fight over (measured: about a fifth of the core
// benchmark's CPU), so they are sharded by a byte of the run's key and
// summed when read.
type runCounters struct {
	shards [runCounterShards]runCounterShard
}

const runCounterShards = 16

type runCounterShard struct {
	events, reducedTo, calls atomic.Uint64
	_                        [64 - 24]byte // one cache line each
}

func (c *runCounters) shard(key []byte) *runCounterShard {
	if len(key) == 0 {
		return &c.shards[0]
	}
	return &c.shards[int(key[len(key)-1])%runCounterShards]
}

func (c *runCounters) reduced(key []byte, in, out int) {
	s := c.shard(key)
	s.events.Add(uint64(in))
	s.reducedTo.Add(uint64(out))
}

func (c *runCounters) called(key []byte, n int) { c.shard(key).calls.Add(uint64(n)) }

// totals sums the shards.
func (c *runCounters) totals() (events, reducedTo, calls uint64) {
	for i := range c.shards {
		s := &c.shards[i]
		events += s.events.Load()
		reducedTo += s.reducedTo.Load()
		calls += s.calls.Load()
	}
	return events, reducedTo, calls
}

// RunCounts are the running totals of one event type's runs.
type RunCounts struct {
	// Tag and Name identify the event type.
	Tag  planner.Tag
	Name string
	// Events counts the decoded events handed to reduction, Reduced the
	// events reduction made of them (Events - Reduced were reduced away),
	// Calls the handler calls (one per projection per run, one per chunk
	// for a Handle handler). Runs that failed and were retried count each
	// time.
	Events, Reduced, Calls uint64
}

func (r *eventRunner[K, E]) runCounts() *runCounters { return &r.counts }

// RunCounts returns the run totals of every event type of a source of the
// program, or nil for an unknown source.
func (p *Program) RunCounts(source string) []RunCounts {
	ps, ok := p.sources[source]
	if !ok {
		return nil
	}
	out := make([]RunCounts, 0, len(ps.routes))
	for tag, rt := range ps.routes {
		c, ok := rt.runner.(interface{ runCounts() *runCounters })
		if !ok {
			continue
		}
		events, reduced, calls := c.runCounts().totals()
		out = append(out, RunCounts{Tag: tag, Name: rt.name, Events: events, Reduced: reduced, Calls: calls})
	}
	return out
}
