package proptest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// TestPropertyResequencedTablesEqualSequenceOrderFold: random per-key
// sequences of five types with every fence, with missing numbers, shuffled
// within a random window, with duplicate copies, handler failures, random
// batch boundaries, partitions and restarts, under each gap policy: every
// key's table equals the sequential fold in sequence order of exactly the
// records the policy applies; duplicates are dead-lettered, never applied;
// held records and gap notices are exactly the expected ones.
func TestPropertyResequencedTablesEqualSequenceOrderFold(t *testing.T) {
	t.Parallel() // see parallel_test.go
	rapid.Check(t, func(rt *rapid.T) {
		policy := rapid.SampledFrom([]stream.GapPolicy{stream.GapWait, stream.GapSkip, stream.GapDeadLetter}).Draw(rt, "policy")
		nkeys := rapid.IntRange(1, 4).Draw(rt, "keys")
		fl := &Flaky{FailOn: map[int]bool{}, Failed: map[int]bool{}}
		type rec struct {
			ty int // index into STypes, -1: unsequenced
			ev SEv
		}
		var perKey [][]rec
		present := map[string][]uint64{}
		missing := map[string]map[uint64]bool{}
		id := 0
		for k := range nkeys {
			key := fmt.Sprintf("k%d", k)
			missing[key] = map[uint64]bool{}
			n := rapid.IntRange(0, SoakLen(20, 40)).Draw(rt, "len")
			var rs []rec
			for s := uint64(1); s <= uint64(n); s++ {
				id++
				if rapid.IntRange(0, 11).Draw(rt, "missing?") == 0 {
					missing[key][s] = true
					continue
				}
				ty := rapid.IntRange(0, len(STypes)-1).Draw(rt, "type")
				if rapid.IntRange(0, 14).Draw(rt, "fail?") == 0 {
					fl.FailOn[id] = true
				}
				rs = append(rs, rec{ty, SEv{K: key, Seq: s, N: id, Amt: int64(rapid.IntRange(-3, 3).Draw(rt, "amt")), Count: 1}})
				present[key] = append(present[key], s)
				if rapid.IntRange(0, 9).Draw(rt, "free?") == 0 {
					id++
					rs = append(rs, rec{-1, SEv{K: key, N: id, Amt: 1}})
				}
			}
			perKey = append(perKey, rs)
		}
		// Interleave the keys, then displace within a window and add copies.
		var log []rec
		for {
			var live []int
			for k, rs := range perKey {
				if len(rs) > 0 {
					live = append(live, k)
				}
			}
			if len(live) == 0 {
				break
			}
			k := rapid.SampledFrom(live).Draw(rt, "next key")
			log = append(log, perKey[k][0])
			perKey[k] = perKey[k][1:]
		}
		window := rapid.IntRange(0, 10).Draw(rt, "window")
		for i := range log {
			if window == 0 {
				break
			}
			j := rapid.IntRange(i, min(i+window, len(log)-1)).Draw(rt, "swap")
			log[i], log[j] = log[j], log[i]
		}
		dups := 0
		for i := 0; i < len(log); i++ {
			if log[i].ty >= 0 && rapid.IntRange(0, 9).Draw(rt, "dup?") == 0 {
				at := rapid.IntRange(i+1, len(log)).Draw(rt, "dup at")
				log = slices.Insert(log, at, log[i])
				dups++
				i++ // never copy a copy right away
			}
		}

		// Reference, per key, in sequence order.
		want := map[string]PState{}
		wantHeld := map[string][]uint64{}
		wantGaps := map[string][]gapRange{}
		wantGapDL := 0
		wantFree := map[string]int64{}
		byKeySeq := map[string]map[uint64]rec{}
		for _, r := range log {
			if r.ty < 0 {
				wantFree[r.ev.K] += r.ev.Amt
				continue
			}
			if byKeySeq[r.ev.K] == nil {
				byKeySeq[r.ev.K] = map[uint64]rec{}
			}
			byKeySeq[r.ev.K][r.ev.Seq] = r
		}
		for key, seqs := range present {
			slices.Sort(seqs)
			last := seqs[len(seqs)-1]
			gapped := false
			for s := uint64(1); s <= last; s++ {
				if missing[key][s] {
					from := s
					for missing[key][s+1] {
						s++
					}
					wantGaps[key] = append(wantGaps[key], gapRange{from, s})
					gapped = true
					continue
				}
				r := byKeySeq[key][s]
				switch {
				case !gapped || policy == stream.GapSkip:
					st := want[key]
					STypes[r.ty].Fold(&st, r.ev)
					want[key] = st
				case policy == stream.GapWait:
					wantHeld[key] = append(wantHeld[key], s)
				default:
					wantGapDL++
				}
			}
			if policy == stream.GapWait {
				wantGaps[key] = nil
			}
		}

		sizes := rapid.SliceOfN(rapid.IntRange(1, 30), 1, 20).Draw(rt, "batch sizes")
		partitions := uint32(rapid.IntRange(1, 3).Draw(rt, "partitions"))
		restartEvery := rapid.IntRange(0, 6).Draw(rt, "restart every")
		dir, err := os.MkdirTemp("", "strand-reseq-property-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		timeout := time.Duration(0)
		if policy != stream.GapWait {
			timeout = time.Hour
		}
		topo, table, free := ReseqTopology(fl, topology.WithGapPolicy(policy, timeout), topology.WithDuplicatePolicy(stream.DeadLetterDuplicates))
		next := 0
		d := topologytest.NewDriver(t, topo, topologytest.WithDir(dir), topologytest.WithPartitions(partitions),
			topologytest.WithBatchSizes(func() int { s := sizes[next%len(sizes)]; next++; return s }))
		defer d.Close()
		for _, r := range log {
			decl := SFree
			if r.ty >= 0 {
				decl = STypes[r.ty].Decl
			}
			topologytest.Pipe(d, decl, r.ev)
		}
		steps := 0
		run := func() {
			for round := 0; d.Lag() > 0 || Parked(d, partitions) > 0; round++ {
				if round > 20000 {
					rt.Fatalf("no progress: lag %d, parked %d", d.Lag(), Parked(d, partitions))
				}
				if !d.Step() {
					d.AdvanceClock(time.Millisecond)
				}
				steps++
				if restartEvery > 0 && steps%restartEvery == 0 {
					d.Restart()
				}
			}
		}
		run()
		if policy != stream.GapWait {
			d.AdvanceClock(2 * timeout)
			d.Step()
			run()
		}

		ctx := context.Background()
		got := map[string]PState{}
		if err := table.Scan(ctx, func(k string, v PState) bool { got[k] = v; return true }); err != nil {
			rt.Fatal(err)
		}
		for k, w := range want {
			if g := got[k]; g != w {
				rt.Fatalf("key %s: table %+v, fold in sequence order %+v", k, g, w)
			}
		}
		if len(got) != len(want) {
			rt.Fatalf("table has %d keys, fold %d", len(got), len(want))
		}
		for k, w := range wantFree {
			if g, _, _ := free.Get(ctx, k); g != w {
				rt.Fatalf("key %s: unsequenced total %d, want %d", k, g, w)
			}
		}
		for key := range present {
			p := PartitionOf(key, partitions)
			held, err := d.App().Held(ctx, "log", p, []byte(key))
			if err != nil {
				rt.Fatal(err)
			}
			var hs []uint64
			for _, h := range held {
				hs = append(hs, h.Headers.Seq)
			}
			if !slices.Equal(hs, wantHeld[key]) {
				rt.Fatalf("key %s: held %v, want %v", key, hs, wantHeld[key])
			}
			gaps, err := d.App().Gaps(ctx, "log", p, []byte(key))
			if err != nil {
				rt.Fatal(err)
			}
			var gs []gapRange
			for _, g := range gaps {
				gs = append(gs, gapRange{g.From, g.To})
			}
			if !slices.Equal(gs, wantGaps[key]) {
				rt.Fatalf("key %s: gaps %v, want %v", key, gs, wantGaps[key])
			}
		}
		reasons := map[deadletter.Reason]int{}
		for _, dl := range d.DeadLetters() {
			reasons[dl.Reason]++
		}
		if reasons[deadletter.ReasonDuplicate] != dups || reasons[deadletter.ReasonGapTimeout] != wantGapDL || len(reasons) > 2 {
			rt.Fatalf("dead letters by reason %v; want %d duplicates, %d gap timeouts", reasons, dups, wantGapDL)
		}
	})
}
