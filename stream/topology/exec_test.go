package topology_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/executor"

	"github.com/hashicorp/go-multierror"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
)

// call is one handler call seen by a recording sink.
type call struct {
	key  string
	tag  planner.Tag
	ns   []int
	sums []int64
}

// recorder records sink calls, in order per key.
type recorder struct {
	mu    sync.Mutex
	calls []call
	fail  func(key string, tag planner.Tag, events []grouptest.Ev) error
}

func (r *recorder) sink(tag planner.Tag) func(ctx context.Context, key string, events []grouptest.Ev) error {
	return func(ctx context.Context, key string, events []grouptest.Ev) error {
		if r.fail != nil {
			if err := r.fail(key, tag, events); err != nil {
				return err
			}
		}
		c := call{key: key, tag: tag}
		for _, e := range events {
			c.ns = append(c.ns, e.N)
			c.sums = append(c.sums, e.Amount)
		}
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
		return nil
	}
}

func (r *recorder) forKey(key string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.key == key {
			out = append(out, c)
		}
	}
	return out
}

func sumAmount() algebra.Algebra[grouptest.Ev] {
	return algebra.Sum(func(e grouptest.Ev) int64 { return e.Amount }, func(e grouptest.Ev, n int64) grouptest.Ev { e.Amount = n; return e })
}

func TestSinkChunksByMaxBatch(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	rec := &recorder{}
	topo := topology.New("chunks")
	src := topology.Source[string](topo, "log")
	topology.On(src, decl).ForEach("rec", rec.sink(1), topology.WithMaxBatch(3))
	d := newTaskDriver(t, topo, tdBatchSize(100))
	for i := range 10 {
		tdPipe(d, decl, grouptest.Ev{K: "a", N: i})
	}
	d.Advance()
	calls := rec.forKey("a")
	var sizes []int
	var all []int
	for _, c := range calls {
		sizes = append(sizes, len(c.ns))
		all = append(all, c.ns...)
	}
	if !slices.Equal(sizes, []int{3, 3, 3, 1}) {
		t.Fatalf("chunk sizes %v, want [3 3 3 1]", sizes)
	}
	if !slices.Equal(all, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("events %v not in log order", all)
	}
}

func TestRunIsReducedBeforeHandlers(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey, stream.WithReduce(sumAmount()))
	rec := &recorder{}
	topo := topology.New("reduce")
	src := topology.Source[string](topo, "log")
	topology.On(src, decl).ForEach("rec", rec.sink(1))
	d := newTaskDriver(t, topo, tdBatchSize(100))
	for i := range 5 {
		tdPipe(d, decl, grouptest.Ev{K: "a", N: i, Amount: int64(i + 1)})
	}
	d.Advance()
	calls := rec.forKey("a")
	if len(calls) != 1 || !slices.Equal(calls[0].sums, []int64{15}) {
		t.Fatalf("calls %+v, want one call with the sum 15", calls)
	}
	res := d.Results()
	if len(res) != 1 || len(res[0].Applied) != 5 {
		t.Fatalf("results %+v: want the 5 folded records applied", res)
	}
}

func TestStagesRunInPlanOrder(t *testing.T) {
	// The seed's worked example: A=opened (Acquire), B=deposited,
	// W=withdrawn (Relaxed), C=closed (Release).
	open := stream.DeclareFunc(1, grouptest.EvKey, stream.WithFence(planner.Acquire))
	dep := stream.DeclareFunc(2, grouptest.EvKey)
	wd := stream.DeclareFunc(3, grouptest.EvKey)
	cls := stream.DeclareFunc(4, grouptest.EvKey, stream.WithFence(planner.Release))
	rec := &recorder{}
	topo := topology.New("stages")
	src := topology.Source[string](topo, "log")
	for _, decl := range []*stream.Event[string, grouptest.Ev]{open, dep, wd, cls} {
		topology.On(src, decl).ForEach("rec", rec.sink(decl.Tag()))
	}
	d := newTaskDriver(t, topo, tdBatchSize(100))
	tdPipe(d, open, grouptest.Ev{K: "42", N: 0})
	tdPipe(d, dep, grouptest.Ev{K: "42", N: 1})
	tdPipe(d, dep, grouptest.Ev{K: "7", N: 2})
	tdPipe(d, wd, grouptest.Ev{K: "42", N: 3})
	tdPipe(d, dep, grouptest.Ev{K: "42", N: 4})
	tdPipe(d, cls, grouptest.Ev{K: "42", N: 5})
	tdPipe(d, open, grouptest.Ev{K: "42", N: 6})
	tdPipe(d, dep, grouptest.Ev{K: "42", N: 7})
	d.Advance()
	var got []string
	for _, c := range rec.forKey("42") {
		got = append(got, fmt.Sprintf("%d:%v", c.tag, c.ns))
	}
	want := []string{"1:[0]", "2:[1 4]", "3:[3]", "4:[5]", "1:[6]", "2:[7]"}
	if !slices.Equal(got, want) {
		t.Fatalf("key 42 calls %v, want %v", got, want)
	}
}

func TestFailingKeysAreAggregatedAndExactlyReported(t *testing.T) {
	a := stream.DeclareFunc(1, grouptest.EvKey, stream.WithFence(planner.Acquire))
	b := stream.DeclareFunc(2, grouptest.EvKey)
	c := stream.DeclareFunc(3, grouptest.EvKey, stream.WithFence(planner.Release))
	rec := &recorder{}
	boom := errors.New("boom")
	rec.fail = func(key string, tag planner.Tag, events []grouptest.Ev) error {
		if tag == 2 && (key == "x" || key == "y") {
			return fmt.Errorf("%s: %w", key, boom)
		}
		return nil
	}
	topo := topology.New("failures", topology.WithWorkers(4))
	src := topology.Source[string](topo, "log")
	for _, decl := range []*stream.Event[string, grouptest.Ev]{a, b, c} {
		topology.On(src, decl).ForEach("rec", rec.sink(decl.Tag()))
	}
	d := newTaskDriver(t, topo, tdBatchSize(100))
	for _, k := range []string{"x", "y", "z"} {
		tdPipe(d, a, grouptest.Ev{K: k, N: 0})
		tdPipe(d, b, grouptest.Ev{K: k, N: 1})
		tdPipe(d, c, grouptest.Ev{K: k, N: 2})
		tdPipe(d, b, grouptest.Ev{K: k, N: 3})
	}
	d.Step()
	res := d.Results()[0]
	// Offsets: x = 0,3,6,9 ; y = 1,4,7,10 ; z = 2,5,8,11 (interleaved by
	// Pipe order: a(x) a? no — Pipe order is per key above).
	// Pipe order was x: 0..3, y: 4..7, z: 8..11.
	wantApplied := []uint64{0, 4, 8, 9, 10, 11}
	if !slices.Equal(res.Applied, wantApplied) {
		t.Fatalf("applied %v, want %v", res.Applied, wantApplied)
	}
	wantHeld := []uint64{1, 2, 3, 5, 6, 7}
	if !slices.Equal(res.Held, wantHeld) {
		t.Fatalf("held %v, want %v", res.Held, wantHeld)
	}
	err := res.Err()
	var merr *multierror.Error
	if !errors.As(err, &merr) || len(merr.Errors) != 2 || !errors.Is(err, boom) {
		t.Fatalf("Err() = %v, want a multierror of 2 wrapping boom", err)
	}
	if len(res.Failures) != 2 || !slices.Equal(res.Failures[0].Offsets, []uint64{1}) || res.Failures[0].Action != "parked" {
		t.Fatalf("failures %+v", res.Failures)
	}
	if keys, recs := d.Task("log", 0).Parked(); keys != 2 || recs != 6 {
		t.Fatalf("parked %d keys %d records, want 2 and 6", keys, recs)
	}

	// New events of a parked key wait behind it; the retry after the
	// backoff applies everything in order.
	tdPipe(d, b, grouptest.Ev{K: "x", N: 4})
	d.Advance()
	if last := d.Results()[len(d.Results())-1]; !slices.Equal(last.Held, []uint64{12}) {
		t.Fatalf("new event of parked key: held %v, want [12]", last.Held)
	}
	rec.fail = nil
	d.AdvanceClock(time.Second)
	d.Advance()
	if keys, _ := d.Task("log", 0).Parked(); keys != 0 {
		t.Fatalf("%d keys still parked after a successful retry", keys)
	}
	var got []string
	for _, c := range rec.forKey("x") {
		got = append(got, fmt.Sprintf("%d:%v", c.tag, c.ns))
	}
	// The retry sees [b1, c2, b3, b4]: c (Release) tails the first
	// segment, after b1; b3 and b4 follow in a new segment.
	want := []string{"1:[0]", "2:[1]", "3:[2]", "2:[3 4]"}
	if !slices.Equal(got, want) {
		t.Fatalf("key x calls %v, want %v", got, want)
	}
}

func TestRetriesSurviveRestart(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	rec := &recorder{}
	fail := true
	rec.fail = func(string, planner.Tag, []grouptest.Ev) error {
		if fail {
			return errors.New("down")
		}
		return nil
	}
	topo := topology.New("restart")
	src := topology.Source[string](topo, "log")
	topology.On(src, decl).ForEach("rec", rec.sink(1))
	d := newTaskDriver(t, topo)
	tdPipe(d, decl, grouptest.Ev{K: "a", N: 0}, grouptest.Ev{K: "a", N: 1})
	d.Advance()
	d.Restart()
	if keys, recs := d.Task("log", 0).Parked(); keys != 1 || recs != 2 {
		t.Fatalf("after restart: parked %d keys %d records, want 1 and 2", keys, recs)
	}
	fail = false
	d.AdvanceClock(time.Hour)
	d.Advance()
	if c := rec.forKey("a"); len(c) != 1 || !slices.Equal(c[0].ns, []int{0, 1}) {
		t.Fatalf("calls %+v", c)
	}
}

func TestExhaustedRetriesDeadLetterAndGoOn(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	other := stream.DeclareFunc(2, grouptest.EvKey, stream.WithFence(planner.Acquire))
	rec := &recorder{}
	rec.fail = func(key string, tag planner.Tag, _ []grouptest.Ev) error {
		if tag == 1 {
			return errors.New("always")
		}
		return nil
	}
	topo := topology.New("exhaust", topology.WithRetry(3, time.Second, time.Minute))
	src := topology.Source[string](topo, "log")
	topology.On(src, decl).ForEach("rec", rec.sink(1))
	topology.On(src, other).ForEach("rec", rec.sink(2))
	d := newTaskDriver(t, topo)
	tdPipe(d, decl, grouptest.Ev{K: "a", N: 0})
	tdPipe(d, other, grouptest.Ev{K: "a", N: 1})
	for range 3 {
		d.Advance()
		d.AdvanceClock(time.Hour)
	}
	d.Advance()
	dls := d.DeadLetters()
	if len(dls) != 1 || dls[0].Offset != 0 || dls[0].Reason != deadletter.ReasonExhausted || dls[0].Attempts != 3 {
		t.Fatalf("dead letters %+v", dls)
	}
	if c := rec.forKey("a"); len(c) != 1 || c[0].tag != 2 {
		t.Fatalf("after exhaustion the key should go on: calls %+v", c)
	}
}

func TestPermanentErrorDeadLettersTheFailingEvent(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	rec := &recorder{}
	rec.fail = func(key string, tag planner.Tag, events []grouptest.Ev) error {
		if events[0].N == 1 {
			return stream.Permanent(errors.New("invalid"))
		}
		return nil
	}
	topo := topology.New("permanent")
	src := topology.Source[string](topo, "log")
	topology.On(src, decl).ForEach("rec", rec.sink(1), topology.WithMaxBatch(1))
	d := newTaskDriver(t, topo)
	tdPipe(d, decl, grouptest.Ev{K: "a", N: 0}, grouptest.Ev{K: "a", N: 1}, grouptest.Ev{K: "a", N: 2})
	d.Advance()
	dls := d.DeadLetters()
	if len(dls) != 1 || dls[0].Offset != 1 || dls[0].Reason != deadletter.ReasonPermanent {
		t.Fatalf("dead letters %+v: want offset 1 alone (the failing event)", dls)
	}
	if res := d.Results()[0]; !slices.Equal(res.Applied, []uint64{0, 2}) {
		t.Fatalf("applied %v, want [0 2]", res.Applied)
	}
}

func TestPoisonIsDeadLetteredWithOrigin(t *testing.T) {
	for _, policy := range []stream.PoisonPolicy{stream.PassPoison, stream.BlockPoisonedKey} {
		t.Run(policy.String(), func(t *testing.T) {
			decl := stream.DeclareFunc(1, grouptest.EvKey)
			rec := &recorder{}
			topo := topology.New("poison", topology.WithPoisonPolicy(policy))
			src := topology.Source[string](topo, "log").Skip(9)
			topology.On(src, decl).ForEach("rec", rec.sink(1))
			var seen []deadletter.Letter
			d := newTaskDriver(t, topo, tdTaskOptions(executor.OnDeadLetter(func(dl deadletter.Letter) {
				seen = append(seen, dl)
			})))
			h := connector.Headers{Key: []byte("a"), Tag: 1, Ordering: planner.Relaxed}
			tdPipe(d, decl, grouptest.Ev{K: "a", N: 0})                                     // 0
			d.PipeRecord("log", connector.Record{HeaderErr: connector.ErrBadHeaders})       // 1
			d.PipeRecord("log", connector.Record{Headers: h, Payload: []byte("{not json")}) // 2
			unknown := h
			unknown.Tag = 77
			d.PipeRecord("log", connector.Record{Headers: unknown, Payload: []byte("{}")}) // 3
			skipped := h
			skipped.Tag = 9
			d.PipeRecord("log", connector.Record{Headers: skipped, Payload: []byte("{}")}) // 4
			tdPipe(d, decl, grouptest.Ev{K: "a", N: 5})                                    // 5
			tdPipe(d, decl, grouptest.Ev{K: "b", N: 6})                                    // 6
			d.Advance()

			dls := d.DeadLetters()
			var got []string
			for _, dl := range dls {
				got = append(got, fmt.Sprintf("%d:%s", dl.Offset, dl.Reason))
				if dl.Source != "log" || dl.Partition != 0 || dl.Err == nil {
					t.Errorf("dead letter without origin or error: %+v", dl)
				}
			}
			want := []string{"1:bad-headers", "2:undecodable", "3:unknown-type"}
			if !slices.Equal(got, want) {
				t.Fatalf("dead letters %v, want %v", got, want)
			}
			if len(seen) != 3 {
				t.Fatalf("OnDeadLetter saw %d, want 3", len(seen))
			}
			res := d.Results()[0]
			if !slices.Equal(res.Skipped, []uint64{4}) {
				t.Fatalf("skipped %v", res.Skipped)
			}
			var ns []int
			for _, c := range rec.forKey("a") {
				ns = append(ns, c.ns...)
			}
			switch policy {
			case stream.PassPoison:
				if !slices.Equal(ns, []int{0, 5}) {
					t.Fatalf("pass: key a applied %v, want [0 5]", ns)
				}
			case stream.BlockPoisonedKey:
				if !slices.Equal(ns, []int{0}) || !slices.Equal(res.Held, []uint64{5}) {
					t.Fatalf("hold: key a applied %v held %v, want [0] and [5]", ns, res.Held)
				}
				d.AdvanceClock(time.Hour)
				d.Advance()
				if len(rec.forKey("a")) != 1 {
					t.Fatal("a blocked key must wait for Unblock, not for time")
				}
				if err := d.Task("log", 0).Unblock(context.Background(), []byte("a")); err != nil {
					t.Fatal(err)
				}
				d.Advance()
				ns = nil
				for _, c := range rec.forKey("a") {
					ns = append(ns, c.ns...)
				}
				if !slices.Equal(ns, []int{0, 5}) {
					t.Fatalf("after Release: key a applied %v, want [0 5]", ns)
				}
			}
			if c := rec.forKey("b"); len(c) != 1 {
				t.Fatalf("other key must go on: %+v", c)
			}
		})
	}
}

func TestBadKeyBytesAreDeadLettered(t *testing.T) {
	type U struct{ ID uint64 }
	decl := stream.DeclareFunc(1, func(u U) uint64 { return u.ID })
	var got []uint64
	topo := topology.New("badkey")
	src := topology.Source[uint64](topo, "log")
	topology.On(src, decl).ForEach("rec", func(ctx context.Context, key uint64, events []U) error {
		got = append(got, key)
		return nil
	})
	d := newTaskDriver(t, topo)
	d.PipeRecord("log", connector.Record{Headers: connector.Headers{Key: []byte("abc"), Tag: 1, Ordering: planner.Relaxed}, Payload: []byte(`{"ID":1}`)})
	tdPipe(d, decl, U{ID: 2})
	d.Advance()
	dls := d.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != deadletter.ReasonBadKey || !slices.Equal(got, []uint64{2}) {
		t.Fatalf("dead letters %+v, handled %v", dls, got)
	}
}

func TestBadKeyBytesAreDeadLetteredForProjections(t *testing.T) {
	type U struct{ ID uint64 }
	decl := stream.DeclareFunc(1, func(u U) uint64 { return u.ID })
	topo := topology.New("badkey-project")
	src := topology.Source[uint64](topo, "log")
	table := topology.NewTable[uint64, int](topo, "count", stream.JSON[int]())
	topology.Project(topology.On(src, decl), table, func(v *int, e U) error { *v++; return nil })
	d := newTaskDriver(t, topo)
	d.PipeRecord("log", connector.Record{Headers: connector.Headers{Key: []byte("abc"), Tag: 1, Ordering: planner.Relaxed}, Payload: []byte(`{"ID":1}`)})
	tdPipe(d, decl, U{ID: 2})
	d.Advance()
	dls := d.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != deadletter.ReasonBadKey {
		t.Fatalf("dead letters %+v, want one bad-key", dls)
	}
	rows := map[uint64]int{}
	if err := table.Scan(context.Background(), func(k uint64, v int) bool { rows[k] = v; return true }); err != nil {
		t.Fatalf("Scan after a bad key: %v", err)
	}
	if len(rows) != 1 || rows[2] != 1 {
		t.Fatalf("table rows %v, want only key 2 counted once", rows)
	}
}

func TestStaleRecordsAreIgnored(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	topo := topology.New("stale")
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, int](topo, "count", stream.JSON[int]())
	topology.Project(topology.On(src, decl), table, func(v *int, e grouptest.Ev) error { *v++; return nil })
	d := newTaskDriver(t, topo)
	tdPipe(d, decl, grouptest.Ev{K: "a"}, grouptest.Ev{K: "a"})
	d.Advance()
	task := d.Task("log", 0)
	r0, _ := decl.Record(0, 0, grouptest.Ev{K: "a"})
	r2, _ := decl.Record(0, 2, grouptest.Ev{K: "a"})
	res, err := task.Process(context.Background(), []connector.Record{r0, r2})
	if err != nil || res.Stale != 1 || !slices.Equal(res.Applied, []uint64{2}) {
		t.Fatalf("Process = %+v, %v", res, err)
	}
	if n, _, _ := table.Get(context.Background(), "a"); n != 3 {
		t.Fatalf("count %d, want 3", n)
	}
}

// A failing fold writes nothing of its event: the events of its run before
// it are applied (as they would be in batches of one), it and the rest wait.
func TestProjectionFailureWritesNothingOfTheFailingEvent(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	topo := topology.New("projfail")
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, []int](topo, "seen", stream.JSON[[]int]())
	failAt := 2
	topology.Project(topology.On(src, decl), table, func(v *[]int, e grouptest.Ev) error {
		if e.N == failAt {
			return errors.New("no")
		}
		*v = append(*v, e.N)
		return nil
	})
	d := newTaskDriver(t, topo)
	tdPipe(d, decl, grouptest.Ev{K: "a", N: 1}, grouptest.Ev{K: "a", N: 2}, grouptest.Ev{K: "a", N: 3})
	d.Advance()
	if v, _, _ := table.Get(context.Background(), "a"); !slices.Equal(v, []int{1}) {
		t.Fatalf("table holds %v after a failed run, want [1]", v)
	}
	failAt = -1
	d.AdvanceClock(time.Hour)
	d.Advance()
	if v, _, _ := table.Get(context.Background(), "a"); !slices.Equal(v, []int{1, 2, 3}) {
		t.Fatalf("after retry %v, want [1 2 3]", v)
	}
}

func TestIncompatibleTopologyIsRefused(t *testing.T) {
	topo1, _ := accounts()
	d := newTaskDriver(t, topo1)
	dir := d.Dir()
	d.Close()
	topo2 := topology.New("accounts")
	src := topology.Source[AccountID](topo2, "bank/accounts")
	other := topology.NewTable[AccountID, int](topo2, "other", stream.JSON[int]())
	topology.Project(topology.On(src, Deposits), other, func(v *int, e Deposited) error { return nil })
	prog, err := topo2.Build()
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := prog.Attach(db); !errors.Is(err, state.ErrIncompatibleTopology) {
		t.Fatalf("Attach = %v, want ErrIncompatibleTopology", err)
	}
}

func TestStoreFailureAbandonsTheBatch(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	refuse := true
	values := stream.CodecFunc(
		func(dst []byte, v int) ([]byte, error) {
			if refuse {
				return dst, errors.New("disk says no")
			}
			return stream.JSON[int]().Append(dst, v)
		},
		stream.JSON[int]().Decode)
	topo := topology.New("storefail")
	src := topology.Source[string](topo, "log")
	table := topology.NewTable[string, int](topo, "count", values)
	topology.Project(topology.On(src, decl), table, func(v *int, e grouptest.Ev) error { *v++; return nil })
	d := newTaskDriver(t, topo)
	tdPipe(d, decl, grouptest.Ev{K: "a"}, grouptest.Ev{K: "b"})
	task := d.Task("log", 0)
	r0, _ := decl.Record(0, 0, grouptest.Ev{K: "a"})
	r1, _ := decl.Record(0, 1, grouptest.Ev{K: "b"})
	if _, err := task.Process(context.Background(), []connector.Record{r0, r1}); err == nil {
		t.Fatal("Process succeeded although the table refused to encode")
	}
	if task.Next() != 0 {
		t.Fatalf("checkpoint moved to %d after an abandoned batch", task.Next())
	}
	refuse = false
	d.Advance()
	for _, k := range []string{"a", "b"} {
		if n, _, _ := table.Get(context.Background(), k); n != 1 {
			t.Fatalf("count[%s] = %d, want 1", k, n)
		}
	}
}

func TestHandlerPanicFailsOnlyItsKey(t *testing.T) {
	decl := stream.DeclareFunc(1, grouptest.EvKey)
	topo := topology.New("panic")
	src := topology.Source[string](topo, "log")
	var got []string
	topology.On(src, decl).ForEach("p", func(ctx context.Context, key string, events []grouptest.Ev) error {
		if key == "bad" {
			panic("kaboom")
		}
		got = append(got, key)
		return nil
	})
	d := newTaskDriver(t, topo, tdTaskOptions(executor.WithLogger(nil)))
	tdPipe(d, decl, grouptest.Ev{K: "bad"}, grouptest.Ev{K: "good"})
	d.Advance()
	res := d.Results()[0]
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0].Err.Error(), "kaboom") || !slices.Equal(got, []string{"good"}) {
		t.Fatalf("failures %+v, handled %v", res.Failures, got)
	}
}

func TestDeclarationWinsOverHeaders(t *testing.T) {
	// The consumer declares A as Acquire; a producer with an older
	// declaration sent it Relaxed. The consumer plans A as Acquire.
	a := stream.DeclareFunc(1, grouptest.EvKey, stream.WithFence(planner.Acquire))
	bDecl := stream.DeclareFunc(2, grouptest.EvKey)
	rec := &recorder{}
	topo := topology.New("mismatch")
	src := topology.Source[string](topo, "log")
	topology.On(src, a).ForEach("rec", rec.sink(1))
	topology.On(src, bDecl).ForEach("rec", rec.sink(2))
	d := newTaskDriver(t, topo)
	tdPipe(d, bDecl, grouptest.Ev{K: "k", N: 0})
	old := stream.DeclareFunc(1, grouptest.EvKey) // Relaxed
	tdPipe(d, old, grouptest.Ev{K: "k", N: 1})
	tdPipe(d, bDecl, grouptest.Ev{K: "k", N: 2})
	d.Advance()
	var got []string
	for _, c := range rec.forKey("k") {
		got = append(got, fmt.Sprintf("%d:%v", c.tag, c.ns))
	}
	// As Acquire: [b0] then head a1, body b2. As Relaxed it would be one
	// segment with body runs b[0 2] and a[1].
	if want := []string{"2:[0]", "1:[1]", "2:[2]"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	if res := d.Results()[0]; res.Mismatches != 1 {
		t.Fatalf("mismatches %d, want 1", res.Mismatches)
	}
}
