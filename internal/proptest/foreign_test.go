package proptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// A foreign topic: a producer that knows nothing of strand writes the
// property test's events (PEv) as JSON, with the event type in a String
// header "event-type" ("t0".."t6", the index into PTypes), partitioned by
// key as Iggy's messages-key partitioning does.

const foreignTopic = "shop/events"

// classifyPEv is the foreign topic's classifier.
func classifyPEv(m stream.ForeignMessage) (stream.Classified[string], error) {
	typ, ok := m.Header("event-type")
	if !ok {
		return stream.Classified[string]{}, errors.New("no event-type header")
	}
	var body struct {
		K     string
		Fence planner.Ordering
		Seq   uint64
	}
	if err := json.Unmarshal(m.Payload, &body); err != nil {
		return stream.Classified[string]{}, fmt.Errorf("payload is not a JSON object (%d bytes)", len(m.Payload))
	}
	c := stream.Classified[string]{Key: body.K, Ordering: body.Fence, Seq: body.Seq, Tag: 99}
	var ty int
	if _, err := fmt.Sscanf(string(typ), "t%d", &ty); err == nil && ty >= 0 && ty < len(PTypes) {
		c.Tag = PTypes[ty].Decl.Tag()
	}
	return c, nil
}

func foreignTopology(fl *Flaky, opts ...topology.ForeignOption) (*topology.Topology, *topology.Table[string, PState]) {
	topo := topology.New("foreign", topology.WithWorkers(3), topology.WithRetry(1000, time.Second, time.Second))
	src := topology.ForeignSource(topo, foreignTopic, classifyPEv, opts...)
	table := topology.NewTable[string, PState](topo, "state", stream.JSON[PState]())
	for _, pt := range PTypes {
		fold := pt.Fold
		topology.Project(topology.On(src, pt.Decl), table, func(s *PState, e PEv) error {
			if fl != nil {
				if err := fl.check(e); err != nil {
					return err
				}
			}
			fold(s, e)
			return nil
		})
	}
	return topo, table
}

// pevMessage is e as the foreign producer writes it.
func pevMessage(d *topologytest.Driver, ty int, e PEv) stream.ForeignMessage {
	body, _ := json.Marshal(e)
	return stream.ForeignMessage{Partition: d.PartitionOf([]byte(e.K)), Payload: body, Headers: []connector.Field{
		{Name: "content-type", Value: []byte("application/json"), ValueKind: connector.FieldString},
		{Name: "event-type", Value: fmt.Appendf(nil, "t%d", ty), ValueKind: connector.FieldString},
	}}
}

func tableState(t interface{ Fatal(...any) }, table *topology.Table[string, PState]) map[string]PState {
	out := map[string]PState{}
	if err := table.Scan(context.Background(), func(k string, v PState) bool { out[k] = v; return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestForeignSourceThroughTheDriver(t *testing.T) {
	topo, table := foreignTopology(nil)
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2), topologytest.WithBatchSize(3))
	want := map[string]PState{}
	for i, k := range []string{"a", "b", "a", "a", "b"} {
		ty := i % len(PTypes)
		e := PEv{K: k, N: i, Amt: int64(i), Count: 1, Fence: planner.Relaxed}
		d.PipeForeign(foreignTopic, pevMessage(d, ty, e))
		s := want[k]
		PTypes[ty].Fold(&s, e)
		want[k] = s
	}
	bad := stream.ForeignMessage{Partition: 1, Payload: []byte("<xml/>"), ID: [16]byte{7},
		Headers: []connector.Field{{Name: "event-type", Value: []byte("t1")}, {Name: "n", Value: []byte{9}, NameKind: connector.FieldUint8, ValueKind: connector.FieldUint8}}}
	badAt := d.PipeForeign(foreignTopic, bad)
	d.Advance()
	if got := tableState(t, table); !reflect.DeepEqual(got, want) {
		t.Fatalf("table %+v, want %+v", got, want)
	}
	dls := d.DeadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if dl.Reason != deadletter.ReasonUnclassified || dl.Partition != 1 || dl.Offset != badAt || !strings.Contains(dl.Err.Error(), "not a JSON object") ||
		!reflect.DeepEqual(dl.Raw.Headers, bad.Headers) || string(dl.Payload) != "<xml/>" {
		t.Fatalf("dead letter %v raw %+v", dl, dl.Raw)
	}
	d.Restart()
	d.Advance()
	if d.Lag() != 0 || len(d.DeadLetters()) != 1 {
		t.Fatalf("after restart: lag %d, %d dead letters", d.Lag(), len(d.DeadLetters()))
	}
}

// TestPropertyForeignTableEqualsSequentialFold: random foreign logs (seven
// types, every fence, a per-event fence from the classifier, handler
// failures) with unclassifiable and unknown messages among them, random
// batch sizes, partitions and restarts: the table equals the sequential
// fold of the good messages in log order, and every bad one is a dead
// letter with its reason and its own headers.
func TestPropertyForeignTableEqualsSequentialFold(t *testing.T) {
	t.Parallel() // see parallel_test.go
	rapid.Check(t, func(rt *rapid.T) {
		nkeys := rapid.IntRange(1, 5).Draw(rt, "keys")
		n := rapid.IntRange(0, SoakLen(35, 70)).Draw(rt, "messages")
		fl := &Flaky{FailOn: map[int]bool{}, Failed: map[int]bool{}}
		type entry struct {
			ty     int // index into PTypes; -1 for a bad message
			ev     PEv
			bad    stream.ForeignMessage
			reason deadletter.Reason
		}
		var log []entry
		for i := range n {
			k := fmt.Sprintf("k%d", rapid.IntRange(0, nkeys-1).Draw(rt, "key"))
			if rapid.IntRange(0, 12).Draw(rt, "bad?") == 0 {
				junk := rapid.SliceOfN(rapid.Byte(), 1, 40).Draw(rt, "junk")
				var m stream.ForeignMessage
				var reason deadletter.Reason
				switch rapid.IntRange(0, 3).Draw(rt, "how bad") {
				case 0: // not JSON
					m = stream.ForeignMessage{Payload: append([]byte("#"), junk...), Headers: []connector.Field{{Name: "event-type", Value: []byte("t0")}}}
					reason = deadletter.ReasonUnclassified
				case 1: // no type header
					m = stream.ForeignMessage{Payload: fmt.Appendf(nil, `{"K":%q}`, k), Headers: []connector.Field{{Name: "x", Value: junk}}}
					reason = deadletter.ReasonUnclassified
				case 2: // no key
					m = stream.ForeignMessage{Payload: []byte(`{"N":1}`), Headers: []connector.Field{{Name: "event-type", Value: []byte("t2")}}}
					reason = deadletter.ReasonUnclassified
				default: // a type nobody handles
					m = stream.ForeignMessage{Payload: fmt.Appendf(nil, `{"K":%q}`, k), Headers: []connector.Field{{Name: "event-type", Value: []byte("refund")}}}
					reason = deadletter.ReasonUnknownType
				}
				m.Partition = uint32(rapid.IntRange(0, 2).Draw(rt, "bad partition"))
				log = append(log, entry{ty: -1, bad: m, reason: reason})
				continue
			}
			ty, ev := DrawPEv(rt, k, i)
			if rapid.IntRange(0, 15).Draw(rt, "fail?") == 0 {
				fl.FailOn[i] = true
			}
			log = append(log, entry{ty: ty, ev: ev})
		}
		sizes := rapid.SliceOfN(rapid.IntRange(1, 40), 1, 20).Draw(rt, "batch sizes")
		restartEvery := rapid.IntRange(0, 6).Draw(rt, "restart every")

		want := map[string]PState{}
		for _, e := range log {
			if e.ty >= 0 {
				s := want[e.ev.K]
				PTypes[e.ty].Fold(&s, e.ev)
				want[e.ev.K] = s
			}
		}
		dir, err := os.MkdirTemp("", "strand-foreign-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		topo, table := foreignTopology(fl)
		next := 0
		d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(3),
			topologytest.WithBatchSizes(func() int { s := sizes[next%len(sizes)]; next++; return s }))
		defer d.Close()
		type at struct {
			p   uint32
			off uint64
		}
		bad := map[at]entry{}
		for _, e := range log {
			if e.ty < 0 {
				bad[at{e.bad.Partition, d.PipeForeign(foreignTopic, e.bad)}] = e
				continue
			}
			d.PipeForeign(foreignTopic, pevMessage(d, e.ty, e.ev))
		}
		steps := 0
		for round := 0; d.Lag() > 0 || Parked(d, 3) > 0; round++ {
			if round > 10000 {
				rt.Fatalf("no progress: lag %d, parked %d", d.Lag(), Parked(d, 3))
			}
			if !d.Step() {
				d.AdvanceClock(time.Second)
			}
			steps++
			if restartEvery > 0 && steps%restartEvery == 0 {
				d.Restart()
			}
		}
		if got := tableState(rt, table); !reflect.DeepEqual(got, want) {
			rt.Fatalf("table %+v\nsequential fold %+v", got, want)
		}
		dls := d.DeadLetters()
		if len(dls) != len(bad) {
			rt.Fatalf("%d dead letters, %d bad messages", len(dls), len(bad))
		}
		for _, dl := range dls {
			e, ok := bad[at{dl.Partition, dl.Offset}]
			if !ok || dl.Reason != e.reason || dl.Raw == nil || !reflect.DeepEqual(dl.Raw.Headers, e.bad.Headers) ||
				string(dl.Payload) != string(e.bad.Payload) {
				rt.Fatalf("dead letter %v (raw %+v), want %s with headers %+v", dl, dl.Raw, e.reason, e.bad.Headers)
			}
			if e.reason == deadletter.ReasonUnclassified && !strings.Contains(dl.Err.Error(), stream.ErrUnclassified.Error()) {
				rt.Fatalf("dead letter %v: error does not say it was not classified", dl)
			}
		}
	})
}

// A foreign producer with several writers numbers each key's events; the
// classifier hands the numbers to the re-sequencer, which applies them in
// order whatever order the log has them in.
func TestForeignSourceResequenced(t *testing.T) {
	seqd := stream.DeclareFunc(1, func(e PEv) string { return e.K }, stream.WithSequence(func(e PEv) uint64 { return uint64(e.N) }))
	topo := topology.New("foreign-seq")
	src := topology.ForeignSource(topo, foreignTopic, func(m stream.ForeignMessage) (stream.Classified[string], error) {
		var e PEv
		if err := json.Unmarshal(m.Payload, &e); err != nil {
			return stream.Classified[string]{}, err
		}
		return stream.Classified[string]{Key: e.K, Tag: 1, Seq: uint64(e.N)}, nil
	}).Resequence()
	table := topology.NewTable[string, PState](topo, "state", stream.JSON[PState]())
	topology.Project(topology.On(src, seqd), table, func(s *PState, e PEv) error { FoldPlain(s, e); return nil })
	d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(2))
	var want PState
	for n := 1; n <= 9; n++ {
		FoldPlain(&want, PEv{K: "k", N: n})
	}
	for _, n := range []int{3, 1, 2, 6, 5, 4, 9, 7, 8} {
		body, _ := json.Marshal(PEv{K: "k", N: n})
		d.PipeForeign(foreignTopic, stream.ForeignMessage{Payload: body})
	}
	d.Advance()
	got, _, err := table.Get(context.Background(), "k")
	if err != nil || got != want {
		t.Fatalf("table %+v (%v), want %+v", got, err, want)
	}
	if keys, recs := d.Held(); keys != 0 || recs != 0 {
		t.Fatalf("still held: %d keys, %d records", keys, recs)
	}
}

func TestForeignSourceBuildChecks(t *testing.T) {
	cases := map[string]struct {
		build func() *topology.Topology
		want  string
	}{
		"nil classifier": {func() *topology.Topology {
			topo, _ := foreignTopology(nil)
			topology.ForeignSource[string](topo, "other/topic", nil)
			return topo
		}, "nil classifier"},
		"declared twice": {func() *topology.Topology {
			topo, _ := foreignTopology(nil)
			topology.ForeignSource(topo, foreignTopic, classifyPEv)
			return topo
		}, "declared twice"},
		"a strand source of the same name": {func() *topology.Topology {
			topo, table := foreignTopology(nil)
			topology.Project(topology.On(topology.Source[string](topo, "plain"), PPlain), table, func(*PState, PEv) error { return nil })
			topology.ForeignSource(topo, "plain", classifyPEv)
			return topo
		}, "declared twice"},
		"ForeignKeys of another key type": {func() *topology.Topology {
			topo, _ := foreignTopology(nil, topology.WithForeignKeys(stream.Int64Key[int64]()))
			return topo
		}, "does not encode key type string"},
		"ForeignKeys nil": {func() *topology.Topology {
			topo, _ := foreignTopology(nil, topology.WithForeignKeys[string](nil))
			return topo
		}, "topology.WithForeignKeys: nil codec"},
		"ForeignKeys not the declarations'": {func() *topology.Topology {
			topo, _ := foreignTopology(nil, topology.WithForeignKeys(stream.CodecFunc(
				func(dst []byte, k string) ([]byte, error) { return append(dst, k...), nil },
				func(b []byte) (string, error) { return string(b), nil })))
			return topo
		}, "use one key codec"},
	}
	for name, tc := range cases {
		_, err := tc.build().Build()
		if !errors.Is(err, topology.ErrBuild) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Build: %v, want an error with %q", name, err, tc.want)
		}
	}
}

// plainConnector is a connector that cannot read foreign topics.
type plainConnector struct{}

func (plainConnector) OpenSource(context.Context, string) (connector.Source, error) {
	return nil, errors.New("plainConnector: no topics")
}

func (plainConnector) OpenSink(context.Context, string, uint32) (connector.Sink, error) {
	return nil, errors.New("plainConnector: no topics")
}

func TestForeignSourceOpenChecks(t *testing.T) {
	topo, _ := foreignTopology(nil)
	_, err := topology.Open(context.Background(), topo, plainConnector{}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "connector.ForeignConnector") || !strings.Contains(err.Error(), foreignTopic) {
		t.Fatalf("Open over a connector without foreign topics: %v", err)
	}

	// Declaring a source foreign changes what its state means: a state
	// directory written with the same source read as a strand source is
	// refused.
	plain := topology.New("foreign", topology.WithWorkers(3), topology.WithRetry(1000, time.Second, time.Second))
	src := topology.Source[string](plain, foreignTopic)
	table := topology.NewTable[string, PState](plain, "state", stream.JSON[PState]())
	for _, pt := range PTypes {
		topology.Project(topology.On(src, pt.Decl), table, func(*PState, PEv) error { return nil })
	}
	pp, err := plain.Build()
	if err != nil {
		t.Fatal(err)
	}
	fp, err := topo.Build()
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(pp.Fingerprint(), fp.Fingerprint()) || !fp.Foreign(foreignTopic) || pp.Foreign(foreignTopic) {
		t.Fatal("the fingerprint does not cover that the source is foreign")
	}
	dir := t.TempDir()
	d := topologytest.NewDriver(t, plain, topologytest.WithDir(dir))
	d.Close()
	_, err = topology.Open(context.Background(), topo, plainConnector{}, dir)
	if err == nil {
		t.Fatal("Open of a foreign topology over a plain connector succeeded")
	}
	_, err = fp.Open(context.Background(), foreignOnly{}, dir)
	if !errors.Is(err, topology.ErrIncompatibleTopology) {
		t.Fatalf("Open of a state directory written with the source read as a strand source: %v, want ErrIncompatibleTopology", err)
	}
}

// foreignOnly opens every topic as a foreign source of one partition with
// nothing in it.
type foreignOnly struct{ plainConnector }

func (foreignOnly) OpenForeignSource(_ context.Context, topic string) (connector.Source, error) {
	return emptySource(topic), nil
}

type emptySource string

func (s emptySource) Name() string                               { return string(s) }
func (s emptySource) Partitions(context.Context) (uint32, error) { return 1, nil }
func (s emptySource) Open(context.Context, uint32, uint64) (connector.PartitionReader, error) {
	return nil, errors.New("emptySource: nothing to read")
}
