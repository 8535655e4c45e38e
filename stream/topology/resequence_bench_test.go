package topology_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// seqBankDecls are the benchmark's binary declarations with Sequence on
// every type. The consumer re-sequences from the strand-seq header alone
// and never calls the functions; the records are built with the header
// set directly.
func seqBankDecls() bankDecls {
	bin := newBankDecls(true)
	return bankDecls{
		opened: stream.DeclareFunc(1, func(e bOpened) uint64 { return e.Account }, stream.WithFence(planner.Acquire),
			stream.WithPayload(bin.opened.PayloadCodec()), stream.WithSequence(func(bOpened) uint64 { return 1 })),
		deposited: stream.DeclareFunc(2, func(e bDeposited) uint64 { return e.Account }, stream.WithPayload(bin.deposited.PayloadCodec()),
			stream.WithReduce(algebra.Sum(func(e bDeposited) int64 { return e.Amount }, func(e bDeposited, n int64) bDeposited { e.Amount = n; return e })),
			stream.WithSequence(func(bDeposited) uint64 { return 1 })),
		withdrawn: stream.DeclareFunc(3, func(e bWithdrawn) uint64 { return e.Account }, stream.WithPayload(bin.withdrawn.PayloadCodec()),
			stream.WithReduce(algebra.Sum(func(e bWithdrawn) int64 { return e.Amount }, func(e bWithdrawn, n int64) bWithdrawn { e.Amount = n; return e })),
			stream.WithSequence(func(bWithdrawn) uint64 { return 1 })),
		closed: stream.DeclareFunc(4, func(e bClosed) uint64 { return e.Account }, stream.WithFence(planner.Release),
			stream.WithPayload(bin.closed.PayloadCodec()), stream.WithSequence(func(bClosed) uint64 { return 1 })),
	}
}

// displacedRecords numbers each account's records in log order (strand-seq)
// and moves a share of them up to maxLate positions later; offsets are then
// renumbered in the new order.
func displacedRecords(recs []connector.Record, share float64, maxLate int, seed uint64) []connector.Record {
	seqs := map[string]uint64{}
	for i := range recs {
		seqs[string(recs[i].Headers.Key)]++
		recs[i].Headers.Seq, recs[i].Headers.HasSeq = seqs[string(recs[i].Headers.Key)], true
	}
	if share == 0 {
		return recs
	}
	r := rand.New(rand.NewPCG(seed, 5))
	type late struct {
		at  int
		rec connector.Record
	}
	var pending []late
	out := make([]connector.Record, 0, len(recs))
	for i, rec := range recs {
		if r.Float64() < share {
			pending = append(pending, late{i + 1 + r.IntN(maxLate), rec})
		} else {
			out = append(out, rec)
		}
		keep := pending[:0]
		for _, l := range pending {
			if l.at <= i {
				out = append(out, l.rec)
			} else {
				keep = append(keep, l)
			}
		}
		pending = keep
	}
	for _, l := range pending {
		out = append(out, l.rec)
	}
	for i := range out {
		out[i].Offset = uint64(i)
	}
	return out
}

// runReseqVariant processes recs through one pipelined Task (Submit) and
// returns events/s, the most records held at once, the peak RSS (MB) and
// the process's CPU time per event (ns).
func runReseqVariant(b *testing.B, decls bankDecls, resequence bool, recs []connector.Record, ref map[uint64]balance, batch int) (float64, int, float64, float64) {
	ctx := context.Background()
	topo, tab := bankTopology(decls)
	if resequence {
		topo, tab = bankTopologyReseq(decls)
	}
	prog, err := topo.Build()
	if err != nil {
		b.Fatal(err)
	}
	db, err := state.Open(b.TempDir(), state.WithDurability(state.Sync), state.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := prog.Attach(db); err != nil {
		b.Fatal(err)
	}
	task, err := prog.NewTask(ctx, db, prog.Sources()[0], 0)
	if err != nil {
		b.Fatal(err)
	}
	resetPeakRSS()
	maxHeld := 0
	var pend *executor.Pending
	t0, c0 := time.Now(), cpuTime()
	for i := 0; i < len(recs); i += batch {
		p, err := task.Submit(ctx, recs[i:min(i+batch, len(recs))])
		if err != nil {
			b.Fatal(err)
		}
		if pend != nil {
			if _, err := pend.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		pend = p
		_, held, _, _ := task.HeldStats()
		maxHeld = max(maxHeld, held)
	}
	if _, err := pend.Wait(); err != nil {
		b.Fatal(err)
	}
	elapsed, cpu := time.Since(t0), cpuTime()-c0
	rss := peakRSS()
	if _, held, _, _ := task.HeldStats(); held != 0 {
		b.Fatalf("%d records still held", held)
	}
	checkBank(b, tab, ref)
	return float64(len(recs)) / elapsed.Seconds(), maxHeld, rss, float64(cpu.Nanoseconds()) / float64(len(recs))
}

// BenchmarkResequencer measures the accounts workload (binary payloads,
// sync commits, one partition, pipelined Task.Submit, batches of 10,000)
// three ways, interleaved round by round so the ratios come from one run
// on a shared machine: without the re-sequencer ("off"), with it on over
// in-order input ("inorder"), and with it on over input where 10% of the
// events are displaced by up to 64 positions ("displaced"). It reports
// events/s of each (median of the rounds), the ratios inorder/off and
// displaced/inorder (median of the per-round ratios), the same ratios of
// events per CPU-second (less sensitive to other load on the machine),
// the most records held at once and the peak RSS. STRAND_BENCH_EVENTS and
// STRAND_BENCH_ROUNDS change the size (default 500,000 events, 3 rounds);
// STRAND_BENCH_ONLY=off|inorder|displaced runs one variant (to profile it).
//
//	go test -run '^$' -bench Resequencer -benchtime 1x ./stream/topology/
func BenchmarkResequencer(b *testing.B) {
	n := envInt("STRAND_BENCH_EVENTS", 500_000)
	rounds := envInt("STRAND_BENCH_ROUNDS", 3)
	batch := envInt("STRAND_BENCH_BATCH", 10_000)
	ops := bankWorkload(n, 10_000, 1)
	ref := bankReference(ops)
	plain := newBankDecls(true)
	seqd := seqBankDecls()
	base := bankRecords(b, plain, ops, 0)
	inorder := displacedRecords(slices.Clone(base), 0, 0, 0)
	displaced := displacedRecords(slices.Clone(base), 0.10, 64, 9)
	for b.Loop() {
		var off, in, dis, r1, r2, rssOff, rssIn, rssDis, cOff, cIn, cDis, c1, c2 []float64
		maxHeld := 0
		for range rounds {
			if only := os.Getenv("STRAND_BENCH_ONLY"); only != "" { // profiling one variant
				v := map[string][]connector.Record{"off": base, "inorder": inorder, "displaced": displaced}[only]
				runReseqVariant(b, map[bool]bankDecls{true: plain, false: seqd}[only == "off"], only != "off", v, ref, batch)
				continue
			}
			o, _, ro, co := runReseqVariant(b, plain, false, base, ref, batch)
			i, _, ri, ci := runReseqVariant(b, seqd, true, inorder, ref, batch)
			d, h, rd, cd := runReseqVariant(b, seqd, true, displaced, ref, batch)
			cOff, cIn, cDis = append(cOff, co), append(cIn, ci), append(cDis, cd)
			c1, c2 = append(c1, co/ci), append(c2, ci/cd)
			off, in, dis = append(off, o), append(in, i), append(dis, d)
			r1, r2 = append(r1, i/o), append(r2, d/i)
			rssOff, rssIn, rssDis = append(rssOff, ro), append(rssIn, ri), append(rssDis, rd)
			maxHeld = max(maxHeld, h)
		}
		if len(off) == 0 {
			continue
		}
		b.ReportMetric(median(off), "off-events/s")
		b.ReportMetric(median(in), "inorder-events/s")
		b.ReportMetric(median(dis), "displaced-events/s")
		b.ReportMetric(median(r1), "inorder/off")
		b.ReportMetric(median(r2), "displaced/inorder")
		b.ReportMetric(float64(maxHeld), "max-held")
		b.ReportMetric(median(cOff), "off-cpu-ns/event")
		b.ReportMetric(median(cIn), "inorder-cpu-ns/event")
		b.ReportMetric(median(cDis), "displaced-cpu-ns/event")
		b.ReportMetric(median(c1), "inorder/off-by-cpu")
		b.ReportMetric(median(c2), "displaced/inorder-by-cpu")
		b.ReportMetric(median(rssOff), "off-peak-RSS-MB")
		b.ReportMetric(median(rssIn), "inorder-peak-RSS-MB")
		b.ReportMetric(median(rssDis), "displaced-peak-RSS-MB")
		b.Logf("rounds: off %.0f, inorder %.0f, displaced %.0f events/s; inorder/off %.2f, displaced/inorder %.2f; cpu-ns/event off %.0f inorder %.0f displaced %.0f",
			off, in, dis, r1, r2, cOff, cIn, cDis)
	}
}
