package metamorphic

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
)

// Knobs turn the generator's capabilities on and off, so that a capability
// that strand gets wrong today can be left out of the default run while it
// is fixed, and turned on alone to show the defect.
type Knobs struct {
	// SharedTables lets a table be fed by several inputs (sources, foreign
	// sources, repartition topics of KeyBy steps): issue 23, defect 1.
	SharedTables bool
	// Isolation generates events that fail for good (stream.Permanent,
	// or a handler that always fails until the retries are exhausted)
	// among healthy events of their key: issue 23, defect 2.
	Isolation bool
	// Foreign adds a foreign source now and then.
	Foreign bool
	// KeyBy adds KeyBy steps (chains of up to two).
	KeyBy bool
	// To adds To steps.
	To bool
	// ForEach adds ForEach side effects.
	ForEach bool
	// Resequence turns the re-sequencer on for some inputs, with disorder
	// and duplicates.
	Resequence bool
	// Poison adds poison records and events KeyBy cannot key.
	Poison bool
	// HoldPoison uses the BlockPoisonedKey policy now and then.
	HoldPoison bool
	// Failures makes handlers fail transiently (error, panic, in-place
	// change then error).
	Failures bool
	// Restarts restarts the App between steps.
	Restarts bool
	// Time adds a table with deletes, a TTL and timers (time.go).
	Time bool
	// Resets makes some restarts a reset (topology.Reset): the App rebuilds
	// every table from the topics and publishes nothing again. A reset is
	// refused while records are parked or held: then it is a restart.
	Resets bool
	// Joins keeps a table-table join of two of the case's tables
	// (topology.JoinTables, join.go), whose sides' rows are deleted now
	// and then (topology.Delete, Case.deleters).
	Joins bool
	// Lookups makes fenced nodes read a table of their own input with
	// topology.Lookup (join.go).
	Lookups bool
	// StreamJoins makes some of those nodes read their table with a
	// stream-table join instead (topology.ProjectJoin, Left or Inner;
	// streamjoin.go).
	StreamJoins bool
	// CrossReads makes fenced nodes read a table only other inputs write,
	// and adds a global input (SourceNode.Global) to a case in three
	// (crossread.go).
	CrossReads bool
	// Evolve changes the topology at one restart (evolve.go): a table
	// is added, or a table gets a new version, and is built in the
	// background while the rest runs; the model is unchanged.
	Evolve bool
	// Group runs a share of the cases (about one in eight, chosen from
	// the seed) as 2–3 instances of one group over an in-memory Iggy
	// broker, with instances stopping, crashing, restarting and joining
	// between batches, and standby copies in some (group.go).
	Group bool
	// MaxEvents bounds the events of a case (at least 10).
	MaxEvents int
}

// DefaultKnobs returns every capability the generator has: all of them
// are run by default (SharedTables and Isolation since issue 23's fixes).
func DefaultKnobs() Knobs {
	return Knobs{Foreign: true, KeyBy: true, To: true, ForEach: true, Resequence: true, Poison: true,
		HoldPoison: true, Failures: true, Restarts: true, Resets: true, SharedTables: true, Isolation: true, Time: true, Joins: true, Lookups: true, StreamJoins: true, CrossReads: true, Evolve: true, Group: true, MaxEvents: 150}
}

// Kind is how an event type is declared.
type Kind uint8

// The kinds of event types.
const (
	// KindFence: a static fence (TypeDesc.Fence), not reduced.
	KindFence Kind = iota
	// KindFenceBy: each event's own fence (stream.WithFenceBy on Ev.Fence).
	KindFenceBy
	// KindFold: Relaxed, reduced by algebra.Fold, which keeps the ids.
	KindFold
	// KindSum: Relaxed, reduced by algebra.Sum of Ev.Amt.
	KindSum
)

// String names the kind.
func (k Kind) String() string { return nameOf(int(k), "fence", "fenceby", "fold", "sum") }

// nameOf returns names[i], or i when out of range.
func nameOf(i int, names ...string) string {
	if i < 0 || i >= len(names) {
		return strconv.Itoa(i)
	}
	return names[i]
}

// TypeDesc is one event type of an input: its tag, how it is declared and,
// for KindFence, its fence.
type TypeDesc struct {
	Tag   planner.Tag
	Kind  Kind
	Fence planner.Ordering
}

// InputDesc is one input of the topology: a strand or foreign source.
type InputDesc struct {
	Name    string
	Foreign bool
	// Reseq turns the re-sequencer on; every type of the input is
	// sequenced. DupDeadLetter dead-letters duplicates instead of
	// dropping them.
	Reseq         bool
	DupDeadLetter bool
	Types         []TypeDesc
	// SkipTag, when not 0, is a tag the source skips (SourceNode.Skip).
	SkipTag planner.Tag
	// Global: the source is global (SourceNode.Global, Case.addGlobal).
	Global bool
}

// NodeDesc is one stream of the topology: the events of one type of an
// input (Depth 0), or the same events re-keyed by one or two KeyBy steps.
type NodeDesc struct {
	ID     int
	Input  int
	Type   int // index into the input's Types
	Parent int // -1 at depth 0
	Depth  int
	// Topic is the node's physical input: the source's name, or the
	// repartition topic of the KeyBy step that made it.
	Topic string
	// Tables are the tables the node projects into (indexes).
	Tables []int
	// To publishes every event to OutTopic.
	To       bool
	OutTopic string
	ForEach  bool
	// CtxFolds: the projections are made with topology.ProjectContext
	// (odd node ids; no random draw, so seeds keep their cases).
	CtxFolds bool
	// Child is the node a KeyBy step of this node makes, or -1.
	Child int
}

// Handlers of a node: projections 0..len(Tables)-1, then these.
func (n NodeDesc) toHandler() int      { return len(n.Tables) }
func (n NodeDesc) forEachHandler() int { return len(n.Tables) + 1 }

// Desc is a topology and how to run it: the partition count of every
// input, the App's workers, WithRetry's attempts and backoffs, the poison
// policy, the inputs, the tables (by name) and the nodes (streams), parents
// before their children.
type Desc struct {
	Seed     uint64
	Parts    uint32
	Workers  int
	Attempts int
	// Backoff and MaxBackoff are WithRetry's (0: a second each).
	Backoff, MaxBackoff time.Duration
	Poison              stream.PoisonPolicy
	Inputs              []InputDesc
	Tables              []string
	Nodes               []NodeDesc
}

// RecKind is what a record of the log is.
type RecKind uint8

// The kinds of records.
const (
	RecEvent        RecKind = iota // a well-formed event
	RecDup                         // a second copy of a sequenced event
	RecSkipped                     // an event of the input's skipped tag
	RecBadPayload                  // strand headers, an undecodable payload
	RecUnknownType                 // a tag the topology does not know
	RecBadHeaders                  // strand headers missing (HeaderErr)
	RecUnclassified                // a foreign message the classifier refuses
)

// String names the kind of record.
func (k RecKind) String() string {
	return nameOf(int(k), "event", "dup", "skipped", "bad-payload", "unknown-type", "bad-headers", "unclassified")
}

// Rec is one record of the log: its input, its kind, the index of its type
// in the input's Types, and its payload.
type Rec struct {
	Input int
	Kind  RecKind
	Type  int // for RecEvent, RecDup, RecBadPayload
	Ev    Ev
}

// FailMode is how a handler fails.
type FailMode uint8

// The ways a handler fails.
const (
	FailError   FailMode = iota // returns an error before folding
	FailPanic                   // panics
	FailInPlace                 // changes the value in place, then returns an error
)

// String names the mode.
func (m FailMode) String() string { return nameOf(int(m), "error", "panic", "in-place") }

// Failure is a handler failing on one event: handler Handler of node Node
// (projections in the order of NodeDesc.Tables, then To, then ForEach).
type Failure struct {
	Node, Handler int
	Mode          FailMode
	// Times is how often a transient failure fails before it succeeds.
	Times int
	// Permanent fails with stream.Permanent; Always fails every time.
	Permanent, Always bool
}

// Case is one generated test case: a topology, its log and how it is run.
type Case struct {
	Desc
	Knobs Knobs
	// Gen is every record in true order (the order of the sequence
	// numbers for a re-sequenced input); Log the order it is published in.
	Gen, Log []Rec
	Fail     map[int]Failure
	// Plan: after piping Chunks[i] more records of Log, take Steps[i]
	// steps, then advance the clock and/or restart.
	Chunks, Steps  []int
	Clock, Restart []bool
	// Reset makes restart i a reset (Knobs.Resets), when nothing is parked
	// or held then.
	Reset []bool
	// Batches are the batch sizes, used in turn.
	Batches []int
	// Evolution (Knobs.Evolve, evolve.go): the topology changes at
	// restart EvolveAt-1 (0: never); table EvolveTable is added then
	// (EvolveAdd) or gets version 1 then.
	EvolveAt, EvolveTable int
	EvolveAdd             bool
	// Group, when not nil, runs the case as a group of instances
	// (Knobs.Group, group.go).
	Group *GroupPlan
}

// Ev is the payload of every generated event.
type Ev struct {
	ID int    `json:"id"`
	K  string `json:"k"`
	// RK are the keys the KeyBy steps give (depth 1, depth 2); "" makes
	// the step fail.
	RK    [2]string        `json:"rk"`
	Tag   planner.Tag      `json:"t,omitempty"` // for a foreign classifier
	Fence planner.Ordering `json:"f,omitempty"`
	Seq   uint64           `json:"s,omitempty"`
	Amt   int64            `json:"a,omitempty"`
	// IDs and Ks are the ids and origin keys a fold combined (nil: ID, K).
	IDs []int    `json:"ids,omitempty"`
	Ks  []string `json:"ks,omitempty"`
}

// ids returns the ids e stands for.
func (e Ev) ids() []int {
	if len(e.IDs) > 0 {
		return e.IDs
	}
	return []int{e.ID}
}

// origins returns the origin keys of the ids e stands for.
func (e Ev) origins() []string {
	if len(e.Ks) > 0 {
		return e.Ks
	}
	return []string{e.K}
}

// keyAt returns the event's key at a node's depth.
func (e Ev) keyAt(depth int) string {
	if depth == 0 {
		return e.K
	}
	return e.RK[depth-1]
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

var fences = []planner.Ordering{planner.Relaxed, planner.Acquire, planner.Release, planner.AcqRel}

// Generate turns seed into a case, with the capabilities knobs allows.
func Generate(seed uint64, knobs Knobs) *Case {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	group := knobs.Group && groupSeed(seed)
	if group {
		knobs = knobs.forGroup() // group.go
	}
	c := &Case{Knobs: knobs, Fail: map[int]Failure{}}
	c.Seed = seed
	c.Parts = uint32(1 + r.IntN(4))
	c.Workers = 1 + r.IntN(4)
	c.Attempts = 1000
	if knobs.Isolation {
		c.Attempts = 10
	}
	c.Backoff = []time.Duration{100 * time.Millisecond, time.Second}[r.IntN(2)]
	c.MaxBackoff = c.Backoff * time.Duration(1+3*r.IntN(2))
	if knobs.HoldPoison && knobs.Poison && r.IntN(4) == 0 {
		c.Poison = stream.BlockPoisonedKey
	}
	nIn := 1 + r.IntN(3)
	foreign := -1
	if knobs.Foreign && r.IntN(3) == 0 {
		foreign = r.IntN(nIn)
	}
	for i := range nIn {
		in := InputDesc{Name: fmt.Sprintf("meta/in%d", i), Foreign: i == foreign}
		in.Reseq = knobs.Resequence && r.IntN(3) == 0
		in.DupDeadLetter = in.Reseq && r.IntN(2) == 0
		for t := range 1 + r.IntN(4) {
			td := TypeDesc{Tag: planner.Tag(t + 1), Kind: Kind(r.IntN(4))}
			if td.Kind == KindFence {
				td.Fence = fences[r.IntN(4)]
			}
			in.Types = append(in.Types, td)
		}
		if r.IntN(4) == 0 {
			in.SkipTag = 90
		}
		c.Inputs = append(c.Inputs, in)
	}
	c.genNodes(r)
	c.genLog(r)
	c.genPlan(r)
	c.addGlobal() // crossread.go
	c.genEvolve()
	if group {
		c.genGroup()
	}
	return c
}

func (c *Case) genNodes(r *rand.Rand) {
	owner := map[int]string{} // table → its one physical input, without SharedTables
	pickTable := func(topic string) int {
		var ok []int
		for t := range c.Tables {
			if c.Knobs.SharedTables || owner[t] == topic {
				ok = append(ok, t)
			}
		}
		if len(ok) > 0 && (len(c.Tables) >= 5 || r.IntN(3) > 0) {
			return ok[r.IntN(len(ok))]
		}
		c.Tables = append(c.Tables, fmt.Sprintf("t%d", len(c.Tables)))
		owner[len(c.Tables)-1] = topic
		return len(c.Tables) - 1
	}
	var add func(in, ty, parent, depth int, topic string) int
	add = func(in, ty, parent, depth int, topic string) int {
		n := NodeDesc{ID: len(c.Nodes), Input: in, Type: ty, Parent: parent, Depth: depth, Topic: topic, Child: -1,
			CtxFolds: len(c.Nodes)%2 == 1}
		c.Nodes = append(c.Nodes, n)
		for range r.IntN(3) {
			if t := pickTable(topic); !slices.Contains(n.Tables, t) {
				n.Tables = append(n.Tables, t)
			}
		}
		n.To = c.Knobs.To && r.IntN(4) == 0
		if n.To {
			n.OutTopic = fmt.Sprintf("meta/out%d", n.ID)
		}
		// A sum is reduced: a side effect would see only the first id.
		n.ForEach = c.Knobs.ForEach && c.Inputs[in].Types[ty].Kind != KindSum && r.IntN(4) == 0
		keyBy := c.Knobs.KeyBy && depth < 2 && r.IntN(3) == 0
		if len(n.Tables) == 0 && !n.To && !n.ForEach && !keyBy {
			n.Tables = append(n.Tables, pickTable(topic))
		}
		c.Nodes[n.ID] = n
		if keyBy {
			child := add(in, ty, n.ID, depth+1, fmt.Sprintf("meta/rp%d", len(c.Nodes)))
			c.Nodes[n.ID].Child = child
		}
		return n.ID
	}
	for i, in := range c.Inputs {
		for t := range in.Types {
			add(i, t, -1, 0, in.Name)
		}
	}
}

func (c *Case) genLog(r *rand.Rand) {
	n := 10 + r.IntN(max(c.Knobs.MaxEvents, 10)-9)
	nKeys := make([]int, len(c.Inputs))
	for i := range nKeys {
		nKeys[i] = 1 + r.IntN(5)
	}
	seq := map[string]uint64{}
	transient := 0
	id := 0
	for range n {
		id++
		in := r.IntN(len(c.Inputs))
		inp := c.Inputs[in]
		k := fmt.Sprintf("k%d", r.IntN(nKeys[in]))
		ty := r.IntN(len(inp.Types))
		ev := Ev{ID: id, K: k, Amt: int64(1 + r.IntN(9))}
		// New keys are functions of the origin key, several origin keys
		// sharing one, so that a KeyBy interleaves them.
		ev.RK[0] = fmt.Sprintf("a%d", hash(inp.Name+k)%3)
		ev.RK[1] = fmt.Sprintf("b%d", hash(ev.RK[0])%2)
		if c.Knobs.Poison && r.IntN(25) == 0 {
			ev.RK[r.IntN(2)] = []string{noKey, panicKey}[r.IntN(2)]
		}
		if inp.Types[ty].Kind == KindFenceBy {
			ev.Fence = fences[r.IntN(4)]
		}
		rec := Rec{Input: in, Kind: RecEvent, Type: ty, Ev: ev}
		if c.Knobs.Poison && r.IntN(18) == 0 {
			switch {
			case inp.Foreign && r.IntN(2) == 0:
				rec.Kind = RecUnclassified
			case inp.Foreign:
				rec.Kind = RecUnknownType
			default:
				rec.Kind = []RecKind{RecBadPayload, RecUnknownType, RecBadHeaders}[r.IntN(3)]
			}
		} else if inp.SkipTag != 0 && r.IntN(10) == 0 {
			rec.Kind = RecSkipped
		}
		if inp.Reseq && (rec.Kind == RecEvent || rec.Kind == RecBadPayload) {
			seq[inp.Name+"/"+k]++
			rec.Ev.Seq = seq[inp.Name+"/"+k]
		}
		if rec.Kind == RecEvent {
			c.genFailure(r, rec, &transient)
		}
		c.Gen = append(c.Gen, rec)
	}
	// Publication order: each input's records in true order, disordered
	// locally and with duplicates for a re-sequenced input, interleaved
	// at random.
	per := make([][]Rec, len(c.Inputs))
	for _, rec := range c.Gen {
		per[rec.Input] = append(per[rec.Input], rec)
	}
	for i, recs := range per {
		if !c.Inputs[i].Reseq {
			continue
		}
		for pass := 0; pass < 2; pass++ {
			for j := 0; j+1 < len(recs); j++ {
				if r.IntN(3) == 0 {
					recs[j], recs[j+1] = recs[j+1], recs[j]
				}
			}
		}
		var out []Rec
		var dups []Rec
		for _, rec := range recs {
			out = append(out, rec)
			if rec.Kind == RecEvent && r.IntN(8) == 0 {
				d := rec
				d.Kind = RecDup
				dups = append(dups, d)
			}
			if len(dups) > 0 && r.IntN(3) == 0 {
				out = append(out, dups[0])
				dups = dups[1:]
			}
		}
		per[i] = append(out, dups...)
	}
	for {
		var left []int
		for i, recs := range per {
			if len(recs) > 0 {
				left = append(left, i)
			}
		}
		if len(left) == 0 {
			break
		}
		i := left[r.IntN(len(left))]
		c.Log = append(c.Log, per[i][0])
		per[i] = per[i][1:]
	}
}

// genFailure makes a handler on the event's way fail now and then. At most
// 4 transient failures of at most 2 tries each are generated, so that no
// run's retries add up to the attempts (10 with Isolation).
func (c *Case) genFailure(r *rand.Rand, rec Rec, transient *int) {
	var path []int // the nodes the event reaches
	for _, n := range c.Nodes {
		if n.Depth == 0 && n.Input == rec.Input && n.Type == rec.Type {
			for id := n.ID; id >= 0; id = c.Nodes[id].Child {
				path = append(path, id)
			}
		}
	}
	node := c.Nodes[path[r.IntN(len(path))]]
	kind := c.Inputs[node.Input].Types[node.Type].Kind
	var handlers []int
	for h := range node.Tables {
		if kind != KindSum { // a reduced sum keeps the first id only
			handlers = append(handlers, h)
		}
	}
	if node.To {
		handlers = append(handlers, node.toHandler())
	}
	if node.ForEach {
		handlers = append(handlers, node.forEachHandler())
	}
	if len(handlers) == 0 {
		return
	}
	h := handlers[r.IntN(len(handlers))]
	f := Failure{Node: node.ID, Handler: h, Mode: FailMode(r.IntN(3)), Times: 1 + r.IntN(2)}
	if h >= len(node.Tables) && f.Mode == FailInPlace {
		f.Mode = FailError
	}
	switch {
	case c.Knobs.Isolation && h != node.forEachHandler() && r.IntN(12) == 0:
		if r.IntN(2) == 0 && f.Mode != FailPanic {
			f.Permanent = true
		} else {
			f.Always = true
		}
	case c.Knobs.Failures && *transient < 4 && r.IntN(10) == 0:
		*transient++
	default:
		return
	}
	c.Fail[rec.Ev.ID] = f
}

func (c *Case) genPlan(r *rand.Rand) {
	for left := len(c.Log); left > 0; {
		n := min(left, 1+r.IntN(30))
		left -= n
		c.Chunks = append(c.Chunks, n)
		c.Steps = append(c.Steps, r.IntN(4))
		c.Clock = append(c.Clock, r.IntN(4) == 0)
		c.Restart = append(c.Restart, c.Knobs.Restarts && r.IntN(6) == 0)
		// Not a random draw: seeds keep their cases.
		c.Reset = append(c.Reset, c.Knobs.Resets && c.Restart[len(c.Restart)-1] && (len(c.Chunks)+len(c.Log))%3 != 0)
	}
	for range 1 + r.IntN(8) {
		b := 1 + r.IntN(40)
		if r.IntN(5) == 0 {
			b = 1000
		}
		c.Batches = append(c.Batches, b)
	}
}

func (d *Desc) backoff() time.Duration {
	if d.Backoff <= 0 {
		return time.Second
	}
	return d.Backoff
}

func (d *Desc) maxBackoff() time.Duration { return max(d.MaxBackoff, d.backoff()) }

// String prints the case: the topology, the run plan and the log.
func (c *Case) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "case seed=%d: %d partitions, %d workers, %d attempts, backoff %v..%v, poison policy %s, batches %v\n",
		c.Seed, c.Parts, c.Workers, c.Attempts, c.backoff(), c.maxBackoff(), c.Poison, c.Batches)
	for i, in := range c.Inputs {
		fmt.Fprintf(&b, "  input %d %q foreign=%v reseq=%v dup-dlq=%v skip=%d global=%v:", i, in.Name, in.Foreign, in.Reseq, in.DupDeadLetter, in.SkipTag, in.Global)
		for _, t := range in.Types {
			fmt.Fprintf(&b, " tag%d=%s", t.Tag, t.Kind)
			if t.Kind == KindFence {
				fmt.Fprintf(&b, "(%s)", t.Fence)
			}
		}
		b.WriteByte('\n')
	}
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "  node %d: input %d tag%d depth %d topic %q tables", n.ID, n.Input, c.Inputs[n.Input].Types[n.Type].Tag, n.Depth, n.Topic)
		for _, t := range n.Tables {
			fmt.Fprintf(&b, " %s", c.Tables[t])
		}
		if n.To {
			fmt.Fprintf(&b, " to=%q", n.OutTopic)
		}
		if n.ForEach {
			b.WriteString(" foreach")
		}
		if n.CtxFolds && len(n.Tables) > 0 {
			b.WriteString(" (ProjectContext)")
		}
		if n.Child >= 0 {
			fmt.Fprintf(&b, " keyby→node %d", n.Child)
		}
		if t, ok := c.lookups()[n.ID]; ok {
			fmt.Fprintf(&b, " reads %s (%s)", c.Tables[t], c.readKinds()[n.ID])
		}
		if t, ok := c.crossReads()[n.ID]; ok {
			fmt.Fprintf(&b, " reads-other-input's %s", c.Tables[t])
		}
		if t, ok := c.deleters()[n.ID]; ok {
			fmt.Fprintf(&b, " deletes-from %s", c.Tables[t])
		}
		b.WriteByte('\n')
	}
	for _, j := range c.joins() {
		fmt.Fprintf(&b, "  join %s: %s ⋈ %s inner=%v\n", j.Name, c.Tables[j.Left], c.Tables[j.Right], j.Inner)
	}
	if c.EvolveAt > 0 {
		what := "gets version 1"
		if c.EvolveAdd {
			what = "is added"
		}
		fmt.Fprintf(&b, "  evolution at restart %d: table %s %s (built in the background)\n", c.EvolveAt-1, c.Tables[c.EvolveTable], what)
	}
	ids := make([]int, 0, len(c.Fail))
	for id := range c.Fail {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		f := c.Fail[id]
		fmt.Fprintf(&b, "  failure: event #%d node %d handler %d %s times=%d permanent=%v always=%v\n",
			id, f.Node, f.Handler, f.Mode, f.Times, f.Permanent, f.Always)
	}
	if c.Group != nil {
		fmt.Fprintf(&b, "  %s\n", c.Group)
	}
	fmt.Fprintf(&b, "  plan: chunks %v steps %v\n  log (%d records, publication order):", c.Chunks, c.Steps, len(c.Log))
	for i, rec := range c.Log {
		if i == 400 {
			fmt.Fprintf(&b, "\n    ... %d more", len(c.Log)-i)
			break
		}
		if i%8 == 0 {
			b.WriteString("\n   ")
		}
		fmt.Fprintf(&b, " %d:#%d/%s/t%d", rec.Input, rec.Ev.ID, rec.Ev.K, c.Inputs[rec.Input].tagOf(rec))
		if rec.Ev.Seq > 0 {
			fmt.Fprintf(&b, "/s%d", rec.Ev.Seq)
		}
		if rec.Kind != RecEvent {
			fmt.Fprintf(&b, "(%s)", rec.Kind)
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// tagOf returns the tag a record carries.
func (in InputDesc) tagOf(rec Rec) planner.Tag {
	switch rec.Kind {
	case RecSkipped:
		return in.SkipTag
	case RecUnknownType:
		return unknownTag
	}
	return in.Types[rec.Type].Tag
}

// The new keys that make a KeyBy step fail: with an error, with a panic.
const (
	noKey    = ""
	panicKey = "!"
)

// unknownTag is a tag no generated topology handles.
const unknownTag planner.Tag = 250
