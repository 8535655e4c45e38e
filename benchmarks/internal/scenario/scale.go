package scenario

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/strand-io/strand/benchmarks/internal/naive"
	"github.com/strand-io/strand/benchmarks/internal/sysstat"
	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
)

// ScaleOptions configure the scale scenario: the accounts workload with
// every one of Workload.Accounts keys touched (workload.Config.Cover), run
// through one executor.Task per partition or the naive consumer, as the core
// scenario does, with the input held off the Go heap (workload.Packed) and
// encoded batch by batch.
type ScaleOptions struct {
	Workload workload.Config
	Codec    workload.Codec
	// Batch is the records per partition per Task.Submit (and per naive
	// commit).
	Batch int
	// Dir is where the store goes (a fresh subdirectory is made).
	Dir string
	// CPUProfile, when set, receives a CPU profile of the timed section.
	CPUProfile string
	// Workers bounds keys run at once per partition (0: GOMAXPROCS).
	Workers int
	// MemProfile, when set, receives a heap profile taken right after the
	// timed section (before the store closes): what the processing holds.
	MemProfile string
	// ValueCache, when positive, is the store's value cache budget in
	// bytes (state.WithValueCacheSize); 0 keeps the default.
	ValueCache int64
	// Timeline, when set, names a CSV file that receives the strand run's
	// samples, one a second (see timeline); the per-tenth rates are in
	// Result.Extra either way.
	Timeline string
}

// The scale scenario's memory figures, in Result.Extra (bytes):
//
//   - "proc_rss": peak resident memory during the run minus the resident
//     memory just before the store was opened (after the input was built,
//     a GC and returning free memory to the OS). The input is resident
//     before, so it is not in it; the store (Pebble's memtables and block
//     cache, outside the Go heap), the Go heap the processing grows and the
//     batches being encoded are.
//   - "heap_peak": the largest live-and-unswept Go heap (runtime/metrics
//     /memory/classes/heap/objects:bytes, sampled every 10 ms) minus the
//     same figure before the store was opened. The input lives outside the
//     Go heap, so it neither shows here nor raises the GC's heap goal.
//   - "batches": the record buffers and encoding arenas the harness fed
//     the batches from (their capacity at the end of the run; part of
//     proc_rss and heap_peak, and the harness's, not the processing's).
//
// Result.InputBytes is the resident size of the input (events and the
// reference), for scale.
const heapObjects = "/memory/classes/heap/objects:bytes"

// scaleRun is the setup shared by the scale measurements.
type scaleRun struct {
	res      Result
	in       *workload.Packed
	dir      string
	baseRSS  int64
	baseHeap uint64
	peakHeap chan uint64
	stopHeap chan struct{}
	buffers  atomic.Int64 // bytes of the feeders' record buffers and arenas
	// committed, when set, counts the events of committed batches.
	committed *atomic.Int64
}

// addBuffers counts a feeder's buffers towards the "batches" figure.
func (s *scaleRun) addBuffers(recs []connector.Record, arena []byte) {
	s.buffers.Add(int64(cap(recs))*int64(unsafe.Sizeof(connector.Record{})) + int64(cap(arena)))
}

func newScaleRun(o ScaleOptions, variant string) (*scaleRun, error) {
	cfg := o.Workload
	cfg.Cover = true
	in, err := workload.Pack(cfg, workload.NewDecls(o.Codec))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(o.Dir, "scale-"+variant+"-")
	if err != nil {
		_ = in.Close()
		return nil, err
	}
	s := &scaleRun{
		res: Result{Scenario: "scale", Variant: variant, Codec: string(o.Codec), Events: in.Len(), InputBytes: in.Bytes(),
			Extra: map[string]float64{"keys": float64(in.Touched()), "skew": cfg.Skew}},
		in:  in,
		dir: dir,
	}
	m := in.Mix()
	s.res.Note = fmt.Sprintf("%d keys touched, %s", in.Touched(), m.String())
	runtime.GC()
	debug.FreeOSMemory()
	s.baseRSS = sysstat.RSS()
	s.baseHeap = readHeap()
	sysstat.ResetPeakRSS()
	s.peakHeap, s.stopHeap = make(chan uint64, 1), make(chan struct{})
	go func() {
		peak := s.baseHeap
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				peak = max(peak, readHeap())
			case <-s.stopHeap:
				s.peakHeap <- max(peak, readHeap())
				return
			}
		}
	}()
	return s, nil
}

func readHeap() uint64 {
	sample := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// memory fills the memory figures; call it right after the timed section.
func (s *scaleRun) memory() {
	close(s.stopHeap)
	peak := <-s.peakHeap
	s.stopHeap = nil
	s.res.Extra["proc_rss"] = float64(max(sysstat.PeakRSS()-s.baseRSS, 0))
	s.res.Extra["heap_peak"] = float64(peak - min(peak, s.baseHeap))
	s.res.Extra["batches"] = float64(s.buffers.Load())
	if s.res.CPUSeconds > 0 && s.res.Events > 0 {
		s.res.Extra["cpu_us_per_event"] = s.res.CPUSeconds * 1e6 / float64(s.res.Events)
	}
}

func (s *scaleRun) close() {
	if s.stopHeap != nil {
		close(s.stopHeap)
		<-s.peakHeap
	}
	_ = s.in.Close()
	_ = os.RemoveAll(s.dir)
}

// ScaleStrand runs the scale workload through one executor.Task per
// partition, all partitions concurrently, batches of o.Batch records through
// Task.Submit, sync commits, on a fresh store, then checks every account
// against the reference.
func ScaleStrand(ctx context.Context, o ScaleOptions) (Result, error) {
	s, err := newScaleRun(o, "strand")
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	res := &s.res
	topo, err := workload.NewTopology(s.in.Decls, o.Workers)
	if err != nil {
		return *res, err
	}
	n := s.in.Partitions()
	topo.SetPartitions(n)
	sopts := []state.Option{state.WithDurability(state.Sync), state.WithLogger(quietLogger())}
	if o.ValueCache > 0 {
		sopts = append(sopts, state.WithValueCacheSize(o.ValueCache))
	}
	db, err := state.Open(s.dir, sopts...)
	if err != nil {
		return *res, err
	}
	defer db.Close()
	if err := topo.Program.Attach(db); err != nil {
		return *res, err
	}
	tasks := make([]*executor.Task, n)
	for p := range n {
		if tasks[p], err = topo.Program.NewTask(ctx, db, workload.Source, p, executor.WithLogger(quietLogger())); err != nil {
			return *res, err
		}
	}
	m, err := startScaleMeasure(o.CPUProfile)
	if err != nil {
		return *res, err
	}
	tl := startTimeline(db, s.dir)
	s.committed = &tl.committed
	commits, err := eachPartition(n, func(p uint32) (int, error) { return submitPacked(ctx, s, tasks[p], p, o.Batch) })
	m.stop(res)
	s.memory()
	storeStats(res, db.Stats())
	if terr := tl.finish(res, int64(s.in.Len()), o.Timeline); terr != nil && err == nil {
		err = terr
	}
	if perr := writeHeapProfile(o.MemProfile); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return *res, err
	}
	res.Commits = commits
	if err := s.in.Verify(func(fn func(workload.AccountID, workload.Account) bool) error {
		return topo.Balances.Scan(ctx, fn)
	}); err != nil {
		return *res, err
	}
	res.Verified = true
	return *res, nil
}

// ScaleNaive runs the scale workload through the naive consumer, partition
// after partition on one goroutine, one synced commit per batch.
func ScaleNaive(ctx context.Context, o ScaleOptions) (Result, error) {
	s, err := newScaleRun(o, "naive")
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	res := &s.res
	st, err := naive.Open(s.dir, s.in.Decls, true)
	if err != nil {
		return *res, err
	}
	defer st.Close()
	m, err := startScaleMeasure(o.CPUProfile)
	if err != nil {
		return *res, err
	}
	var recs []connector.Record
	var arena []byte
	for p := range s.in.Partitions() {
		for off := 0; off < s.in.PartitionLen(p); off += o.Batch {
			if err := ctx.Err(); err != nil {
				return *res, err
			}
			if recs, arena, err = s.in.Records(recs[:0], arena, p, off, o.Batch); err != nil {
				return *res, err
			}
			if err := st.ApplyBatch(p, recs); err != nil {
				return *res, err
			}
			res.Commits++
		}
	}
	m.stop(res)
	s.addBuffers(recs, arena)
	s.memory()
	if err := writeHeapProfile(o.MemProfile); err != nil {
		return *res, err
	}
	if err := s.in.Verify(st.ScanBalances); err != nil {
		return *res, err
	}
	res.Verified = true
	return *res, nil
}

// ScaleInput encodes the scale workload's batches, all partitions
// concurrently, and drops them: the harness's own share of the CPU of
// ScaleStrand and ScaleNaive.
func ScaleInput(ctx context.Context, o ScaleOptions) (Result, error) {
	s, err := newScaleRun(o, "input")
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	res := &s.res
	m, err := startScaleMeasure(o.CPUProfile)
	if err != nil {
		return *res, err
	}
	_, err = eachPartition(s.in.Partitions(), func(p uint32) (int, error) {
		var recs []connector.Record
		var arena []byte
		var err error
		for off := 0; off < s.in.PartitionLen(p) && ctx.Err() == nil; off += o.Batch {
			if recs, arena, err = s.in.Records(recs[:0], arena, p, off, o.Batch); err != nil {
				return 0, err
			}
		}
		s.addBuffers(recs, arena)
		return 0, ctx.Err()
	})
	m.stop(res)
	s.memory()
	res.Verified = err == nil
	return *res, err
}

// The store figures of a strand run, in Result.Extra (see state.Stats):
// "vc_hit" (value cache hits per first read of a key in a batch), "vc_entries",
// "filter_skips" and "pebble_reads" / "pebble_found" (reads per event),
// "bc_hit" (Pebble block cache hit rate), "read_amp", "compaction_debt"
// (bytes), "compactions", "flushes", "stalls", "stall_s", "live_bytes".
func storeStats(res *Result, st state.Stats) {
	x := res.Extra
	per := func(n int64) float64 {
		if res.Events == 0 {
			return 0
		}
		return float64(n) / float64(res.Events)
	}
	if n := st.ValueCacheHits + st.ValueCacheMisses; n > 0 {
		x["vc_hit"] = float64(st.ValueCacheHits) / float64(n)
	}
	if n := st.BlockCacheHits + st.BlockCacheMisses; n > 0 {
		x["bc_hit"] = float64(st.BlockCacheHits) / float64(n)
	}
	x["vc_entries"] = float64(st.ValueCacheEntries)
	x["vc_bytes"] = float64(st.ValueCacheBytes)
	x["filter_skips"] = per(st.KeyFilterSkips)
	x["pebble_reads"] = per(st.PebbleReads)
	x["pebble_found"] = per(st.PebbleReadsFound)
	x["read_amp"] = float64(st.ReadAmp)
	x["compaction_debt"] = float64(st.CompactionDebt)
	x["compactions"] = float64(st.Compactions)
	x["flushes"] = float64(st.Flushes)
	x["stalls"] = float64(st.WriteStalls)
	x["stall_s"] = st.WriteStallTime.Seconds()
	x["live_bytes"] = float64(st.LiveBytes)
}

// startScaleMeasure is startMeasure without its GC and peak reset (the
// scale run did them before opening the store, which is part of what it
// measures).
func startScaleMeasure(profile string) (*measure, error) {
	stop, err := startProfile(profile)
	if err != nil {
		return nil, err
	}
	return &measure{start: time.Now(), cpu: sysstat.CPUTime(), profile: stop}, nil
}

// eachPartition runs fn for partitions 0..n-1 concurrently and returns the
// sum of what they return, or the first error.
func eachPartition(n uint32, fn func(p uint32) (int, error)) (int, error) {
	var wg sync.WaitGroup
	counts := make([]int, n)
	errs := make([]error, n)
	for p := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[p], errs[p] = fn(p)
		}()
	}
	wg.Wait()
	total := 0
	for p := range n {
		if errs[p] != nil {
			return 0, fmt.Errorf("partition %d: %w", p, errs[p])
		}
		total += counts[p]
	}
	return total, nil
}

// submitPacked feeds partition p of in to task through Task.Submit, with two
// record buffers and arenas: a batch's records stay untouched until its
// commit is known, while the next one executes.
func submitPacked(ctx context.Context, s *scaleRun, task *executor.Task, p uint32, batch int) (int, error) {
	in := s.in
	commits := 0
	var recs [2][]connector.Record
	var arenas [2][]byte
	defer func() {
		for k := range recs {
			s.addBuffers(recs[k], arenas[k])
		}
	}()
	var pending *executor.Pending
	wait := func(off int) error {
		if pending == nil {
			return nil
		}
		r, err := pending.Wait()
		pending = nil
		if err == nil {
			err = checkResult(r)
		}
		if err != nil {
			return fmt.Errorf("batch before offset %d: %w", off, err)
		}
		commits++
		if s.committed != nil {
			s.committed.Add(int64(r.Records))
		}
		return nil
	}
	for k, off := 0, int(task.Next()); off < in.PartitionLen(p); k ^= 1 {
		var err error
		if recs[k], arenas[k], err = in.Records(recs[k][:0], arenas[k], p, off, batch); err != nil {
			_ = wait(off)
			return commits, err
		}
		next, err := task.Submit(ctx, recs[k])
		if err != nil {
			_ = wait(off)
			return commits, fmt.Errorf("offset %d: %w", off, err)
		}
		if err := wait(off); err != nil {
			return commits, err
		}
		pending = next
		off += len(recs[k])
	}
	return commits, wait(in.PartitionLen(p))
}

// writeHeapProfile writes a heap profile to path (nothing when path is
// empty), after a GC so that in-use figures are live data.
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}
