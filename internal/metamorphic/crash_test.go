package metamorphic

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// Issue 23, item 5: the crash test of a topology with a table fed by two
// sources and a chain of two KeyBy steps. The parent runs the embedded Iggy
// broker (with a data directory) and publishes a harness case's log bit by
// bit; a child process (this test binary) runs the App over it with sync
// commits and is SIGKILLed at random moments; at the end the tables, the
// dead letters and the outputs must be exactly what the reference model
// says. Tables shared between the two sources need -meta.shared-tables
// (issue 23, defect 1); without it each source has its own table.

const (
	crashDirEnv    = "STRAND_META_CRASH_DIR"
	crashAddrEnv   = "STRAND_META_CRASH_ADDR"
	crashSharedEnv = "STRAND_META_CRASH_SHARED"
	crashReadyLine = "strand-meta-crash: running"
	crashRole      = "meta-crash"
	crashStream    = "meta"
	crashDLQ       = "meta/dlq"
)

// crashCase is the crash test's case: sources meta/a (a fold, an Acquire
// type, a sum) and meta/b (a per-event fence, a fold), one table fed by
// both (shared) or one each; a's fold re-keyed twice (meta/rp1, meta/rp2)
// with a table at each step and a To at the first; b's fold re-keyed once
// into the first step's table (shared) or a table of its own. Poison
// records and events KeyBy cannot key are in the log.
func crashCase(shared bool, events int) *Case {
	c := &Case{Knobs: Knobs{SharedTables: shared, KeyBy: true, To: true, Poison: true}, Fail: map[int]Failure{}}
	c.Seed, c.Parts, c.Workers, c.Attempts = 23, 4, 3, 1000
	c.Inputs = []InputDesc{
		{Name: "meta/a", Types: []TypeDesc{{Tag: 1, Kind: KindFold}, {Tag: 2, Kind: KindFence, Fence: planner.Acquire}, {Tag: 3, Kind: KindSum}}},
		{Name: "meta/b", Types: []TypeDesc{{Tag: 1, Kind: KindFenceBy}, {Tag: 2, Kind: KindFold}}},
	}
	c.Tables = []string{"shared", "by-k1", "by-k2", "b-only", "by-k1-b"}
	bTable, bK1Table := 0, 1
	if !shared {
		bTable, bK1Table = 3, 4
	}
	c.Nodes = []NodeDesc{
		{ID: 0, Input: 0, Type: 0, Parent: -1, Topic: "meta/a", Tables: []int{0}, Child: 1},
		{ID: 1, Input: 0, Type: 0, Parent: 0, Depth: 1, Topic: "meta/rp1", Tables: []int{1}, To: true, OutTopic: "meta/out1", Child: 2},
		{ID: 2, Input: 0, Type: 0, Parent: 1, Depth: 2, Topic: "meta/rp2", Tables: []int{2}, Child: -1},
		{ID: 3, Input: 0, Type: 1, Parent: -1, Topic: "meta/a", Tables: []int{0}, Child: -1},
		{ID: 4, Input: 0, Type: 2, Parent: -1, Topic: "meta/a", Tables: []int{0}, Child: -1},
		{ID: 5, Input: 1, Type: 0, Parent: -1, Topic: "meta/b", Tables: []int{bTable}, Child: -1},
		{ID: 6, Input: 1, Type: 1, Parent: -1, Topic: "meta/b", Tables: []int{bTable}, Child: 7},
		{ID: 7, Input: 1, Type: 1, Parent: 6, Depth: 1, Topic: "meta/rp7", Tables: []int{bK1Table}, Child: -1},
	}
	r := rand.New(rand.NewPCG(23, 5))
	for id := 1; id <= events; id++ {
		in := r.IntN(2)
		k := fmt.Sprintf("k%d", r.IntN(40))
		ty := r.IntN(len(c.Inputs[in].Types))
		ev := Ev{ID: id, K: k, Amt: int64(1 + r.IntN(9))}
		ev.RK[0] = fmt.Sprintf("a%d", hash(c.Inputs[in].Name+k)%7)
		ev.RK[1] = fmt.Sprintf("b%d", hash(ev.RK[0])%3)
		if r.IntN(60) == 0 {
			ev.RK[r.IntN(2)] = ""
		}
		if c.Inputs[in].Types[ty].Kind == KindFenceBy {
			ev.Fence = fences[r.IntN(4)]
		}
		rec := Rec{Input: in, Kind: RecEvent, Type: ty, Ev: ev}
		if r.IntN(80) == 0 {
			rec.Kind = RecBadPayload
		}
		c.Gen = append(c.Gen, rec)
	}
	c.Log = c.Gen
	return c
}

// crashChild runs the App of the crash case over the broker until it has
// caught up, and is killed by the parent at a random moment.
func crashChild([]string) int {
	dir, addr := os.Getenv(crashDirEnv), os.Getenv(crashAddrEnv)
	c := crashCase(os.Getenv(crashSharedEnv) == "1", 0)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	defer iggy.RouteStdLog(quiet)()
	cl, err := iggy.Connect(ctx, addr, iggy.WithLogger(quiet))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer cl.Close()
	app, err := topology.Open(ctx, Build(c).Topo, cl, dir, topology.WithLogger(quiet),
		topology.WithDurability(topology.Sync), topology.WithDeadLetterTopic(crashDLQ))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(rctx) }()
	fmt.Println(crashReadyLine)
	err = app.WaitCaughtUp(ctx)
	cancel()
	if rerr := <-done; err == nil && rerr != nil && rctx.Err() == nil {
		err = rerr
	}
	if cerr := app.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// TestCrashSharedTableKeyBy kills the App of crashCase with SIGKILL while it
// processes (5 times; 100 with STRAND_SOAK=1), restarting it on the same
// store and broker, then lets it finish and compares tables, dead letters
// and outputs with the model: every row exact, every message exactly once.
func TestCrashSharedTableKeyBy(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	knobs, _ := testKnobs()
	// The default run: 5 kills over 1500 events (until issue 33 item 7,
	// 10 over 3000: half the time, each kill still lands among the
	// commits of a log published bit by bit); the soak's are unchanged.
	kills, events := crashtest.Kills(5, 100), 1500
	if crashtest.Soak() {
		events = 30000
	}
	c := crashCase(knobs.SharedTables, events)
	defer iggy.RouteStdLog(slog.New(slog.DiscardHandler))()
	dir := t.TempDir()
	srv, err := iggytest.NewServer(iggytest.WithDataDir(dir + "/broker"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := Build(c)
	pubs := make([]*iggy.Publisher, len(c.Inputs))
	for i, in := range c.Inputs {
		topic := strings.TrimPrefix(in.Name, crashStream+"/")
		if err := cl.EnsureTopic(ctx, crashStream, topic, c.Parts); err != nil {
			t.Fatal(err)
		}
		if pubs[i], err = iggy.NewPublisher(ctx, cl, crashStream, topic); err != nil {
			t.Fatal(err)
		}
		defer pubs[i].Close(ctx)
	}
	published := 0
	publish := func(n int) {
		for ; n > 0 && published < len(c.Log); n-- {
			rec := c.Log[published]
			env, err := b.Decls[rec.Input][rec.Type].Envelope(rec.Ev)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Kind == RecBadPayload {
				env.Payload = fmt.Appendf(nil, "not json #%d", rec.Ev.ID)
			}
			if err := pubs[rec.Input].Send(ctx, env); err != nil {
				t.Fatal(err)
			}
			published++
		}
	}
	env := []string{crashDirEnv + "=" + dir + "/state", crashAddrEnv + "=" + srv.Addr(), crashSharedEnv + "=0"}
	if knobs.SharedTables {
		env[2] = crashSharedEnv + "=1"
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	killed, finished := 0, 0
	for killed < kills {
		if finished > 5*kills {
			// A fast machine: the runs end before the kills. Not a
			// failure (no random event is asserted); the check below
			// still holds.
			t.Logf("the App finished %d times before %d kills; going on with %d kills", finished, kills, killed)
			break
		}
		publish(len(c.Log) / (2 * kills))
		spec := crashtest.Spec{Role: crashRole, Ready: crashReadyLine, Env: env}
		if crashtest.Run(t, spec, time.Duration(1+r.IntN(150))*time.Millisecond).Finished {
			finished++
		} else {
			killed++
		}
	}
	publish(len(c.Log))
	crashtest.Run(t, crashtest.Spec{Role: crashRole, Ready: crashReadyLine, Env: env}, 0)
	t.Logf("%d kills, %d runs finished before a kill", killed, finished)

	o, err := observeBroker(ctx, cl, c, dir+"/state")
	if err != nil {
		t.Fatal(err)
	}
	// The dead letters are named by id: the test does not know the
	// broker's offsets.
	x := Expect(c)
	byID := map[string]ExpDL{}
	for ident, dl := range x.DLs {
		if topic, idx, ok := strings.Cut(ident, "#"); ok {
			i, _ := strconv.Atoi(idx)
			ident = idIdentity(topic, c.Log[i].Ev.ID)
		}
		byID[ident] = dl
	}
	x.DLs = byID
	replay := "go test ./internal/metamorphic -run TestCrashSharedTableKeyBy"
	if knobs.SharedTables {
		replay += " -meta.shared-tables"
	}
	if err := Compare(c, x, o); err != nil {
		t.Fatalf("after %d kills: %v\nreplay: %s (kills are at random moments)\n%s", killed, err, replay, c)
	}
}

// observeBroker reads back what the crash case left: the tables (opening
// the App on its store, without running it), the dead-letter topic and the
// To topics, each message named by the id in its payload.
func observeBroker(ctx context.Context, cl *iggy.Client, c *Case, dir string) (*Observed, error) {
	b := Build(c)
	app, err := topology.Open(ctx, b.Topo, cl, dir, topology.WithLogger(slog.New(slog.DiscardHandler)),
		topology.WithDeadLetterTopic(crashDLQ))
	if err != nil {
		return nil, err
	}
	defer app.Close()
	o := &Observed{Tables: make([]map[string]Row, len(c.Tables)), DLs: map[string][]deadletter.Letter{}, Outputs: map[int][]Ev{}}
	for i, t := range b.Tables {
		o.Tables[i] = map[string]Row{}
		if err := t.Scan(ctx, func(k string, v Row) bool { o.Tables[i][k] = v; return true }); err != nil {
			return nil, fmt.Errorf("scanning table %s: %w", t.Name(), err)
		}
	}
	msgs, err := readAll(ctx, cl, crashDLQ)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		dl, err := deadletter.Parse(connector.Message{ID: m.ID, Headers: m.Headers, Payload: m.Payload})
		if err != nil {
			return nil, fmt.Errorf("dead letter at %d/%d: %w", m.Partition, m.Offset, err)
		}
		var e Ev
		if json.Unmarshal(dl.Payload, &e) != nil {
			if _, err := fmt.Sscanf(string(dl.Payload), "not json #%d", &e.ID); err != nil {
				e.ID = 0 // named src@0: a dead letter the model cannot expect
			}
		}
		ident := idIdentity(dl.Source, e.ID)
		o.DLs[ident] = append(o.DLs[ident], dl)
	}
	for _, n := range c.Nodes {
		if !n.To {
			continue
		}
		msgs, err := readAll(ctx, cl, n.OutTopic)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			var e Ev
			if err := json.Unmarshal(m.Payload, &e); err != nil {
				return nil, fmt.Errorf("output %s at %d/%d: %w", n.OutTopic, m.Partition, m.Offset, err)
			}
			o.Outputs[n.ID] = append(o.Outputs[n.ID], e)
		}
	}
	return o, nil
}

// readAll reads every message of the topic named "meta/topic", partition by
// partition.
func readAll(ctx context.Context, cl *iggy.Client, name string) ([]iggy.StoredMessage, error) {
	topic := strings.TrimPrefix(name, crashStream+"/")
	ends, err := cl.EndOffsets(ctx, crashStream, topic)
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", name, err)
	}
	var out []iggy.StoredMessage
	for p, end := range ends {
		if end == 0 {
			continue
		}
		ms, err := cl.Tail(ctx, crashStream, topic, uint32(p), int(end))
		if err != nil {
			return nil, fmt.Errorf("topic %s partition %d: %w", name, p, err)
		}
		if uint64(len(ms)) != end {
			return nil, fmt.Errorf("topic %s partition %d: read %d messages, its end offset is %d", name, p, len(ms), end)
		}
		out = append(out, ms...)
	}
	return out, nil
}
