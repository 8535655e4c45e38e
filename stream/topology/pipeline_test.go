package topology_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/state"
)

// Task.Submit overlaps a batch's commit with the next batch's work: the
// table must still equal the sequential fold, with restarts between runs
// of random batch sizes, and each batch's Result must match its records.
func TestSubmitPipelinedEqualsFold(t *testing.T) {
	ctx := context.Background()
	ops := bankWorkload(20_000, 300, 7)
	ref := bankReference(ops)
	decls := newBankDecls(true)
	topo, tab := bankTopology(decls)
	prog, err := topo.Build()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	recs := bankRecords(t, decls, ops, 0)
	r := rand.New(rand.NewPCG(1, 2))
	next := 0
	for restart := 0; next < len(recs); restart++ {
		db, err := state.Open(dir, state.WithDurability(state.NoSync), state.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if err := prog.Attach(db); err != nil {
			t.Fatal(err)
		}
		task, err := prog.NewTask(ctx, db, prog.Sources()[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := int(task.Next()); got != next {
			t.Fatalf("restart %d: task resumes at %d, want %d", restart, got, next)
		}
		var pend []*executor.Pending
		var sizes []int
		for b := 0; b < 1+r.IntN(30) && next < len(recs); b++ {
			n := min(1+r.IntN(700), len(recs)-next)
			p, err := task.Submit(ctx, recs[next:next+n])
			if err != nil {
				t.Fatal(err)
			}
			pend, sizes = append(pend, p), append(sizes, n)
			next += n
			if task.Next() != uint64(next) {
				t.Fatalf("Next after Submit = %d, want %d", task.Next(), next)
			}
		}
		for i, p := range pend {
			res, err := p.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if res.Records != sizes[i] || len(res.Applied) != sizes[i] {
				t.Fatalf("batch %d: %d records, %d applied; want %d", i, res.Records, len(res.Applied), sizes[i])
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db, err := state.Open(dir, state.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := prog.Attach(db); err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = tab.Scan(ctx, func(k uint64, v balance) bool {
		seen++
		if ref[k] != v {
			t.Fatalf("account %d: %+v, reference %+v", k, v, ref[k])
		}
		return true
	})
	if err != nil || seen != len(ref) {
		t.Fatalf("scan: %v, %d accounts, reference %d", err, seen, len(ref))
	}
}

// When the store fails under a pipelined commit, no later batch commits
// and the Task refuses further work; after reopening, the table equals the
// fold of exactly the events up to the stored checkpoint.
func TestSubmitStopsAfterFailedCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := bankWorkload(6_000, 50, 3)
	decls := newBankDecls(true)
	topo, tab := bankTopology(decls)
	prog, err := topo.Build()
	if err != nil {
		t.Fatal(err)
	}
	recs := bankRecords(t, decls, ops, 0)
	for trial := range 20 {
		dir := t.TempDir()
		db, err := state.Open(dir, state.WithDurability(state.NoSync), state.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if err := prog.Attach(db); err != nil {
			t.Fatal(err)
		}
		task, err := prog.NewTask(ctx, db, prog.Sources()[0], 0, executor.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		var pend []*executor.Pending
		failed := false
		closed := make(chan struct{})
		for i := 0; i < len(recs); i += 500 {
			if i == 500*(1+trial%6) {
				// The store goes away while a commit may be in flight.
				go func() { _ = db.Close(); close(closed) }()
			}
			p, err := task.Submit(ctx, recs[i:min(i+500, len(recs))])
			if err != nil {
				failed = true
				// Every later call fails too, without committing.
				if _, err2 := task.Submit(ctx, recs[i:min(i+500, len(recs))]); err2 == nil {
					t.Fatal("Submit after a failure succeeded")
				}
				break
			}
			pend = append(pend, p)
		}
		for _, p := range pend {
			if _, err := p.Wait(); err != nil {
				failed = true
				if !errors.Is(err, executor.ErrTaskBroken) {
					t.Fatalf("Wait = %v, want ErrTaskBroken", err)
				}
			}
		}
		if !failed {
			t.Fatal("closing the store failed nothing")
		}
		<-closed

		db, err = state.Open(dir, state.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if err := prog.Attach(db); err != nil {
			t.Fatal(err)
		}
		next, _, err := db.Checkpoint(prog.Sources()[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		ref := bankReference(ops[:next])
		seen := 0
		err = tab.Scan(ctx, func(k uint64, v balance) bool {
			seen++
			if ref[k] != v {
				t.Fatalf("trial %d: account %d: %+v, fold up to checkpoint %d: %+v", trial, k, v, next, ref[k])
			}
			return true
		})
		if err != nil || seen != len(ref) {
			t.Fatalf("trial %d: scan: %v, %d accounts, fold up to checkpoint %d has %d", trial, err, seen, next, len(ref))
		}
		_ = db.Close()
	}
}

// The SIGKILL test of Task.Submit: a child process submits the accounts
// workload in random batches with sync commits, each batch executing while
// the one before it commits, and is killed at random moments. After every
// kill the store must hold exactly the fold of the events up to its
// checkpoint; at the end, the fold of the whole log. 8 kills (100 with
// STRAND_SOAK=1).

var submitCrashOps = map[bool]int{false: 200_000, true: 20_000}[raceEnabled]

func submitCrashWorkload() (bankDecls, []bankOp) {
	return newBankDecls(true), bankWorkload(submitCrashOps, 400, 11)
}

func TestSubmitCrashChild(t *testing.T) {
	crashtest.Child(t, "topology-submit-crash")
	dir := os.Getenv("STRAND_SUBMIT_CRASH_DIR")
	ctx := context.Background()
	decls, ops := submitCrashWorkload()
	topo, _ := bankTopology(decls)
	prog, err := topo.Build()
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(dir, state.WithDurability(state.Sync), state.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := prog.Attach(db); err != nil {
		t.Fatal(err)
	}
	task, err := prog.NewTask(ctx, db, prog.Sources()[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	recs := bankRecords(t, decls, ops, 0)
	seed, _ := strconv.ParseUint(os.Getenv("STRAND_SUBMIT_CRASH_RUN"), 10, 64)
	r := rand.New(rand.NewPCG(seed, 5))
	fmt.Println(grouptest.CrashReady)
	var pend *executor.Pending
	for next := int(task.Next()); next < len(recs); {
		n := min(1+r.IntN(800), len(recs)-next)
		p, err := task.Submit(ctx, recs[next:next+n])
		if err != nil {
			t.Fatal(err)
		}
		if pend != nil {
			if _, err := pend.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		pend, next = p, next+n
	}
	if pend != nil {
		if _, err := pend.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSubmitCrashResumesExactly(t *testing.T) {
	t.Parallel() // see parallel_test.go
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	kills := crashtest.Kills(8, 100)
	ctx := context.Background()
	dir := t.TempDir()
	decls, ops := submitCrashWorkload()
	topo, tab := bankTopology(decls)
	prog, err := topo.Build()
	if err != nil {
		t.Fatal(err)
	}
	// check opens the store and compares the table with the fold of the
	// events up to the stored checkpoint.
	check := func(what string) uint64 {
		db, err := state.Open(dir, state.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := prog.Attach(db); err != nil {
			t.Fatal(err)
		}
		next, _, err := db.Checkpoint(prog.Sources()[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		ref := bankReference(ops[:next])
		seen := 0
		err = tab.Scan(ctx, func(k uint64, v balance) bool {
			seen++
			if ref[k] != v {
				t.Fatalf("%s: account %d: %+v, fold up to checkpoint %d: %+v", what, k, v, next, ref[k])
			}
			return true
		})
		if err != nil || seen != len(ref) {
			t.Fatalf("%s: scan: %v, %d accounts, fold up to checkpoint %d has %d", what, err, seen, next, len(ref))
		}
		return next
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
	run := func(i int, killAfter time.Duration) (finished bool) {
		return crashtest.Run(t, crashtest.Spec{Role: "topology-submit-crash", Test: "TestSubmitCrashChild", Ready: grouptest.CrashReady,
			Env: []string{"STRAND_SUBMIT_CRASH_DIR=" + dir, "STRAND_SUBMIT_CRASH_RUN=" + strconv.Itoa(i)}}, killAfter).Finished
	}
	killed, advanced := 0, 0
	last := uint64(0)
	for i := 0; killed < kills; i++ {
		if run(i, time.Duration(1+r.IntN(20))*time.Millisecond) {
			break // finished before the kill
		}
		killed++
		next := check(fmt.Sprintf("after kill %d", killed))
		if next > last {
			advanced++
		}
		last = next
		if next == uint64(len(ops)) {
			break
		}
	}
	run(-1, 0)
	if next := check("final"); next != uint64(len(ops)) {
		t.Fatalf("final checkpoint %d, want %d", next, len(ops))
	}
	t.Logf("%d kills, %d of them after the checkpoint advanced", killed, advanced)
}
