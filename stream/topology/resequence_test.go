package topology_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/proptest"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// seqRecord is the record a publisher writes for e of decl, with its
// strand-seq header replaced by seq (hasSeq false: no header).
func seqRecord(t *testing.T, decl *stream.Event[string, proptest.SEv], e proptest.SEv, seq uint64, hasSeq bool) connector.Record {
	t.Helper()
	env, err := decl.Envelope(e)
	if err != nil {
		t.Fatal(err)
	}
	env.Headers.Seq, env.Headers.HasSeq = seq, hasSeq
	return connector.Record{Headers: env.Headers, Payload: env.Payload}
}

func plains(key string, seqs ...uint64) []proptest.SEv {
	var out []proptest.SEv
	for _, s := range seqs {
		out = append(out, proptest.SEv{K: key, Seq: s, N: int(s), Count: 1})
	}
	return out
}

func chainOf(seqs ...uint64) proptest.PState {
	var s proptest.PState
	for _, n := range seqs {
		proptest.FoldPlain(&s, proptest.PEv{N: int(n)})
	}
	return s
}

func stateOf(t *testing.T, table *topology.Table[string, proptest.PState], key string) proptest.PState {
	t.Helper()
	v, _, err := table.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestResequencerAppliesInSequenceOrderAndHoldsDurably(t *testing.T) {
	topo, table, _ := proptest.ReseqTopology(nil)
	d := topologytest.NewDriver(t, topo)
	defer d.Close()
	topologytest.Pipe(d, proptest.SPlain, plains("a", 3, 5, 2)...)
	d.Advance()
	if got := stateOf(t, table, "a"); got != (proptest.PState{}) {
		t.Fatalf("applied before 1 arrived: %+v", got)
	}
	if k, n := d.Held(); k != 1 || n != 3 {
		t.Fatalf("held %d keys %d records, want 1 and 3", k, n)
	}
	held, err := d.App().Held(context.Background(), "log", 0, []byte("a"))
	if err != nil || len(held) != 3 || held[0].Headers.Seq != 2 || held[2].Headers.Seq != 5 || held[0].Offset != 2 {
		t.Fatalf("held %+v, %v", held, err)
	}
	d.Restart()
	topologytest.Pipe(d, proptest.SPlain, plains("a", 1, 2, 4)...) // 2 again: a duplicate of a held number
	d.Advance()
	if got, want := stateOf(t, table, "a"), chainOf(1, 2, 3, 4, 5); got != want {
		t.Fatalf("table %+v, want the chain 1..5 %+v", got, want)
	}
	if k, n := d.Held(); k != 0 || n != 0 {
		t.Fatalf("held %d keys %d records after they were let through", k, n)
	}
	st := d.App().Stats()[0].Total
	if st.Duplicates != 1 || st.Resequenced != 3 {
		t.Fatalf("counters %+v, want 1 duplicate and 3 resequenced", st)
	}
	topologytest.Pipe(d, proptest.SPlain, plains("a", 1, 5)...) // both already applied
	d.Advance()
	if got := d.App().Stats()[0].Total.Duplicates; got != 3 {
		t.Fatalf("%d duplicates, want 3", got)
	}
	if dls := d.DeadLetters(); len(dls) != 0 {
		t.Fatalf("dropped duplicates were dead-lettered: %v", dls)
	}
}

func TestResequencerBadSequenceHeadersAreDeadLettered(t *testing.T) {
	topo, table, free := proptest.ReseqTopology(nil)
	d := topologytest.NewDriver(t, topo)
	defer d.Close()
	e := proptest.SEv{K: "a", Seq: 1, Count: 1}
	d.PipeRecord("log", seqRecord(t, proptest.SPlain, e, 0, false)) // no header
	d.PipeRecord("log", seqRecord(t, proptest.SPlain, e, 0, true))  // seq 0
	bad := seqRecord(t, proptest.SPlain, e, 1, true)                // malformed: 3 bytes
	h, err := connector.ParseHeaders(bad.Headers.Key, binary.LittleEndian.AppendUint32(nil, uint32(bad.Headers.Tag)), []byte{connector.PropsVersion, byte(bad.Headers.Ordering), byte(bad.Headers.Algebra)}, []byte{1, 2, 3})
	if err == nil {
		t.Fatalf("a 3-byte strand-seq parsed: %+v", h)
	}
	d.PipeRecord("log", connector.Record{Headers: connector.Headers{Key: []byte("a")}, HeaderErr: err, Payload: bad.Payload})
	d.PipeRecord("log", seqRecord(t, proptest.SFree, proptest.SEv{K: "a", Amt: 7}, 0, false)) // unsequenced: no header needed
	d.PipeRecord("log", seqRecord(t, proptest.SFree, proptest.SEv{K: "a", Amt: 1}, 5, true))  // unsequenced: header ignored
	topologytest.Pipe(d, proptest.SPlain, plains("a", 1)...)
	d.Advance()
	dls := d.DeadLetters()
	if len(dls) != 3 || dls[0].Reason != deadletter.ReasonBadSequence || dls[1].Reason != deadletter.ReasonBadSequence ||
		dls[2].Reason != deadletter.ReasonBadHeaders || !strings.Contains(dls[2].Err.Error(), connector.HeaderSeq) {
		t.Fatalf("dead letters %v", dls)
	}
	if !strings.Contains(dls[0].Err.Error(), "missing") || !strings.Contains(dls[1].Err.Error(), "0") || dls[0].Offset != 0 || dls[1].Offset != 1 {
		t.Fatalf("dead letters %v", dls)
	}
	if got, want := stateOf(t, table, "a"), chainOf(1); got != want {
		t.Fatalf("table %+v, want %+v", got, want)
	}
	if n, _, _ := free.Get(context.Background(), "a"); n != 8 {
		t.Fatalf("unsequenced total %d, want 8", n)
	}
}

func TestResequencerHugeGapIsHeldNotExpanded(t *testing.T) {
	topo, table, _ := proptest.ReseqTopology(nil, topology.WithGapPolicy(stream.GapSkip, time.Minute))
	d := topologytest.NewDriver(t, topo)
	defer d.Close()
	topologytest.Pipe(d, proptest.SPlain, plains("a", math.MaxUint64-1, 1, math.MaxUint64)...)
	d.Advance()
	if got, want := stateOf(t, table, "a"), chainOf(1); got != want {
		t.Fatalf("table %+v, want %+v", got, want)
	}
	if _, n := d.Held(); n != 2 {
		t.Fatalf("%d held, want 2", n)
	}
	// The gap times out with no new input: the pipeline wakes on the clock.
	d.AdvanceClock(time.Minute)
	d.Advance()
	if got, want := stateOf(t, table, "a"), chainOf(1, math.MaxUint64-1, math.MaxUint64); got != want {
		t.Fatalf("table %+v, want %+v", got, want)
	}
	gaps, err := d.App().Gaps(context.Background(), "log", 0, nil)
	if err != nil || len(gaps) != 1 || gaps[0].From != 2 || gaps[0].To != math.MaxUint64-2 || gaps[0].Age != time.Minute ||
		gaps[0].Cause != stream.GapTimedOut || gaps[0].Policy != stream.GapSkip {
		t.Fatalf("gaps %+v, %v", gaps, err)
	}
	if c := d.App().Stats()[0].Total; c.Gaps != 1 {
		t.Fatalf("counters %+v", c)
	}
}

func TestResequencerHoldBoundOverflow(t *testing.T) {
	for _, policy := range []stream.GapPolicy{stream.GapWait, stream.GapSkip, stream.GapDeadLetter} {
		t.Run(policy.String(), func(t *testing.T) {
			var mu sync.Mutex
			var notices []stream.GapNotice
			topo, table, _ := proptest.ReseqTopology(nil, topology.WithGapPolicy(policy, 0), topology.WithHoldLimits(2, 100),
				topology.WithGapNotice(func(g stream.GapNotice) { mu.Lock(); notices = append(notices, g); mu.Unlock() }))
			d := topologytest.NewDriver(t, topo)
			defer d.Close()
			topologytest.Pipe(d, proptest.SPlain, plains("a", 1, 3, 4)...)
			d.Advance()
			if _, n := d.Held(); n != 2 {
				t.Fatalf("%d held, want 2", n)
			}
			topologytest.Pipe(d, proptest.SPlain, plains("a", 5)...) // a third held record: over the bound
			d.Advance()
			want := chainOf(1, 3, 4, 5)
			if policy != stream.GapSkip {
				want = chainOf(1)
			}
			if got := stateOf(t, table, "a"); got != want {
				t.Fatalf("table %+v, want %+v", got, want)
			}
			if _, n := d.Held(); n != 0 {
				t.Fatalf("%d held after the overflow", n)
			}
			dls := d.DeadLetters()
			if policy == stream.GapSkip && len(dls) != 0 || policy != stream.GapSkip && (len(dls) != 3 || dls[0].Reason != deadletter.ReasonHoldOverflow || !errors.Is(dls[0].Err, stream.ErrGap) && !strings.Contains(dls[0].Err.Error(), "given up")) {
				t.Fatalf("dead letters %v", dls)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(notices) != 1 || notices[0].From != 2 || notices[0].To != 2 || notices[0].Cause != stream.GapOverflow {
				t.Fatalf("notices %+v", notices)
			}
			// 2 arrives late: it is behind the gap given up, a duplicate.
			topologytest.Pipe(d, proptest.SPlain, plains("a", 2)...)
			d.Advance()
			if c := d.App().Stats()[0].Total; c.Duplicates != 1 {
				t.Fatalf("counters %+v", c)
			}
		})
	}
}

func TestResequencerPartitionBoundOverflowGivesUpAtOnce(t *testing.T) {
	topo, table, _ := proptest.ReseqTopology(nil, topology.WithGapPolicy(stream.GapSkip, time.Hour), topology.WithHoldLimits(100, 2))
	d := topologytest.NewDriver(t, topo)
	defer d.Close()
	topologytest.Pipe(d, proptest.SPlain, plains("a", 2)...)
	topologytest.Pipe(d, proptest.SPlain, plains("b", 2, 3)...)
	d.Advance()
	if got, want := stateOf(t, table, "b"), chainOf(2, 3); got != want {
		t.Fatalf("b: table %+v, want %+v (the partition's third hold gives b's gap up)", got, want)
	}
	if _, n := d.Held(); n != 1 {
		t.Fatalf("%d held, want a's one", n)
	}
}

func TestResequencerStartAtFirstSeen(t *testing.T) {
	topo, table, _ := proptest.ReseqTopology(nil, topology.WithSeqStart(stream.StartAtFirstSeen))
	d := topologytest.NewDriver(t, topo)
	defer d.Close()
	topologytest.Pipe(d, proptest.SPlain, plains("a", 100, 102, 101, 99)...)
	d.Advance()
	if got, want := stateOf(t, table, "a"), chainOf(100, 101, 102); got != want {
		t.Fatalf("table %+v, want %+v", got, want)
	}
	if c := d.App().Stats()[0].Total; c.Duplicates != 1 {
		t.Fatalf("counters %+v: 99 is before the first number seen", c)
	}
}

func TestResequencerRefusedOptions(t *testing.T) {
	cases := []struct {
		name string
		opt  topology.ResequenceOption
		want string
	}{
		{"start", topology.WithSeqStart(9), "topology.WithSeqStart"},
		{"policy", topology.WithGapPolicy(9, 0), "topology.WithGapPolicy"},
		{"wait with timeout", topology.WithGapPolicy(stream.GapWait, time.Second), "topology.WithGapPolicy"},
		{"negative timeout", topology.WithGapPolicy(stream.GapSkip, -time.Second), "topology.WithGapPolicy"},
		{"limits", topology.WithHoldLimits(0, 1), "topology.WithHoldLimits"},
		{"duplicates", topology.WithDuplicatePolicy(7), "topology.WithDuplicatePolicy"},
		{"notice", topology.WithGapNotice(nil), "topology.WithGapNotice"},
	}
	for _, c := range cases {
		topo, _, _ := proptest.ReseqTopology(nil, c.opt)
		if _, err := topo.Build(); err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, topology.ErrBuild) {
			t.Errorf("%s: Build: %v, want an error naming %s", c.name, err, c.want)
		}
	}
	topo := topology.New("noseq")
	src := topology.Source[string](topo, "log").Resequence()
	tab := topology.NewTable[string, int64](topo, "t", stream.JSON[int64]())
	topology.Project(topology.On(src, proptest.SFree), tab, func(n *int64, e proptest.SEv) error { return nil })
	if _, err := topo.Build(); err == nil || !strings.Contains(err.Error(), "stream.WithSequence") {
		t.Errorf("Resequence without sequenced types: %v", err)
	}
	if _, err := stream.DeclareFunc(1, proptest.SevKey, stream.WithSequence(proptest.SevSeq)).Envelope(proptest.SEv{K: "a"}); !errors.Is(err, stream.ErrBadSequence) {
		t.Errorf("Envelope of seq 0: %v", err)
	}
	if err := stream.DeclareFunc(1, proptest.SevKey, stream.WithSequence(proptest.SevSeq), stream.WithSequence(proptest.SevSeq)).Err(); err == nil {
		t.Errorf("Sequence twice accepted")
	}
	if err := stream.DeclareFunc(1, proptest.SevKey, stream.WithSequence(func(int) uint64 { return 1 })).Err(); err == nil || !strings.Contains(err.Error(), "Sequence") {
		t.Errorf("mistyped Sequence: %v", err)
	}
}

func TestResequencerPublisherWritesSeqHeader(t *testing.T) {
	env, err := proptest.SPlain.Envelope(proptest.SEv{K: "a", Seq: 42})
	if err != nil || !env.Headers.HasSeq || env.Headers.Seq != 42 {
		t.Fatalf("envelope %+v, %v", env.Headers, err)
	}
	fields, err := env.Headers.AppendFields(nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fields {
		if f.Name == connector.HeaderSeq && binary.LittleEndian.Uint64(f.Value) == 42 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no strand-seq field in %v", fields)
	}
}

// TestResequencerNextNumbersSurviveDeltaFolding runs more batches than the
// delta rows of next numbers keep (so batches fold them into key rows),
// with restarts between, and duplicates of every applied number: none is
// applied twice, whichever row holds its key's next number.
func TestResequencerNextNumbersSurviveDeltaFolding(t *testing.T) {
	topo, table, _ := proptest.ReseqTopology(nil)
	d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(1))
	defer d.Close()
	keys := []string{"a", "b", "c"}
	want := map[string][]uint64{}
	for s := uint64(1); s <= 100; s++ {
		for i, k := range keys {
			if (int(s)+i)%3 == 0 {
				continue
			}
			topologytest.Pipe(d, proptest.SPlain, plains(k, uint64(len(want[k])+1))...)
			want[k] = append(want[k], uint64(len(want[k])+1))
		}
		if s%37 == 0 {
			d.Advance()
			d.Restart()
		}
	}
	d.Advance()
	d.Restart()
	for _, k := range keys {
		topologytest.Pipe(d, proptest.SPlain, plains(k, want[k]...)...) // all duplicates now
	}
	d.Advance()
	for _, k := range keys {
		if got, w := stateOf(t, table, k), chainOf(want[k]...); got != w {
			t.Fatalf("key %s: table %+v, want the chain of %d numbers", k, got, len(want[k]))
		}
	}
	if c := d.App().Stats()[0].Total; c.Duplicates != uint64(len(want["a"])+len(want["b"])+len(want["c"])) {
		t.Fatalf("counters %+v", c)
	}
}

// TestResequencerAbandonedBatchIsRolledBack: a batch abandoned before its
// commit (its context ends while it runs) leaves the re-sequencer as it
// was, so processing the same records again applies them, in order, as
// Task.Process promises; nothing is taken for a duplicate or held twice.
func TestResequencerAbandonedBatchIsRolledBack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	topo := topology.New("reseq-abandon")
	src := topology.Source[string](topo, "log").Resequence()
	table := topology.NewTable[string, proptest.PState](topo, "state", stream.JSON[proptest.PState]())
	topology.Project(topology.On(src, proptest.SPlain), table, func(s *proptest.PState, e proptest.SEv) error {
		once.Do(cancel)
		proptest.FoldPlain(s, proptest.PEv{N: int(e.Seq)})
		return nil
	})
	d := newTaskDriver(t, topo)
	task := d.Task("log", 0)
	var recs []connector.Record
	for i, s := range []uint64{2, 1, 4} {
		r := seqRecord(t, proptest.SPlain, proptest.SEv{K: "a", Seq: s}, s, true)
		r.Offset = uint64(i)
		recs = append(recs, r)
	}
	if _, err := task.Process(ctx, recs); err == nil {
		t.Fatal("the abandoned batch committed")
	}
	if _, n, _, _ := task.HeldStats(); n != 0 {
		t.Fatalf("%d held after an abandoned batch", n)
	}
	res, err := task.Process(context.Background(), recs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Duplicates != 0 || len(res.Resequenced) != 2 || res.LetThrough != 1 {
		t.Fatalf("result %+v", res)
	}
	if got, want := stateOf(t, table, "a"), chainOf(1, 2); got != want {
		t.Fatalf("table %+v, want %+v", got, want)
	}
	if _, n, _, _ := task.HeldStats(); n != 1 {
		t.Fatalf("%d held, want 4 alone", n)
	}
}
