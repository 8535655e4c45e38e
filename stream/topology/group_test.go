package topology_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// instance is one App of a group, running.
type instance struct {
	name string
	dir  string
	app  *topology.App
	n    *topology.Table[string, int64]
	stop context.CancelFunc
	done chan error
}

func startInstance(t *testing.T, cl *iggy.Client, name, dir string, opts ...topology.OpenOption) *instance {
	t.Helper()
	topo, n, _ := counter("grp")
	g := cl.Group("s", iggy.WithSessionTimeout(2*time.Second))
	app, err := topology.Open(context.Background(), topo, cl, dir,
		append([]topology.OpenOption{topology.WithGroup(g), topology.WithQueryAddr("instance-" + name),
			topology.WithLogger(testLogger(t, name))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{name: name, dir: dir, app: app, n: n, stop: cancel, done: make(chan error, 1)}
	go func() { err := app.Run(ctx); t.Logf("%s: Run returned %v", name, err); in.done <- err }()
	return in
}

// close stops the instance's Run (it leaves the group) and closes it.
func (in *instance) close(t *testing.T) {
	t.Helper()
	in.stop()
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("%s: Run = %v", in.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: Run did not return", in.name)
	}
	if err := in.app.Close(); err != nil {
		t.Errorf("%s: Close = %v", in.name, err)
	}
}

// settled waits until every partition of 0..n-1 is served by exactly one
// of the instances, and every serving one has processed its partition to
// the end of the log.
func settled(t *testing.T, n uint32, ins ...*instance) map[uint32]*instance {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		owner := map[uint32]*instance{}
		ok := true
		for p := range n {
			for _, in := range ins {
				if in.app.Phase(p) == topology.Serving {
					if owner[p] != nil {
						ok = false
					}
					owner[p] = in
				}
			}
			if owner[p] == nil {
				ok = false
			}
		}
		served := map[*instance]int{}
		for _, in := range owner {
			served[in]++
		}
		for _, in := range ins {
			if served[in] < int(n)/len(ins) { // not balanced yet
				ok = false
			}
		}
		if ok {
			caught := true
			for _, in := range ins {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				if err := in.app.WaitCaughtUp(ctx); err != nil {
					caught = false
				}
				cancel()
			}
			if caught {
				return owner
			}
		}
		if time.Now().After(deadline) {
			for _, in := range ins {
				t.Logf("%s: %+v", in.name, in.app.Ownership())
			}
			t.Fatal("the group did not settle")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// publishCounts publishes events with amounts 1..m over keys k0..k(keys-1)
// and adds them to want.
func publishCounts(t *testing.T, cl *iggy.Client, decl *stream.Event[string, Ev], from, m, keys int, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	pub, err := iggy.NewPublisher(ctx, cl, "s", "log")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close(ctx) }()
	for i := from; i < from+m; i++ {
		e := Ev{K: fmt.Sprintf("k%d", i%keys), Amount: int64(i)}
		if err := iggy.Publish(ctx, pub, decl, e); err != nil {
			t.Fatal(err)
		}
		want[e.K] += e.Amount
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// check compares every key with want through the instance serving its
// partition.
func check(t *testing.T, owner map[uint32]*instance, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	for k, w := range want {
		p := stream.PartitionOf([]byte(k), uint32(len(owner)))
		in := owner[p]
		got, ok, err := in.n.Get(ctx, k)
		if err != nil || !ok || got != w {
			t.Errorf("%s (partition %d, on %s) = %d, %v, %v; want %d", k, p, in.name, got, ok, err, w)
		}
	}
}

// checkChangelog reads the whole changelog and checks, per partition, that
// the valid commits' epochs never decrease and that their offset ranges
// follow each other exactly, from offset 0 to the checkpoint.
func checkChangelog(t *testing.T, cl *iggy.Client, n uint32) (fenced int) {
	t.Helper()
	ctx := context.Background()
	src, err := cl.OpenForeignSource(ctx, topology.ChangelogTopic("s", "grp"))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := cl.EndOffsets(ctx, "s", "strand-changelog-grp")
	if err != nil {
		t.Fatal(err)
	}
	for p := range n {
		rd, err := src.Open(ctx, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		var h topology.ChangelogHistory
		var lastEpoch stream.Epoch
		next := uint64(0)
		for off := uint64(0); off < ends[p]; {
			recs, err := rd.Poll(ctx, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				off = r.Offset + 1
				e, err := topology.DecodeChangelog(r.Payload)
				if err != nil {
					t.Fatalf("partition %d offset %d: %v", p, r.Offset, err)
				}
				switch v := h.Judge(e); v {
				case topology.ChangelogFenced:
					fenced++
				case topology.ChangelogInconsistent:
					t.Errorf("partition %d offset %d: %v entry %+v", p, r.Offset, v, e)
				case topology.ChangelogValid:
					if e.Kind != topology.ChangelogCommit {
						continue
					}
					if e.Epoch < lastEpoch {
						t.Errorf("partition %d offset %d: epoch %d after %d", p, r.Offset, e.Epoch, lastEpoch)
					}
					lastEpoch = e.Epoch
					for _, cr := range e.Checkpoints {
						if cr.From != next || cr.Next < cr.From {
							t.Errorf("partition %d offset %d: commit covers [%d, %d), the one before ended at %d", p, r.Offset, cr.From, cr.Next, next)
						}
						next = cr.Next
					}
				}
			}
		}
		_ = rd.Close()
	}
	return fenced
}

// Instances of a group share the partitions, hand them over when one
// joins or leaves, and every key's value is right on the instance that
// serves its partition; a returning instance reuses its store, a new one
// restores from snapshots; the changelog's valid history never overlaps.
func TestGroupSharesAndMovesPartitions(t *testing.T) {
	ctx := context.Background()
	cl := broker(t)
	const parts, keys = 4, 50
	if err := cl.EnsureTopic(ctx, "s", "log", parts); err != nil {
		t.Fatal(err)
	}
	_, _, decl := counter("grp")
	want := map[string]int64{}
	publishCounts(t, cl, decl, 0, 2000, keys, want)

	a := startInstance(t, cl, "a", t.TempDir(), topology.WithSnapshotEvery(3))
	check(t, settled(t, parts, a), want)

	b := startInstance(t, cl, "b", t.TempDir(), topology.WithSnapshotEvery(3))
	publishCounts(t, cl, decl, 2000, 2000, keys, want)
	owner := settled(t, parts, a, b)
	served := map[string]int{}
	for _, in := range owner {
		served[in.name]++
	}
	if served["a"] != 2 || served["b"] != 2 {
		t.Errorf("partitions served: %v, want 2 each", served)
	}
	check(t, owner, want)

	// a leaves: b takes everything over.
	adir := a.dir
	a.close(t)
	publishCounts(t, cl, decl, 4000, 1000, keys, want)
	check(t, settled(t, parts, b), want)

	// a comes back with its store; c is new and restores from snapshots.
	a = startInstance(t, cl, "a", adir, topology.WithSnapshotEvery(3))
	c := startInstance(t, cl, "c", t.TempDir(), topology.WithSnapshotEvery(3))
	publishCounts(t, cl, decl, 5000, 1000, keys, want)
	owner = settled(t, parts, a, b, c)
	check(t, owner, want)
	var reused, snap bool
	for _, in := range []*instance{a, c} {
		for _, st := range in.app.Ownership() {
			t.Logf("%s: partition %d %v epoch %d restore %+v", in.name, st.Partition, st.Phase, st.Epoch, st.Restore)
			reused = reused || (in == a && st.Restore.Reused)
			snap = snap || (in == c && st.Restore.Snapshot)
		}
	}
	if !snap {
		t.Error("c restored no partition from a snapshot")
	}
	_ = reused // a may or may not get one of its old partitions back
	for _, in := range []*instance{a, b, c} {
		in.close(t)
	}
	if f := checkChangelog(t, cl, parts); f != 0 {
		t.Logf("%d fenced commits", f)
	}
}

// testLogger logs to t, with the instance's name, when -v is given.
func testLogger(t *testing.T, name string) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", name)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
