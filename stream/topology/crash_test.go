package topology_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/proptest"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The crash test of issue 5: a child process runs the driver over a long
// log with sync commits and random batch sizes, and is killed with SIGKILL
// at random moments; each restart resumes from the committed checkpoints.
// At the end the table must equal the sequential fold of the log (no event
// applied twice, none lost) and every poison record must be dead-lettered
// exactly once. 5 kills by default (the suite's 8 minutes: each kill takes
// about 3 s under the race detector on a loaded 2-core machine);
// STRAND_SOAK=1 makes it 200.

const crashSeed = 7

// crashEvents is the log's length: long enough that a run takes a good
// fraction of a second.
var crashEvents = map[bool]int{false: 60_000, true: 12_000}[raceEnabled]

// crashLog is the deterministic log both processes build: property events
// over a few hundred keys, every type and fence, and some poison.
type crashEntry struct {
	ty     int // index into proptest.PTypes, or -1 for poison
	ev     proptest.PEv
	poison string
}

func crashLog() []crashEntry {
	r := rand.New(rand.NewPCG(crashSeed, 1))
	log := make([]crashEntry, crashEvents)
	for i := range log {
		k := fmt.Sprintf("acct-%d", r.IntN(300))
		if r.IntN(500) == 0 {
			log[i] = crashEntry{ty: -1, poison: k}
			continue
		}
		ty := r.IntN(len(proptest.PTypes))
		ev := proptest.PEv{K: k, N: i, Amt: int64(r.IntN(7) - 3), Count: 1, Fence: planner.Relaxed}
		if proptest.PTypes[ty].Decl == proptest.PFenceBy {
			ev.Fence = []planner.Ordering{planner.Relaxed, planner.Acquire, planner.Release, planner.AcqRel}[r.IntN(4)]
		}
		log[i] = crashEntry{ty: ty, ev: ev}
	}
	return log
}

func crashDriver(tb testing.TB, dir string, batch func() int) (*taskDriver, func() map[string]proptest.PState, func() map[string]proptest.MState) {
	// Handlers fail too: one event in 23 fails once in each table (once
	// per process), so kills land among parked keys and retries.
	fl := &proptest.Flaky{FailOn: map[int]bool{}, Failed: map[int]bool{}}
	for n := 0; n < crashEvents; n += 23 {
		fl.FailOn[n] = true
	}
	topo, all, rows := proptest.PropertyTopology(fl)
	d := newTaskDriver(tb, topo, tdDir(dir), tdPartitions(2), tdBatchSizes(batch),
		tdStateOptions(state.WithDurability(state.Sync)))
	for _, e := range crashLog() {
		if e.ty < 0 {
			h := connector.Headers{Key: []byte(e.poison), Tag: proptest.PPlain.Tag(), Ordering: planner.Relaxed}
			d.PipeRecord("log", connector.Record{Partition: proptest.PartitionOf(e.poison, 2), Headers: h, Payload: []byte("not json")})
			continue
		}
		tdPipe(d, proptest.PTypes[e.ty].Decl, e.ev)
	}
	return d, all, rows
}

// TestCrashChild is the child process's body; it does nothing unless run by
// TestCrashResumesExactly.
func TestCrashChild(t *testing.T) {
	crashtest.Child(t, "topology-crash")
	dir := os.Getenv("STRAND_CRASH_DIR")
	seed, _ := strconv.ParseUint(os.Getenv("STRAND_CRASH_RUN"), 10, 64)
	r := rand.New(rand.NewPCG(seed, 2))
	d, _, _ := crashDriver(t, dir, func() int { return 1 + r.IntN(400) })
	fmt.Println(grouptest.CrashReady) // the parent starts its kill timer now
	d.Advance()
	for round := 0; tdParked(d, 2) > 0; round++ {
		if round > 1000 {
			t.Fatalf("%d records still parked", tdParked(d, 2))
		}
		d.AdvanceClock(time.Hour) // retries are due
		d.Advance()
	}
	if d.Lag() != 0 {
		t.Fatalf("lag %d after Advance", d.Lag())
	}
}

func TestCrashResumesExactly(t *testing.T) {
	t.Parallel() // see parallel_test.go
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	kills := crashtest.Kills(5, 200)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	run := func(i int, killAfter time.Duration) (finished bool) {
		return crashtest.Run(t, crashtest.Spec{Role: "topology-crash", Test: "TestCrashChild", Ready: grouptest.CrashReady,
			Env: []string{"STRAND_CRASH_DIR=" + dir, "STRAND_CRASH_RUN=" + strconv.Itoa(i)}}, killAfter).Finished
	}
	killed, midRun, restarts := 0, 0, 0
	window := 300 // ms after the child has piped its log; shrinks when runs finish first
	last := uint64(0)
	for i := 0; killed < kills; i++ {
		// Kills land in start-up, in batch processing and in commits.
		if !run(i, time.Duration(1+r.IntN(window))*time.Millisecond) {
			killed++
			p := committed(t, dir)
			switch {
			case p >= uint64(crashEvents):
				// Killed after its last commit: as good as finished.
			case p > last:
				midRun++
				last = p
				continue
			default:
				window = window * 3 / 2 // no progress: give the next run longer
				continue
			}
		}
		// The child finished (or all but): start over with a fresh store
		// so that kills keep landing mid-run.
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

	// Reopen in this process and compare with the sequential fold.
	d, all, rows := crashDriver(t, dir, func() int { return 100 })
	if d.Lag() != 0 || tdParked(d, 2) != 0 {
		t.Fatalf("lag %d, %d records parked after the final run", d.Lag(), tdParked(d, 2))
	}
	want, wantRows := map[string]proptest.PState{}, map[string]proptest.MState{}
	poison := 0
	for _, e := range crashLog() {
		if e.ty < 0 {
			poison++
			continue
		}
		s := want[e.ev.K]
		proptest.PTypes[e.ty].Fold(&s, e.ev)
		want[e.ev.K] = s
		proptest.FoldRows(wantRows, e.ty, e.ev)
	}
	got := all()
	if len(got) != len(want) {
		t.Fatalf("table has %d keys, reference %d", len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("key %s after %d kills: table %+v, reference %+v", k, killed, got[k], w)
		}
	}
	proptest.CheckRows(t, rows(), wantRows)
	seen := map[uint64]int{}
	for _, dl := range d.DeadLetters() {
		seen[uint64(dl.Partition)<<32|dl.Offset]++
	}
	if len(seen) != poison {
		t.Fatalf("%d distinct dead letters, %d poison records", len(seen), poison)
	}
	t.Logf("%d kills (%d advanced the checkpoint mid-run, %d fresh starts); %d keys and %d dead letters exact",
		killed, midRun, restarts, len(got), poison)
	crashtest.Coverage(t, midRun >= kills/4, "only %d of %d kills landed while the checkpoint was advancing", midRun, kills)
}

// committed returns how many records the store has committed, over both
// partitions.
func committed(t *testing.T, dir string) uint64 {
	db, err := state.Open(dir)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer db.Close()
	total := uint64(0)
	for p := range uint32(2) {
		next, _, err := db.Checkpoint("log", p)
		if err != nil {
			t.Fatal(err)
		}
		total += next
	}
	return total
}

func tdParked(d *taskDriver, partitions uint32) int {
	total := 0
	for p := range partitions {
		_, n := d.Task("log", p).Parked()
		total += n
	}
	return total
}
