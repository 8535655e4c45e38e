package state_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/state"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// Ev is the test event: a key, a number and an amount.
type Ev struct {
	K      string
	N      int
	Amount int64
}

func evKey(e Ev) string { return e.K }

// liveTopology counts events per key; the key "stuck" always fails, so it
// stays parked with its records.
func liveTopology() (*topology.Topology, *stream.Event[string, Ev], *topology.Table[string, int64]) {
	decl := stream.DeclareFunc(1, evKey)
	topo := topology.New("live")
	src := topology.Source[string](topo, "live/log")
	n := topology.NewTable[string, int64](topo, "n", stream.JSON[int64]())
	topology.Project(topology.On(src, decl), n, func(v *int64, e Ev) error {
		if e.K == "stuck" {
			return errors.New("stuck")
		}
		*v += e.Amount
		return nil
	})
	return topo, decl, n
}

// liveEvents is the log: 40 keys, and 3 events of the stuck key.
func liveEvents() []Ev {
	var evs []Ev
	for i := range 400 {
		evs = append(evs, Ev{K: fmt.Sprintf("k%02d", i%40), N: i, Amount: 1})
		if i%150 == 0 {
			evs = append(evs, Ev{K: "stuck", N: i})
		}
	}
	return evs
}

// summary reads st's summary.
func summary(t *testing.T, st *state.Store) *state.Summary {
	t.Helper()
	in, err := st.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// checkLiveFigures checks a store of the live topology after liveEvents:
// 40 rows of 10 each, every record of 2 partitions checkpointed, the stuck
// key parked with its 3 records.
func checkLiveFigures(t *testing.T, st *state.Store, n *topology.Table[string, int64]) {
	t.Helper()
	ctx := context.Background()
	in := summary(t, st)
	if len(in.Tables) != 1 || in.Tables[0].Name != "n" || in.Tables[0].Rows != 40 {
		t.Fatalf("tables %+v, want n with 40 rows", in.Tables)
	}
	var next uint64
	for _, s := range in.Sources {
		for _, c := range s.Checkpoints {
			next += c
		}
	}
	if len(in.Sources) != 1 || in.Sources[0].Partitions != 2 || next != uint64(len(liveEvents())) {
		t.Fatalf("sources %+v, want live/log of 2 partitions checkpointed up to %d records", in.Sources, len(liveEvents()))
	}
	if len(in.Parked) != 1 || in.Parked[0].Keys != 1 || in.Parked[0].Records != 3 {
		t.Fatalf("parked %+v, want 1 key with 3 records", in.Parked)
	}
	if v, ok, err := state.Get(ctx, st, n, "k07"); err != nil || !ok || v != 10 {
		t.Fatalf("Get k07 = %d, %v, %v; want 10", v, ok, err)
	}
	rows := 0
	if err := state.Scan(ctx, st, n, func(k string, v int64) bool {
		if v != 10 {
			t.Errorf("Scan: %s = %d, want 10", k, v)
		}
		rows++
		return true
	}); err != nil || rows != 40 {
		t.Fatalf("Scan: %d rows, %v; want 40", rows, err)
	}
}

// sameFigures compares two summaries but for where they came from.
func sameFigures(t *testing.T, live, offline *state.Summary) {
	t.Helper()
	a, b := *live, *offline
	a.Live, a.Stale, b.Live, b.Stale = nil, nil, nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("live summary %+v\ndiffers from the offline one %+v", a, b)
	}
}

// noCopiesLeft fails if a copy or a record is left in dir.
func noCopiesLeft(t *testing.T, dir string, record bool) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".inspect-") || (record && strings.HasPrefix(e.Name(), "strand-live")) {
			t.Fatalf("%s left in the store", e.Name())
		}
	}
}

// Open of a store whose App serves live inspection (here: in this process,
// where Pebble's lock refuses a second opener too) reads a copy the App
// makes; Close removes it. After the App closed, the directory is read
// directly and gives the same figures, with no record or copy left behind.
func TestOpenThroughTheLiveApp(t *testing.T) {
	ctx := context.Background()
	topo, decl, n := liveTopology()
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2), topologytest.WithOpenOptions(topology.WithLiveInspect(true)))
	topologytest.Pipe(d, decl, liveEvents()...)
	d.Advance()
	st, err := state.Open(ctx, d.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if st.Live() == nil || st.Live().PID != os.Getpid() || st.Stale() != nil || st.Dir() != d.Dir() {
		t.Fatalf("store of an open App: live %+v, stale %+v, dir %s", st.Live(), st.Stale(), st.Dir())
	}
	checkLiveFigures(t, st, n)
	live := summary(t, st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	noCopiesLeft(t, d.Dir(), false)

	// A wrong token is refused.
	rec := filepath.Join(d.Dir(), "strand-live.json")
	good, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(rec); fi.Mode().Perm() != 0o600 {
		t.Fatalf("live record mode %v, want 0600", fi.Mode().Perm())
	}
	bad := strings.Replace(string(good), `"token":"`, `"token":"x`, 1)
	if err := os.WriteFile(rec, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Open(ctx, d.Dir()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Open with a wrong token = %v, want a 401", err)
	}
	if err := os.WriteFile(rec, good, 0o600); err != nil {
		t.Fatal(err)
	}

	d.Close()
	st, err = state.Open(ctx, d.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Live() != nil || st.Stale() != nil {
		t.Fatalf("store of a closed App: live %+v, stale %+v", st.Live(), st.Stale())
	}
	sameFigures(t, live, summary(t, st))
	noCopiesLeft(t, d.Dir(), true)
}

// Live inspection is off by default: Open of a held store fails, naming
// the App's pid and the option; in the App's process OpenApp reads it
// anyway.
func TestLiveInspectOffByDefault(t *testing.T) {
	ctx := context.Background()
	topo, decl, n := liveTopology()
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2))
	topologytest.Pipe(d, decl, liveEvents()...)
	d.Advance()
	_, err := state.Open(ctx, d.Dir())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), "WithLiveInspect(true)") {
		t.Fatalf("Open of a held store without live inspection = %v; want it to name the pid and the option", err)
	}
	st := d.State()
	if st.Live() != nil {
		t.Fatalf("OpenApp: live %+v, want nil", st.Live())
	}
	checkLiveFigures(t, st, n)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	noCopiesLeft(t, d.Dir(), false)
}

const liveChildReady = "strand-live-child: ready"

// TestLiveChild is the child process of TestOpenLiveAndCrashed: it
// processes the log into the store and waits to be killed.
func TestLiveChild(t *testing.T) {
	dir := os.Getenv("STRAND_LIVE_DIR")
	if dir == "" {
		t.Skip("run by TestOpenLiveAndCrashed")
	}
	topo, decl, _ := liveTopology()
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2), topologytest.WithDir(dir),
		topologytest.WithOpenOptions(topology.WithLiveInspect(true)))
	topologytest.Pipe(d, decl, liveEvents()...)
	d.Advance()
	fmt.Println(liveChildReady)
	time.Sleep(time.Minute) // the parent kills it long before
	t.Fatal("not killed")
}

// A store open in another process (Pebble's lock really held) is read
// through its App; once that process is killed with SIGKILL the directory
// is read, with the same figures, and the record the dead App left is
// reported as stale; an App that opens the store again replaces it.
func TestOpenLiveAndCrashed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLiveChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "STRAND_LIVE_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), liveChildReady) {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the child ended before it was ready")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the child did not get ready")
	}

	_, _, n := liveTopology()
	st, err := state.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Live() == nil || st.Live().PID != cmd.Process.Pid {
		t.Fatalf("store of the child's open App: live %+v, want pid %d", st.Live(), cmd.Process.Pid)
	}
	// n is not attached to any App here: the store's rows are decoded
	// with its codecs alone.
	checkLiveFigures(t, st, n)
	live := summary(t, st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	st, err = state.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Live() != nil || st.Stale() == nil || st.Stale().PID != cmd.Process.Pid {
		t.Fatalf("store of the crashed App: live %+v, stale %+v, want the child's pid %d", st.Live(), st.Stale(), cmd.Process.Pid)
	}
	sameFigures(t, live, summary(t, st))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// An App that opens the store replaces the dead one's record.
	topo, _, _ := liveTopology()
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2), topologytest.WithDir(dir),
		topologytest.WithOpenOptions(topology.WithLiveInspect(true)))
	st, err = state.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Live() == nil || st.Live().PID != os.Getpid() || st.Stale() != nil {
		t.Fatalf("store after reopening: live %+v, stale %+v", st.Live(), st.Stale())
	}
	sameFigures(t, live, summary(t, st))
	_ = st.Close()
	d.Close()
}
