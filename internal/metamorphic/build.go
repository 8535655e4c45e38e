package metamorphic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// Built is a case's topology, made with the public API, and what its
// handlers observed.
type Built struct {
	Topo   *topology.Topology
	Tables []*topology.Table[string, Row]
	// Joins are the join tables of the case's joins (join.go).
	Joins []*topology.Table[string, JoinRow]
	// Decls are the declarations of each input's types; Unknown and
	// Skipped of tags the topology does not handle and skips.
	Decls            [][]*stream.Event[string, Ev]
	Unknown, Skipped []*stream.Event[string, Ev]
	// Out are the declarations of the To nodes' outputs.
	Out map[int]*stream.Event[string, Ev]
	// Time is the time table (time.go), or nil.
	Time *topology.Table[string, TRow]
	// Windows is the window table (windows.go), or nil.
	Windows *topology.WindowTable[string, []int]

	c       *Case
	mu      *sync.Mutex         // shared with the Builts made after this one
	tries   map[[3]int]int      // node, handler, event id → transient failures so far
	forEach map[int]map[int]int // node → event id → times seen
}

// errNoKey is the error of a KeyBy step given an event without a new key.
var errNoKey = errors.New("meta: the event has no key for this KeyBy step")

// Build turns c's description into a topology.
func Build(c *Case) *Built { return build(c, nil, false) }

// build turns c's description into a topology: before its evolution
// (evolve.go) when before is set. A Built made after prev shares what
// prev's handlers observed.
func build(c *Case, prev *Built, before bool) *Built {
	b := &Built{c: c, Out: map[int]*stream.Event[string, Ev]{}, mu: &sync.Mutex{}, tries: map[[3]int]int{}, forEach: map[int]map[int]int{}}
	if prev != nil {
		b.mu, b.tries, b.forEach = prev.mu, prev.tries, prev.forEach
	}
	topo := topology.New("meta", topology.WithWorkers(c.Workers),
		topology.WithRetry(c.Attempts, c.backoff(), c.maxBackoff()), topology.WithPoisonPolicy(c.Poison))
	b.Topo = topo
	for i, name := range c.Tables {
		var opts []topology.TableOption
		if c.EvolveAt > 0 && i == c.EvolveTable && !c.EvolveAdd && !before {
			opts = append(opts, topology.WithTableVersion(1))
		}
		if c.EvolveAt > 0 && i == c.EvolveTable && c.EvolveAdd && before {
			b.Tables = append(b.Tables, nil) // not in the topology yet
			continue
		}
		b.Tables = append(b.Tables, topology.NewTable[string, Row](topo, name, stream.JSON[Row](), opts...))
	}
	key := func(e Ev) string { return e.K }
	payload := stream.WithPayload(stream.JSON[Ev]())
	srcs := make([]*topology.SourceNode[string], len(c.Inputs))
	for i, in := range c.Inputs {
		var decls []*stream.Event[string, Ev]
		for _, td := range in.Types {
			opts := []stream.Option{payload}
			switch td.Kind {
			case KindFence:
				opts = append(opts, stream.WithFence(td.Fence))
			case KindFenceBy:
				opts = append(opts, stream.WithFenceBy(func(e Ev) planner.Ordering { return e.Fence }))
			case KindFold:
				opts = append(opts, stream.WithReduce(algebra.Fold(func(acc, next Ev) Ev {
					acc.IDs, acc.Ks = append(slices.Clip(acc.ids()), next.ids()...), append(slices.Clip(acc.origins()), next.origins()...)
					return acc
				})))
			case KindSum:
				opts = append(opts, stream.WithReduce(algebra.Sum(func(e Ev) int64 { return e.Amt },
					func(e Ev, n int64) Ev { e.Amt = n; return e })))
			}
			if in.Reseq {
				opts = append(opts, stream.WithSequence(func(e Ev) uint64 { return e.Seq }))
			}
			decls = append(decls, stream.DeclareFunc(td.Tag, key, opts...))
		}
		b.Decls = append(b.Decls, decls)
		b.Unknown = append(b.Unknown, stream.DeclareFunc(unknownTag, key, payload))
		skip := in.SkipTag
		if skip == 0 {
			skip = unknownTag - 1
		}
		b.Skipped = append(b.Skipped, stream.DeclareFunc(skip, key, payload))
		if in.Foreign {
			srcs[i] = topology.ForeignSource(topo, in.Name, classify)
		} else {
			srcs[i] = topology.Source[string](topo, in.Name)
		}
		if in.Global {
			srcs[i].Global() // crossread.go
		}
		if in.Reseq {
			dup := stream.DropDuplicates
			if in.DupDeadLetter {
				dup = stream.DeadLetterDuplicates
			}
			srcs[i].Resequence(topology.WithDuplicatePolicy(dup))
		}
		if in.SkipTag != 0 {
			srcs[i].Skip(in.SkipTag)
		}
	}
	streams := map[int]*topology.Stream[string, Ev]{}
	lookups, deleters, cross := c.lookups(), c.deleters(), c.crossReads()
	for _, n := range c.Nodes {
		if n.Depth == 0 {
			streams[n.ID] = topology.On(srcs[n.Input], b.Decls[n.Input][n.Type])
		}
		s := streams[n.ID]
		td := c.Inputs[n.Input].Types[n.Type]
		lt, looks := lookups[n.ID]
		if looks && c.readKinds()[n.ID] == ReadLookup {
			s.Reads(b.Tables[lt]) // a join declares its table itself
		}
		kind, dt, xt := c.readKinds()[n.ID], -1, -1
		if x, ok := cross[n.ID]; ok {
			xt = x
			s.Reads(b.Tables[xt])
		}
		if d, ok := deleters[n.ID]; ok {
			dt = d
		}
		for h, t := range n.Tables {
			if b.Tables[t] == nil {
				continue // added by the evolution
			}
			if !n.CtxFolds {
				topology.Project(s, b.Tables[t], b.fold(n, h, td))
				continue
			}
			b.projectRead(s, n, h, t, td, lt, kind, looks, t == dt, xt) // streamjoin.go
		}
		if n.To {
			depth := n.Depth
			out := stream.DeclareFunc(1, func(e Ev) string { return e.keyAt(depth) }, payload)
			b.Out[n.ID] = out
			topology.To(s, fmt.Sprintf("to%d", n.ID), n.OutTopic, out, func(_ context.Context, _ string, e Ev, emit func(Ev)) error {
				if mode, err := b.check(n.ID, n.toHandler(), e.ids()); err != nil {
					if mode == FailPanic {
						panic(err)
					}
					return err
				}
				emit(e)
				return nil
			})
		}
		if n.ForEach {
			s.ForEach(fmt.Sprintf("fe%d", n.ID), func(_ context.Context, _ string, events []Ev) error {
				var ids []int
				for _, e := range events {
					ids = append(ids, e.ids()...)
				}
				b.mu.Lock()
				if b.forEach[n.ID] == nil {
					b.forEach[n.ID] = map[int]int{}
				}
				for _, id := range ids {
					b.forEach[n.ID][id]++
				}
				b.mu.Unlock()
				if mode, err := b.check(n.ID, n.forEachHandler(), ids); err != nil {
					if mode == FailPanic {
						panic(err)
					}
					return err
				}
				return nil
			})
		}
		if n.Child >= 0 {
			child := c.Nodes[n.Child]
			depth := n.Depth
			streams[child.ID] = topology.KeyBy(s, fmt.Sprintf("kb%d", child.ID), func(e Ev) (string, error) {
				switch e.RK[depth] {
				case noKey:
					return "", errNoKey
				case panicKey:
					panic("meta: a KeyBy step panics on this event")
				}
				return e.RK[depth], nil
			}, topology.WithKeyByTopic(child.Topic))
		}
	}
	b.addTime(topo, srcs, streams, timeBase)
	b.addWindows(topo, streams)
	b.buildJoins()
	return b
}

// fold is the projection of node n's handler h: it fails as c.Fail says,
// else folds with Row.apply.
func (b *Built) fold(n NodeDesc, h int, td TypeDesc) func(*Row, Ev) error {
	return func(r *Row, e Ev) error {
		mode, err := b.check(n.ID, h, e.ids())
		if err != nil && mode == FailPanic {
			panic(err)
		}
		if err != nil && mode == FailError {
			return err
		}
		r.apply(n.Topic, n.Depth, td, e)
		return err // nil, or the failure after an in-place change
	}
}

// check returns the failure, if any, of handler h of node on the events ids.
func (b *Built) check(node, h int, ids []int) (FailMode, error) {
	for _, id := range ids {
		f, ok := b.c.Fail[id]
		if !ok || f.Node != node || f.Handler != h {
			continue
		}
		switch {
		case f.Permanent:
			return f.Mode, stream.Permanent(fmt.Errorf("meta: %sfails for good in node %d handler %d", failText(id), node, h))
		case f.Always:
			return f.Mode, fmt.Errorf("meta: %salways fails in node %d handler %d", failText(id), node, h)
		}
		k := [3]int{node, h, id}
		b.mu.Lock()
		n := b.tries[k]
		if n < f.Times {
			b.tries[k] = n + 1
		}
		b.mu.Unlock()
		if n < f.Times {
			return f.Mode, fmt.Errorf("meta: %sfails in node %d handler %d (%s, try %d of %d)", failText(id), node, h, f.Mode, n+1, f.Times)
		}
	}
	return 0, nil
}

// ForEachSeen returns how often the ForEach of node saw each event id.
func (b *Built) ForEachSeen(node int) map[int]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[int]int{}
	for id, n := range b.forEach[node] {
		out[id] = n
	}
	return out
}

// classify is the foreign sources' classifier: the payload is an Ev in
// JSON whose Tag, key, fence and sequence number it reports.
func classify(m stream.ForeignMessage) (stream.Classified[string], error) {
	var e Ev
	if err := json.Unmarshal(m.Payload, &e); err != nil {
		return stream.Classified[string]{}, fmt.Errorf("meta: the message is not an event: %w", err)
	}
	return stream.Classified[string]{Key: e.K, Tag: e.Tag, Ordering: e.Fence, Seq: e.Seq}, nil
}
