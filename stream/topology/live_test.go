package topology_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// liveTopology counts events per key; the key "stuck" always fails, so it
// stays parked with its records.
func liveTopology() (*topology.Topology, *stream.Event[string, Ev]) {
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
	return topo, decl
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

// checkLiveFigures checks a report of the live topology's store after
// liveEvents: 40 rows, every record of 2 partitions checkpointed, the
// stuck key parked with its 3 records.
func checkLiveFigures(t *testing.T, in *topology.Inspection) {
	t.Helper()
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
}

// sameFigures compares two reports but for where they came from.
func sameFigures(t *testing.T, live, offline *topology.Inspection) {
	t.Helper()
	a, b := *live, *offline
	a.Live, a.Stale, b.Live, b.Stale = nil, nil, nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("live report %+v\ndiffers from the offline one %+v", a, b)
	}
}

// Inspect of a store whose App is open (here: in this process) is answered
// by the App; after Close the directory is read and gives the same figures,
// with no record or copy left behind.
func TestInspectLiveApp(t *testing.T) {
	topo, decl := liveTopology()
	d := topologytest.NewDriver(t, topo, topologytest.Partitions(2))
	topologytest.Pipe(d, decl, liveEvents()...)
	d.Advance()
	live, err := topology.Inspect(d.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if live.Live == nil || live.Live.PID != os.Getpid() || live.Stale != nil || live.Dir != d.Dir() {
		t.Fatalf("report of an open store: live %+v, stale %+v, dir %s", live.Live, live.Stale, live.Dir)
	}
	checkLiveFigures(t, live)

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
	if _, err := topology.Inspect(d.Dir()); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("Inspect with a wrong token = %v, want a 401", err)
	}
	if err := os.WriteFile(rec, good, 0o600); err != nil {
		t.Fatal(err)
	}

	d.Close()
	offline, err := topology.Inspect(d.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if offline.Live != nil || offline.Stale != nil {
		t.Fatalf("report of a closed store: live %+v, stale %+v", offline.Live, offline.Stale)
	}
	sameFigures(t, live, offline)
	ents, _ := os.ReadDir(d.Dir())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".inspect-") || strings.HasPrefix(e.Name(), "strand-live") {
			t.Fatalf("%s left in the store after Close", e.Name())
		}
	}
}

// WithLiveInspect(false): no record, and Inspect fails while the App is
// open.
func TestLiveInspectOff(t *testing.T) {
	topo, _ := liveTopology()
	d := topologytest.NewDriver(t, topo, topologytest.OpenOptions(topology.WithLiveInspect(false)))
	if _, err := os.Stat(filepath.Join(d.Dir(), "strand-live.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("live record with live inspection off: %v", err)
	}
	if _, err := topology.Inspect(d.Dir()); err == nil {
		t.Fatal("Inspect of an open store without live inspection succeeded")
	}
}

const liveChildReady = "strand-live-child: ready"

// TestLiveInspectChild is the child process of TestInspectLiveAndCrashed:
// it processes the log into the store and waits to be killed.
func TestLiveInspectChild(t *testing.T) {
	crashtest.Child(t, "live-inspect")
	dir := os.Getenv("STRAND_LIVE_DIR")
	topo, decl := liveTopology()
	d := topologytest.NewDriver(t, topo, topologytest.Partitions(2), topologytest.Dir(dir))
	topologytest.Pipe(d, decl, liveEvents()...)
	d.Advance()
	fmt.Println(liveChildReady)
	time.Sleep(time.Minute) // the parent kills it long before
	t.Fatal("not killed")
}

// A store open in another process (Pebble's lock really held) is inspected
// through its App; once that process is killed with SIGKILL the directory
// is read, with the same figures, and the record the dead App left is
// reported as stale; an App that opens the store again replaces it.
func TestInspectLiveAndCrashed(t *testing.T) {
	dir := t.TempDir()
	child := crashtest.Start(t, crashtest.Spec{Role: "live-inspect", Test: "TestLiveInspectChild", Ready: liveChildReady,
		Env: []string{"STRAND_LIVE_DIR=" + dir}})
	select {
	case <-child.Ready():
	case <-child.Done():
		t.Fatalf("the child ended before it was ready: %v\n%s", child.Err(), child.Tail(20))
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not get ready")
	}

	live, err := topology.Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if live.Live == nil || live.Live.PID != child.Pid() {
		t.Fatalf("report of the child's open store: live %+v, want pid %d", live.Live, child.Pid())
	}
	checkLiveFigures(t, live)

	child.Kill()
	crashed, err := topology.Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if crashed.Live != nil || crashed.Stale == nil || crashed.Stale.PID != child.Pid() {
		t.Fatalf("report of the crashed store: live %+v, stale %+v, want the child's pid %d", crashed.Live, crashed.Stale, child.Pid())
	}
	sameFigures(t, live, crashed)

	// An App that opens the store replaces the dead one's record.
	topo, _ := liveTopology()
	d := topologytest.NewDriver(t, topo, topologytest.Partitions(2), topologytest.Dir(dir))
	again, err := topology.Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Live == nil || again.Live.PID != os.Getpid() || again.Stale != nil {
		t.Fatalf("report after reopening: live %+v, stale %+v", again.Live, again.Stale)
	}
	sameFigures(t, live, again)
	d.Close()
}
