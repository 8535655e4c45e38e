package topology_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/proptest"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The re-sequencer's crash test: a child process runs the real App (the
// topologytest driver, pipelined commits, sync durability) over a log of
// sequenced events of 200 keys, 10% of them displaced by up to 64
// positions, 1% duplicated, a few numbers missing for good (GapWait: what
// follows them stays held), and is killed with SIGKILL at random moments.
// After every kill the parent reopens the store and checks it against a
// sequential model of the re-sequencer run over exactly the records below
// the committed checkpoints: every table equals the fold of the records
// let through in sequence order (none let through twice, none lost) and
// the held rows are exactly the model's. 5 kills by default (each kill takes about
// 3 s under the race detector on a loaded 2-core machine: the default run
// keeps the suite within 8 minutes); STRAND_SOAK=1 makes it
// 200.

var reseqCrashEvents = map[bool]int{false: 40_000, true: 8_000}[raceEnabled]

type reseqCrashRec struct {
	ty        int
	ev        proptest.SEv
	partition uint32
	offset    uint64
}

func reseqCrashLog() []reseqCrashRec {
	r := rand.New(rand.NewPCG(crashSeed, 11))
	seqs := map[string]uint64{}
	var log []reseqCrashRec
	for i := range reseqCrashEvents {
		k := fmt.Sprintf("acct-%d", r.IntN(200))
		seqs[k]++
		if r.IntN(4000) == 0 || (seqs[k] == 3 && (k == "acct-0" || k == "acct-1")) {
			continue // missing for good: what follows stays held
		}
		log = append(log, reseqCrashRec{ty: r.IntN(len(proptest.STypes)), ev: proptest.SEv{K: k, Seq: seqs[k], N: i, Amt: int64(r.IntN(7) - 3), Count: 1}})
	}
	for i := range log {
		if r.IntN(10) == 0 {
			j := min(i+1+r.IntN(64), len(log)-1)
			log[i], log[j] = log[j], log[i]
		}
	}
	for i := 0; i < len(log); i++ {
		if r.IntN(100) == 0 {
			log = slices.Insert(log, min(i+1+r.IntN(200), len(log)), log[i])
			i++
		}
	}
	next := [2]uint64{}
	for i := range log {
		p := xxh32.Partition([]byte(log[i].ev.K), 2)
		log[i].partition, log[i].offset = p, next[p]
		next[p]++
	}
	return log
}

func reseqCrashTopology() (*topology.Topology, *topology.Table[string, proptest.PState]) {
	topo, table, _ := proptest.ReseqTopology(nil)
	return topo, table
}

func TestReseqCrashChild(t *testing.T) {
	crashtest.Child(t, "topology-reseq-crash")
	dir := os.Getenv("STRAND_RESEQ_CRASH_DIR")
	seed, _ := strconv.ParseUint(os.Getenv("STRAND_CRASH_RUN"), 10, 64)
	r := rand.New(rand.NewPCG(seed, 12))
	topo, _ := reseqCrashTopology()
	d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(2),
		topologytest.WithBatchSizes(func() int { return 1 + r.IntN(1500) }),
		topologytest.WithOpenOptions(topology.WithDurability(topology.Sync), topology.WithPollSize(1+r.IntN(300))))
	for _, rec := range reseqCrashLog() {
		topologytest.Pipe(d, proptest.STypes[rec.ty].Decl, rec.ev)
	}
	fmt.Println(grouptest.CrashReady)
	d.Advance()
	if d.Lag() != 0 {
		t.Fatalf("lag %d after Advance", d.Lag())
	}
	d.Close()
}

// reseqModel runs the re-sequencer's rules sequentially over the records
// below the checkpoints: the expected tables and held numbers.
func reseqModel(log []reseqCrashRec, next [2]uint64) (map[string]proptest.PState, map[string][]uint64) {
	type ks struct {
		next uint64
		held map[uint64]reseqCrashRec
	}
	keys := map[string]*ks{}
	tables := map[string]proptest.PState{}
	apply := func(r reseqCrashRec) {
		s := tables[r.ev.K]
		proptest.STypes[r.ty].Fold(&s, r.ev)
		tables[r.ev.K] = s
	}
	for _, r := range log {
		if r.offset >= next[r.partition] {
			continue
		}
		k := keys[r.ev.K]
		if k == nil {
			k = &ks{next: 1, held: map[uint64]reseqCrashRec{}}
			keys[r.ev.K] = k
		}
		_, isHeld := k.held[r.ev.Seq]
		switch {
		case r.ev.Seq < k.next || isHeld:
		case r.ev.Seq == k.next:
			apply(r)
			k.next++
			for h, ok := k.held[k.next]; ok; h, ok = k.held[k.next] {
				apply(h)
				delete(k.held, k.next)
				k.next++
			}
		default:
			k.held[r.ev.Seq] = r
		}
	}
	held := map[string][]uint64{}
	for key, k := range keys {
		for s := range k.held {
			held[key] = append(held[key], s)
		}
		slices.Sort(held[key])
	}
	return tables, held
}

func checkReseqStore(t *testing.T, dir string, log []reseqCrashRec) (records uint64, held int) {
	t.Helper()
	topo, table := reseqCrashTopology()
	d := newTaskDriver(t, topo, tdDir(dir), tdPartitions(2))
	defer d.Close()
	var next [2]uint64
	for p := range uint32(2) {
		n, _, err := d.DB().Checkpoint("log", p)
		if err != nil {
			t.Fatal(err)
		}
		next[p] = n
		records += n
	}
	want, wantHeld := reseqModel(log, next)
	got := map[string]proptest.PState{}
	if err := table.Scan(context.Background(), func(k string, v proptest.PState) bool { got[k] = v; return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("checkpoints %v: table has %d keys, model %d", next, len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("checkpoints %v: key %s: table %+v, model %+v", next, k, got[k], w)
		}
	}
	for k, w := range wantHeld {
		hs, err := executor.ReadHolds(context.Background(), d.DB(), "log", xxh32.Partition([]byte(k), 2), []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, h := range hs {
			seqs = append(seqs, h.Headers.Seq)
		}
		if !slices.Equal(seqs, w) {
			t.Fatalf("checkpoints %v: key %s: held %v, model %v", next, k, seqs, w)
		}
		held += len(w)
	}
	total := 0
	for p := range uint32(2) {
		_, n, _, _ := d.Task("log", p).HeldStats()
		total += n
	}
	if total != held {
		t.Fatalf("checkpoints %v: tasks hold %d records, model %d", next, total, held)
	}
	return records, held
}

func TestReseqCrashHoldsAndTablesExact(t *testing.T) {
	t.Parallel() // see parallel_test.go
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	kills := crashtest.Kills(5, 200)
	dir := t.TempDir()
	log := reseqCrashLog()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	run := func(i int, killAfter time.Duration) bool {
		return crashtest.Run(t, crashtest.Spec{Role: "topology-reseq-crash", Test: "TestReseqCrashChild", Ready: grouptest.CrashReady,
			Env: []string{"STRAND_RESEQ_CRASH_DIR=" + dir, "STRAND_CRASH_RUN=" + strconv.Itoa(i)}}, killAfter).Finished
	}
	killed, midRun, restarts, checks := 0, 0, 0, 0
	window := 300
	last := uint64(0)
	for i := 0; killed < kills; i++ {
		finished := run(i, time.Duration(1+r.IntN(window))*time.Millisecond)
		p, held := checkReseqStore(t, dir, log)
		checks++
		if !finished {
			killed++
			switch {
			case p >= uint64(len(log)):
			case p > last:
				midRun++
				last = p
				_ = held
				continue
			default:
				window = window * 3 / 2
				continue
			}
		}
		restarts++
		last = 0
		window = max(window*2/3, 20)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run(-1, 0)
	p, held := checkReseqStore(t, dir, log)
	if p != uint64(len(log)) || held == 0 {
		t.Fatalf("final run: %d of %d records committed, %d held (the log has numbers missing for good)", p, len(log), held)
	}
	t.Logf("%d kills (%d advanced the checkpoint mid-run, %d fresh starts), %d checks of tables and holds against the model; %d held at the end",
		killed, midRun, restarts, checks, held)
	crashtest.Coverage(t, midRun >= kills/4, "only %d of %d kills landed while the checkpoint was advancing", midRun, kills)
}
