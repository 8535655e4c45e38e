package topology_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// PEv is the property test's event. Count is how many log events a
// (reduced) event stands for.
type PEv struct {
	K     string
	N     int
	Amt   int64
	Count int64
	Fence planner.Ordering // for the FenceBy type
}

// PState is the key's value. Each field is order-sensitive exactly where
// strand promises an order: per-type chains are sensitive to the order of
// one type's events, and Obs records, at every fence event, how many events
// of the key were applied before it, which only depends on the planner
// keeping fences in place.
type PState struct {
	Applied int64
	Balance int64
	Flag    int64
	Chain3  uint64
	Chain5  uint64
	Obs     uint64
}

func mix(h uint64, xs ...int64) uint64 {
	f := fnv.New64a()
	fmt.Fprint(f, h)
	for _, x := range xs {
		fmt.Fprint(f, ",", x)
	}
	return f.Sum64()
}

func pkey(e PEv) string { return e.K }

var (
	pAcquire = stream.DeclareFunc(1, pkey, stream.WithFence(planner.Acquire))
	pSum     = stream.DeclareFunc(2, pkey, stream.WithReduce(algebra.Fold(func(a, b PEv) PEv {
		a.Amt += b.Amt
		a.Count += b.Count
		return a
	})))
	pPlain   = stream.DeclareFunc(3, pkey)
	pRelease = stream.DeclareFunc(4, pkey, stream.WithFence(planner.Release))
	pFenceBy = stream.DeclareFunc(5, pkey, stream.WithFenceBy(func(e PEv) planner.Ordering { return e.Fence }))
	pFlag    = stream.DeclareFunc(6, pkey, stream.WithReduce(algebra.DedupFunc(func(a, b PEv) bool { return a.Amt == b.Amt })))
	pAcqRel  = stream.DeclareFunc(7, pkey, stream.WithFence(planner.AcqRel))
)

// The folds, shared by the topology and the sequential reference.
func foldAcquire(s *PState, e PEv) { s.Obs = mix(s.Obs, 1, int64(e.N), s.Applied); s.Applied++ }
func foldSum(s *PState, e PEv)     { s.Balance += e.Amt; s.Applied += e.Count }
func foldPlain(s *PState, e PEv)   { s.Chain3 = mix(s.Chain3, int64(e.N)); s.Applied++ }
func foldRelease(s *PState, e PEv) { s.Obs = mix(s.Obs, 4, int64(e.N), s.Applied); s.Applied++ }
func foldFenceBy(s *PState, e PEv) {
	s.Chain5 = mix(s.Chain5, int64(e.N))
	if e.Fence != planner.Relaxed {
		s.Obs = mix(s.Obs, 5, int64(e.N), s.Applied)
	}
	s.Applied++
}
func foldFlag(s *PState, e PEv)   { s.Flag = e.Amt }
func foldAcqRel(s *PState, e PEv) { s.Obs = mix(s.Obs, 7, int64(e.N), s.Applied); s.Applied++ }

type pType struct {
	decl *stream.Event[string, PEv]
	fold func(*PState, PEv)
}

var pTypes = []pType{
	{pAcquire, foldAcquire}, {pSum, foldSum}, {pPlain, foldPlain}, {pRelease, foldRelease},
	{pFenceBy, foldFenceBy}, {pFlag, foldFlag}, {pAcqRel, foldAcqRel},
}

// flaky makes a fold fail the first time it sees chosen events, so that
// parking and retries are part of every property run.
type flaky struct {
	mu     sync.Mutex
	failOn map[int]bool
	failed map[int]bool
}

var errFlaky = errors.New("flaky")

func (f *flaky) check(e PEv) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn[e.N] && !f.failed[e.N] {
		f.failed[e.N] = true
		return errFlaky
	}
	return nil
}

// propertyTopology projects every type into two tables: "state", whose
// alias-free value fails before folding, and "rows", whose value (pointer,
// map, slices) is changed in place and fails after folding, the failures
// chosen by fl (each event fails once per table, at most).
func propertyTopology(fl *flaky) (*topology.Topology, func() map[string]PState, func() map[string]MState) {
	topo := topology.New("property", topology.WithWorkers(3), topology.WithRetry(1000, time.Second, time.Second))
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, PState](topo, "state", stream.JSON[PState]())
	rows := topology.NewTable[string, MState](topo, "rows", stream.JSON[MState]())
	after := &flaky{failOn: fl.failOn, failed: map[int]bool{}}
	for ty, pt := range pTypes {
		fold := pt.fold
		s := topology.On(src, pt.decl)
		topology.Project(s, table, func(s *PState, e PEv) error {
			if err := fl.check(e); err != nil {
				return err
			}
			fold(s, e)
			return nil
		})
		topology.Project(s, rows, func(m *MState, e PEv) error {
			m.fold(ty, e)
			return after.check(e)
		})
	}
	st := &stateTable{table: table}
	return topo, st.all, func() map[string]MState {
		out := map[string]MState{}
		if err := rows.Scan(context.Background(), func(k string, v MState) bool { out[k] = v; return true }); err != nil {
			panic(err)
		}
		return out
	}
}

// foldRows is the sequential reference of the "rows" table.
func foldRows(want map[string]MState, ty int, e PEv) {
	m := want[e.K]
	m.fold(ty, e)
	want[e.K] = m
}

// checkRows compares the "rows" table with its reference.
func checkRows(tb interface{ Fatalf(string, ...any) }, got, want map[string]MState) {
	if len(got) != len(want) {
		tb.Fatalf("rows has %d keys, the fold %d", len(got), len(want))
	}
	for k, w := range want {
		if g := got[k]; !equalMState(g, w) {
			tb.Fatalf("rows key %s:\n got  %s\n want %s", k, show(g), show(w))
		}
	}
}

type stateTable struct {
	table interface {
		Scan(ctx context.Context, fn func(k string, v PState) bool) error
	}
}

func (s *stateTable) all() map[string]PState {
	out := map[string]PState{}
	err := s.table.Scan(context.Background(), func(k string, v PState) bool {
		out[k] = v
		return true
	})
	if err != nil {
		panic(err)
	}
	return out
}

// TestPropertyTablesEqualSequentialFold runs random logs (several keys,
// seven types with all four fences, a per-event fence, associative,
// idempotent and non-associative types, poison records, handler failures)
// through the driver with random batch boundaries, partitions and restarts,
// and checks the table equals a naive sequential fold in log order.
func TestPropertyTablesEqualSequentialFold(t *testing.T) {
	t.Parallel() // see parallel_test.go
	rapid.Check(t, func(rt *rapid.T) {
		nkeys := rapid.IntRange(1, 5).Draw(rt, "keys")
		n := rapid.IntRange(0, soakLen(60, 120)).Draw(rt, "events")
		fl := &flaky{failOn: map[int]bool{}, failed: map[int]bool{}}
		type entry struct {
			ty     int // index into pTypes, or -1 for poison
			ev     PEv
			poison string
		}
		var log []entry
		for i := range n {
			k := fmt.Sprintf("k%d", rapid.IntRange(0, nkeys-1).Draw(rt, "key"))
			if rapid.IntRange(0, 30).Draw(rt, "poison?") == 0 {
				log = append(log, entry{ty: -1, poison: k})
				continue
			}
			ty := rapid.IntRange(0, len(pTypes)-1).Draw(rt, "type")
			ev := PEv{K: k, N: i, Amt: int64(rapid.IntRange(-3, 3).Draw(rt, "amt")), Count: 1, Fence: planner.Relaxed}
			if pTypes[ty].decl == pFenceBy {
				ev.Fence = rapid.SampledFrom([]planner.Ordering{planner.Relaxed, planner.Acquire, planner.Release, planner.AcqRel}).Draw(rt, "fence")
			}
			if rapid.IntRange(0, 15).Draw(rt, "fail?") == 0 {
				fl.failOn[i] = true
			}
			log = append(log, entry{ty: ty, ev: ev})
		}
		sizes := rapid.SliceOfN(rapid.IntRange(1, 40), 1, 20).Draw(rt, "batch sizes")
		partitions := uint32(rapid.IntRange(1, 3).Draw(rt, "partitions"))
		restartEvery := rapid.IntRange(0, 6).Draw(rt, "restart every")

		// Reference: a naive sequential fold in log order.
		want, wantRows := map[string]PState{}, map[string]MState{}
		for _, e := range log {
			if e.ty < 0 {
				continue
			}
			s := want[e.ev.K]
			pTypes[e.ty].fold(&s, e.ev)
			want[e.ev.K] = s
			foldRows(wantRows, e.ty, e.ev)
		}

		dir, err := os.MkdirTemp("", "strand-property-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		topo, all, rows := propertyTopology(fl)
		next := 0
		d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(partitions),
			topologytest.WithBatchSizes(func() int { s := sizes[next%len(sizes)]; next++; return s }))
		defer d.Close()
		for _, e := range log {
			if e.ty < 0 {
				h := connector.Headers{Key: []byte(e.poison), Tag: pPlain.Tag(), Ordering: planner.Relaxed}
				p := partitionOf(e.poison, partitions)
				d.PipeRecord("log", connector.Record{Partition: p, Headers: h, Payload: []byte("not json")})
				continue
			}
			topologytest.Pipe(d, pTypes[e.ty].decl, e.ev)
		}
		steps := 0
		for round := 0; d.Lag() > 0 || parked(d, partitions) > 0; round++ {
			if round > 10000 {
				rt.Fatalf("no progress: lag %d, parked %d", d.Lag(), parked(d, partitions))
			}
			if !d.Step() {
				d.AdvanceClock(time.Second)
			}
			steps++
			if restartEvery > 0 && steps%restartEvery == 0 {
				d.Restart()
			}
		}
		got := all()
		for k, w := range want {
			if g := got[k]; g != w {
				rt.Fatalf("key %s: table %+v, sequential fold %+v", k, g, w)
			}
		}
		if len(got) != len(want) {
			rt.Fatalf("table has %d keys, fold %d", len(got), len(want))
		}
		checkRows(rt, rows(), wantRows)
		poison := 0
		for _, e := range log {
			if e.ty < 0 {
				poison++
			}
		}
		if dls := d.DeadLetters(); len(dls) != poison {
			rt.Fatalf("%d dead letters, %d poison records", len(dls), poison)
		}
	})
}

func parked(d *topologytest.Driver, _ uint32) int {
	_, n := d.Parked()
	return n
}

func partitionOf(k string, n uint32) uint32 { return xxh32.Partition([]byte(k), n) }

// soakLen is the most events a property test's log holds: normal in the
// default run, soak with STRAND_SOAK set (crashtest.Soak), where
// internal/testrun also tries ten times the cases. The default run's logs
// are shorter so that the newcomer's suite stays within 8 minutes (issue
// 33 item 7, docs/design.md §17): the time of a case grows with its log
// (more steps, restarts and store openings), while every shape a case can
// take (batchings, partitions, restarts, each kind of fault) is drawn as
// often as before.
func soakLen(normal, soak int) int {
	if crashtest.Soak() {
		return soak
	}
	return normal
}
