package topology_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// The reference of window tables: per partition, the stream time in log
// order; per key, its windows; folded one event at a time on the
// documented rules (docs/design.md §18, "Windows").

type wrWin struct {
	start, end int64 // seconds
	agg        grouptest.WAgg
	closed     bool
}

type wrPart struct {
	st, anchor int64 // seconds
	last       time.Time
	set        bool
}

type wrModel struct {
	shape                  string // tumbling, hopping, session
	size, adv, gap         int64
	grace, retention, idle int64
	parts                  map[uint32]*wrPart
	keys                   map[string][]wrWin
	part                   func(k string) uint32
	finals                 []grouptest.WFinal
	late                   []grouptest.WEv
}

func (m *wrModel) windowsOf(et int64) [][2]int64 {
	var out [][2]int64
	adv := m.size
	if m.shape == "hopping" {
		adv = m.adv
	}
	base := grouptest.WBase.Unix() // windows are aligned to the Unix epoch
	abs := et + base
	lo := abs - m.size
	q := lo / adv
	if lo%adv != 0 && lo < 0 {
		q--
	}
	for s := q * adv; s <= abs; s += adv {
		if abs >= s && abs < s+m.size {
			out = append(out, [2]int64{s - base, s - base + m.size})
		}
	}
	return out
}

// startStep advances the idle partitions' stream time to the clock now.
func (m *wrModel) startStep(now time.Time) {
	if m.idle <= 0 {
		return
	}
	for _, p := range m.parts {
		if !p.set {
			continue
		}
		if idle := int64(now.Sub(p.last)/time.Second) - m.idle; idle > 0 {
			p.st = max(p.st, p.anchor+idle)
		}
	}
}

func (m *wrModel) event(now time.Time, e grouptest.WEv) {
	pi := m.part(e.K)
	p := m.parts[pi]
	if p == nil {
		p = &wrPart{}
		m.parts[pi] = p
	}
	if !p.set {
		p.st = e.At
	}
	p.st, p.set = max(p.st, e.At), true
	p.anchor, p.last = p.st, now
	st := p.st
	open := func(end int64) bool { return end+m.grace > st }
	ws := m.keys[e.K]
	if m.shape == "session" {
		var kept, merged []wrWin
		for _, w := range ws {
			if !w.closed && open(w.end) && e.At > w.start-m.gap && e.At < w.end {
				merged = append(merged, w)
			} else {
				kept = append(kept, w)
			}
		}
		if len(merged) == 0 && !open(e.At+m.gap) {
			m.late = append(m.late, e)
			return
		}
		nw := wrWin{start: e.At, end: e.At + m.gap, agg: grouptest.WAgg{Sum: e.N, Count: 1}}
		for _, w := range merged {
			nw.start, nw.end = min(nw.start, w.start), max(nw.end, w.end)
			nw.agg.Sum += w.agg.Sum
			nw.agg.Count += w.agg.Count
		}
		kept = append(kept, nw)
		slices.SortFunc(kept, func(a, b wrWin) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end)) })
		m.keys[e.K] = kept
		return
	}
	added := false
	for _, sp := range m.windowsOf(e.At) {
		if !open(sp[1]) {
			continue
		}
		i := slices.IndexFunc(ws, func(w wrWin) bool { return w.start == sp[0] })
		if i >= 0 && ws[i].closed {
			continue
		}
		if i < 0 {
			ws = append(ws, wrWin{start: sp[0], end: sp[1]})
			i = len(ws) - 1
		}
		ws[i].agg.Sum += e.N
		ws[i].agg.Count++
		added = true
	}
	slices.SortFunc(ws, func(a, b wrWin) int { return int(a.start - b.start) })
	m.keys[e.K] = ws
	if !added {
		m.late = append(m.late, e)
	}
}

// settle closes and removes the windows the stream times reached.
func (m *wrModel) settle() {
	for k, ws := range m.keys {
		p := m.parts[m.part(k)]
		kept := ws[:0]
		for _, w := range ws {
			if !w.closed && w.end+m.grace <= p.st {
				w.closed = true
				m.finals = append(m.finals, grouptest.WFinal{K: k, Start: w.start, End: w.end, Sum: w.agg.Sum, Count: w.agg.Count})
			}
			if w.closed && w.end+m.retention <= p.st {
				continue
			}
			kept = append(kept, w)
		}
		if len(kept) == 0 {
			delete(m.keys, k)
		} else {
			m.keys[k] = kept
		}
	}
}

func TestPropertyWindows(t *testing.T) {
	t.Parallel()
	cases, first := 8, uint64(1)
	if os.Getenv("STRAND_SOAK") != "" {
		cases = 400
	}
	if s := os.Getenv("STRAND_WINDOW_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STRAND_WINDOW_SEED=%q: %v", s, err)
		}
		cases, first = 1, n
	}
	for seed := first; seed < first+uint64(cases); seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { windowProperty(t, seed) })
	}
}

func windowProperty(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 47))
	in := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	m := &wrModel{parts: map[uint32]*wrPart{}, keys: map[string][]wrWin{}}
	m.shape = []string{"tumbling", "hopping", "session"}[in(0, 2)]
	m.size, m.gap = int64(in(5, 40)), int64(in(3, 20))
	m.adv = int64(in(1, int(m.size)))
	m.grace = int64(in(0, 20))
	m.retention = m.grace + int64(in(0, 60))
	if in(0, 1) == 1 {
		m.idle = int64(in(10, 120))
	}
	deadLetter := in(0, 2) == 0
	var windows topology.Windows
	opts := []topology.WindowOption{topology.WithGrace(time.Duration(m.grace) * time.Second),
		topology.WithRetention(time.Duration(m.retention) * time.Second)}
	switch m.shape {
	case "tumbling":
		windows = topology.Tumbling(time.Duration(m.size) * time.Second)
	case "hopping":
		windows = topology.Hopping(time.Duration(m.size)*time.Second, time.Duration(m.adv)*time.Second)
	default:
		windows = topology.Sessions(time.Duration(m.gap) * time.Second)
		opts = append(opts, topology.WithMerge(func(a, b grouptest.WAgg) grouptest.WAgg {
			return grouptest.WAgg{Sum: a.Sum + b.Sum, Count: a.Count + b.Count}
		}))
	}
	if m.idle > 0 {
		opts = append(opts, topology.WithIdleness(time.Duration(m.idle)*time.Second))
	}
	if deadLetter {
		opts = append(opts, topology.WithLateEvents(topology.LateDeadLetter))
	}
	topo, wt := grouptest.WTopology(windows, opts...)
	nkeys, nsteps := in(1, 5), in(1, 10)
	partitions := uint32(in(1, 3))
	sizes := make([]int, in(1, 8))
	for i := range sizes {
		sizes[i] = in(1, 6)
	}
	restart := in(0, 5)
	dir := t.TempDir()
	next := 0
	d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(partitions),
		topologytest.WithBatchSizes(func() int { s := sizes[next%len(sizes)]; next++; return s }))
	defer d.Close()
	m.part = func(k string) uint32 { return d.PartitionOf([]byte(k)) }
	desc := fmt.Sprintf("seed %d (STRAND_WINDOW_SEED=%[1]d replays it), %s size %d adv %d gap %d grace %d retention %d idle %d dead-letter %v, %d partitions",
		seed, m.shape, m.size, m.adv, m.gap, m.grace, m.retention, m.idle, deadLetter, partitions)

	var late uint64
	steps, seq := 0, 0
	eventClock := int64(in(0, 100))
	for range nsteps {
		d.AdvanceClock(time.Duration(in(0, 200)) * time.Second)
		now := d.Now()
		m.startStep(now)
		var events []grouptest.WEv
		for range in(0, 10) {
			eventClock += int64(in(0, 8))
			seq++
			events = append(events, grouptest.WEv{K: fmt.Sprintf("k%d", in(0, nkeys-1)), At: eventClock - int64(in(0, 40)), N: int64(in(1, 9)), Seq: seq})
		}
		for _, e := range events {
			m.event(now, e)
		}
		m.settle()
		topologytest.Pipe(d, grouptest.WEvents, events...)
		for d.Step() {
			steps++
			if restart > 0 && steps%restart == 0 {
				late += wCounters(d).LateEvents
				d.Restart()
			}
		}
		ctx := context.Background()
		for k := range nkeys {
			key := fmt.Sprintf("k%d", k)
			got, err := wt.Range(ctx, key, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			want := m.keys[key]
			ok := len(got) == len(want)
			for i := 0; ok && i < len(got); i++ {
				g, w := got[i], want[i]
				ok = grouptest.WSec(g.Start) == w.start && grouptest.WSec(g.End) == w.end && g.Value == w.agg && g.Final == w.closed
			}
			if !ok {
				t.Fatalf("%s: at %v key %s: windows %+v, reference %+v", desc, now.Sub(grouptest.WBase), key, got, want)
			}
		}
	}
	late += wCounters(d).LateEvents
	got := wOutput(t, d)
	sortFinals := func(fs []grouptest.WFinal) {
		slices.SortFunc(fs, func(a, b grouptest.WFinal) int {
			if a.K != b.K {
				if a.K < b.K {
					return -1
				}
				return 1
			}
			return int(a.Start - b.Start)
		})
	}
	want := slices.Clone(m.finals)
	sortFinals(got)
	sortFinals(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: final results %+v, reference %+v (each exactly once)", desc, got, want)
	}
	if deadLetter {
		var seqs []int
		for _, l := range d.DeadLetters() {
			var e grouptest.WEv
			if err := json.Unmarshal(l.Payload, &e); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, e.Seq)
		}
		var wantSeqs []int
		for _, e := range m.late {
			wantSeqs = append(wantSeqs, e.Seq)
		}
		slices.Sort(seqs)
		if !slices.Equal(seqs, wantSeqs) {
			t.Fatalf("%s: dead-lettered late events %v, reference %v", desc, seqs, wantSeqs)
		}
	} else if late != uint64(len(m.late)) {
		t.Fatalf("%s: %d late events counted, reference %d", desc, late, len(m.late))
	}
}
