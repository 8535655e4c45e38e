package metamorphic

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// GroupOp is what happens to the group after a batch of produced events
// (Knobs.Group).
type GroupOp uint8

// The group's steps.
const (
	// GroupKeep: nothing happens.
	GroupKeep GroupOp = iota
	// GroupStop stops a running instance cleanly: Run returns (it drains
	// and leaves the group), then Close.
	GroupStop
	// GroupCrash cuts a running instance off: its broker connection is
	// closed first, so it neither leaves the group (the others take its
	// partitions over once its session times out) nor publishes what its
	// outboxes hold; then Run is stopped and the App closed.
	GroupCrash
	// GroupRestart starts a stopped instance again over its own store (a
	// restore reuses its rows when it gets one of its old partitions).
	GroupRestart
	// GroupJoin starts a new instance with an empty store (it restores
	// from snapshots or the whole changelog, or promotes a standby copy).
	GroupJoin
)

// String names the step.
func (o GroupOp) String() string { return nameOf(int(o), "keep", "stop", "crash", "restart", "join") }

// GroupPlan is how a group case is run: Instances instances start, each
// keeping Standbys standby copies (topology.WithStandbys) and writing a
// snapshot every SnapshotEvery commits per partition (0: none); after
// chunk i of the log, Ops[i] happens to instance Who[i] (an index into the
// running or stopped instances, taken modulo their number when the step
// runs; a step that cannot run — the last running instance, no stopped
// one — is a join or nothing, see runGroup).
type GroupPlan struct {
	Instances     int
	Standbys      int
	SnapshotEvery int
	Ops           []GroupOp
	Who           []int
}

// groupSeed tells whether seed's case runs as a group: about one in
// eight, chosen from the seed alone (not drawn from the case's random
// source, so that every other seed keeps its case). The residue is one
// whose default seeds (7, 15, 20, 28) leave the default run's only lookup,
// inner join and deleting join side (seeds 12, 13) as they were.
func groupSeed(seed uint64) bool { return (seed*0x9e3779b97f4a7c15)>>61 == 2 }

// forGroup returns the knobs a group case is generated with: the
// capabilities that need the driver's manual clock or its single App
// are off (timers and TTL, resets, evolutions, restarts of one App — the
// group's own steps replace them — and keys held behind a poison record,
// which an operator would release on their owner); table-table joins are
// off (their tables are not read back per owner yet). The rest is kept:
// several inputs, foreign and global ones, KeyBy, To, ForEach, the
// re-sequencer, poison records, failing handlers, lookups and reads of
// other inputs' tables.
func (k Knobs) forGroup() Knobs {
	k.Time, k.Resets, k.Evolve, k.Restarts, k.HoldPoison, k.Joins = false, false, false, false, false, false
	k.MaxEvents = min(k.MaxEvents, 120)
	return k
}

// genGroup draws the case's group plan from its own random source, and
// makes the retries' backoffs short: a group runs on the real clock.
func (c *Case) genGroup() {
	r := rand.New(rand.NewPCG(c.Seed, 0x6a0c))
	g := &GroupPlan{Instances: 2 + r.IntN(2), Standbys: r.IntN(2), SnapshotEvery: []int{0, 2, 5}[r.IntN(3)]}
	moves := 0
	for range c.Chunks {
		op := GroupKeep
		if moves < 4 && r.IntN(3) == 0 {
			op = GroupOp(1 + r.IntN(4))
			moves++
		}
		g.Ops = append(g.Ops, op)
		g.Who = append(g.Who, r.IntN(3))
	}
	c.Group = g
	c.Backoff, c.MaxBackoff = 5*time.Millisecond, 20*time.Millisecond
}

// String describes the plan.
func (g *GroupPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "group of %d instances, %d standbys, a snapshot every %d commits; after each chunk:", g.Instances, g.Standbys, g.SnapshotEvery)
	for i, op := range g.Ops {
		if op != GroupKeep {
			fmt.Fprintf(&b, " %d:%s(%d)", i, op, g.Who[i])
		}
	}
	return b.String()
}
