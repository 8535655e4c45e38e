package topology_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/executor"

	"github.com/cockroachdb/pebble/v2"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// The accounts workload of issue 5: events over accounts with a Zipf skew,
// 90% deposits and withdrawals, the rest opens (Acquire) and closes
// (Release), processed with sync commits.

// bankEvent is the binary form shared by the benchmark's four event types:
// account (8 bytes) and amount (8 bytes), little-endian.
type bankEvent struct {
	Account uint64 `json:"account"`
	Amount  int64  `json:"amount"`
}

func (e bankEvent) AppendBinary(dst []byte) ([]byte, error) {
	dst = binary.LittleEndian.AppendUint64(dst, e.Account)
	return binary.LittleEndian.AppendUint64(dst, uint64(e.Amount)), nil
}

func (e *bankEvent) UnmarshalBinary(b []byte) error {
	if len(b) != 16 {
		return errors.New("bank event: want 16 bytes")
	}
	e.Account = binary.LittleEndian.Uint64(b)
	e.Amount = int64(binary.LittleEndian.Uint64(b[8:]))
	return nil
}

type (
	bOpened    struct{ bankEvent }
	bDeposited struct{ bankEvent }
	bWithdrawn struct{ bankEvent }
	bClosed    struct{ bankEvent }
)

// balance is the table value: 8-byte balance, open flag, open count.
type balance struct {
	Balance int64  `json:"balance"`
	Open    bool   `json:"open"`
	Opens   uint32 `json:"opens"`
}

func (v balance) AppendBinary(dst []byte) ([]byte, error) {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Balance))
	o := byte(0)
	if v.Open {
		o = 1
	}
	dst = append(dst, o)
	return binary.LittleEndian.AppendUint32(dst, v.Opens), nil
}

func (v *balance) UnmarshalBinary(b []byte) error {
	if len(b) != 13 {
		return errors.New("balance: want 13 bytes")
	}
	v.Balance = int64(binary.LittleEndian.Uint64(b))
	v.Open = b[8] == 1
	v.Opens = binary.LittleEndian.Uint32(b[9:])
	return nil
}

// binCodec adapts the embedded bankEvent's binary form to a wrapper type.
func binCodec[E any](wrap func(bankEvent) E, unwrap func(E) bankEvent) stream.Codec[E] {
	return stream.CodecFunc(
		func(dst []byte, e E) ([]byte, error) { return unwrap(e).AppendBinary(dst) },
		func(b []byte) (E, error) {
			var be bankEvent
			err := be.UnmarshalBinary(b)
			return wrap(be), err
		})
}

type bankDecls struct {
	opened    *stream.Event[uint64, bOpened]
	deposited *stream.Event[uint64, bDeposited]
	withdrawn *stream.Event[uint64, bWithdrawn]
	closed    *stream.Event[uint64, bClosed]
}

func newBankDecls(binaryPayload bool) bankDecls {
	payload := func(c any) stream.Option {
		switch c := c.(type) {
		case stream.Codec[bOpened]:
			return stream.WithPayload(c)
		case stream.Codec[bDeposited]:
			return stream.WithPayload(c)
		case stream.Codec[bWithdrawn]:
			return stream.WithPayload(c)
		case stream.Codec[bClosed]:
			return stream.WithPayload(c)
		}
		panic("codec")
	}
	var po, pd, pw, pc stream.Option
	if binaryPayload {
		po = payload(binCodec(func(b bankEvent) bOpened { return bOpened{b} }, func(e bOpened) bankEvent { return e.bankEvent }))
		pd = payload(binCodec(func(b bankEvent) bDeposited { return bDeposited{b} }, func(e bDeposited) bankEvent { return e.bankEvent }))
		pw = payload(binCodec(func(b bankEvent) bWithdrawn { return bWithdrawn{b} }, func(e bWithdrawn) bankEvent { return e.bankEvent }))
		pc = payload(binCodec(func(b bankEvent) bClosed { return bClosed{b} }, func(e bClosed) bankEvent { return e.bankEvent }))
	} else {
		po, pd = stream.WithPayload(stream.JSON[bOpened]()), stream.WithPayload(stream.JSON[bDeposited]())
		pw, pc = stream.WithPayload(stream.JSON[bWithdrawn]()), stream.WithPayload(stream.JSON[bClosed]())
	}
	return bankDecls{
		opened: stream.DeclareFunc(1, func(e bOpened) uint64 { return e.Account }, stream.WithFence(planner.Acquire), po),
		deposited: stream.DeclareFunc(2, func(e bDeposited) uint64 { return e.Account }, pd,
			stream.WithReduce(algebra.Sum(func(e bDeposited) int64 { return e.Amount }, func(e bDeposited, n int64) bDeposited { e.Amount = n; return e }))),
		withdrawn: stream.DeclareFunc(3, func(e bWithdrawn) uint64 { return e.Account }, pw,
			stream.WithReduce(algebra.Sum(func(e bWithdrawn) int64 { return e.Amount }, func(e bWithdrawn, n int64) bWithdrawn { e.Amount = n; return e }))),
		closed: stream.DeclareFunc(4, func(e bClosed) uint64 { return e.Account }, stream.WithFence(planner.Release), pc),
	}
}

func bankTopology(d bankDecls) (*topology.Topology, *topology.Table[uint64, balance]) {
	return bankTopologyOf(d, false)
}

// bankTopologyReseq is bankTopology with the re-sequencer on.
func bankTopologyReseq(d bankDecls) (*topology.Topology, *topology.Table[uint64, balance]) {
	return bankTopologyOf(d, true)
}

func bankTopologyOf(d bankDecls, resequence bool) (*topology.Topology, *topology.Table[uint64, balance]) {
	t := topology.New("bank-bench")
	src := topology.Source[uint64](t, "bank/accounts")
	if resequence {
		src.Resequence()
	}
	tab := topology.NewTable[uint64, balance](t, "balances", stream.Binary[balance]())
	topology.Project(topology.On(src, d.opened), tab, func(v *balance, e bOpened) error {
		v.Open = true
		v.Opens++
		return nil
	})
	topology.Project(topology.On(src, d.deposited), tab, func(v *balance, e bDeposited) error {
		v.Balance += e.Amount
		return nil
	})
	topology.Project(topology.On(src, d.withdrawn), tab, func(v *balance, e bWithdrawn) error {
		v.Balance -= e.Amount
		return nil
	})
	topology.Project(topology.On(src, d.closed), tab, func(v *balance, e bClosed) error {
		v.Open = false
		return nil
	})
	return t, tab
}

// bankOp is one generated event: kind 0 open, 1 deposit, 2 withdraw, 3 close.
type bankOp struct {
	kind    uint8
	account uint64
	amount  int64
}

func bankWorkload(n, accounts int, seed uint64) []bankOp {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	zipf := rand.NewZipf(r, 1.1, 1, uint64(accounts-1))
	ops := make([]bankOp, n)
	for i := range ops {
		op := bankOp{account: zipf.Uint64(), amount: int64(r.IntN(1000) + 1)}
		switch p := r.IntN(100); {
		case p < 45:
			op.kind = 1
		case p < 90:
			op.kind = 2
		case p < 95:
			op.kind = 0
		default:
			op.kind = 3
		}
		ops[i] = op
	}
	return ops
}

// bankReference folds ops sequentially, in log order.
func bankReference(ops []bankOp) map[uint64]balance {
	ref := map[uint64]balance{}
	for _, op := range ops {
		v := ref[op.account]
		switch op.kind {
		case 0:
			v.Open = true
			v.Opens++
		case 1:
			v.Balance += op.amount
		case 2:
			v.Balance -= op.amount
		case 3:
			v.Open = false
		}
		ref[op.account] = v
	}
	return ref
}

func pipeBank(d *taskDriver, decls bankDecls, ops []bankOp) {
	for _, op := range ops {
		e := bankEvent{Account: op.account, Amount: op.amount}
		switch op.kind {
		case 0:
			tdPipe(d, decls.opened, bOpened{e})
		case 1:
			tdPipe(d, decls.deposited, bDeposited{e})
		case 2:
			tdPipe(d, decls.withdrawn, bWithdrawn{e})
		case 3:
			tdPipe(d, decls.closed, bClosed{e})
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkAccounts runs the issue-5 accounts workload through the driver
// (sync commits) with binary and JSON payloads, and the naive baseline, and
// reports events/s and the peak RSS while processing. Events are piped in
// chunks of 100,000 (untimed) and committed records are dropped, as a
// broker's retention would, so memory reflects processing, not the test's
// copy of the log. STRAND_BENCH_EVENTS, STRAND_BENCH_ACCOUNTS and
// STRAND_BENCH_BATCH change the workload (default 1,000,000 events, 10,000
// accounts, batches of 10,000); STRAND_BENCH_PARTITIONS spreads the accounts
// over that many partitions, processed concurrently (default 1). The naive
// baseline is one sequential consumer whatever the partitions.
// STRAND_BENCH_NOSYNC=1 commits strand's batches without fsync, to measure
// what the fsyncs cost (the goals are for sync commits).
//
//	go test -run '^$' -bench Accounts -benchtime 1x ./stream/topology/
func BenchmarkAccounts(b *testing.B) {
	n := envInt("STRAND_BENCH_EVENTS", 1_000_000)
	accounts := envInt("STRAND_BENCH_ACCOUNTS", 10_000)
	batch := envInt("STRAND_BENCH_BATCH", 10_000)
	partitions := uint32(envInt("STRAND_BENCH_PARTITIONS", 1))
	durability := state.Sync
	if os.Getenv("STRAND_BENCH_NOSYNC") != "" {
		durability = state.NoSync // to measure what the fsyncs cost; the goal is for Sync
	}
	const chunk = 100_000
	ops := bankWorkload(n, accounts, 1)
	ref := bankReference(ops)
	for _, codec := range []string{"binary", "json"} {
		b.Run("strand-"+codec, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				decls := newBankDecls(codec == "binary")
				topo, tab := bankTopology(decls)
				d := newTaskDriver(b, topo, tdBatchSize(batch), tdPartitions(partitions),
					tdStateOptions(state.WithDurability(durability)))
				resetPeakRSS()
				m := driveChunks(b, d, n, chunk, func(from, to int) { pipeBank(d, decls, ops[from:to]) })
				m.report(b, n)
				b.ReportMetric(peakRSS(), "peak-RSS-MB")
				checkBank(b, tab, ref)
				d.Close()
				b.StartTimer()
			}
		})
		if partitions == 1 {
			b.Run("strand-pipelined-"+codec, func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					benchPipelined(b, ops, ref, codec == "binary", batch, durability)
					b.StartTimer()
				}
			})
		}
		b.Run("naive-"+codec, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				nv := openNaive(b, b.TempDir(), codec == "binary")
				resetPeakRSS()
				var m benchMeter
				for start := 0; start < n; start += chunk {
					recs := naiveRecords(ops[start:min(start+chunk, n)], codec == "binary")
					m.time(b, func() { nv.process(b, recs, batch) })
				}
				m.report(b, n)
				b.ReportMetric(peakRSS(), "peak-RSS-MB")
				nv.close()
				b.StartTimer()
			}
		})
	}
}

// benchPipelined runs the workload through the same Task as the driver,
// one partition, but with Task.Submit: each batch executes while the one
// before it commits (the driver calls Process, which returns only after its
// commit). Records are built in chunks of 100,000 (untimed), like the
// driver's piping.
func benchPipelined(b *testing.B, ops []bankOp, ref map[uint64]balance, binaryPayload bool, batch int, durability state.Durability) {
	ctx := context.Background()
	decls := newBankDecls(binaryPayload)
	topo, tab := bankTopology(decls)
	prog, err := topo.Build()
	if err != nil {
		b.Fatal(err)
	}
	db, err := state.Open(b.TempDir(), state.WithDurability(durability), state.WithLogger(slog.New(slog.DiscardHandler)))
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
	const chunk = 100_000
	var elapsed, cpu time.Duration
	var pend *executor.Pending
	for start := 0; start < len(ops); start += chunk {
		recs := bankRecords(b, decls, ops[start:min(start+chunk, len(ops))], uint64(start))
		t0, c0 := time.Now(), cpuTime()
		b.StartTimer()
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
		}
		if start+chunk >= len(ops) { // the last commit is part of the work
			if _, err := pend.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		elapsed += time.Since(t0)
		cpu += cpuTime() - c0
	}
	n := len(ops)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/event")
	b.ReportMetric(peakRSS(), "peak-RSS-MB")
	if next := task.Next(); next != uint64(n) {
		b.Fatalf("task next %d, want %d", next, n)
	}
	checkBank(b, tab, ref)
}

// bankRecords encodes ops as the records of one partition from offset
// first on.
func bankRecords(tb testing.TB, decls bankDecls, ops []bankOp, first uint64) []connector.Record {
	recs := make([]connector.Record, len(ops))
	for i, op := range ops {
		e := bankEvent{Account: op.account, Amount: op.amount}
		var env stream.Envelope
		var err error
		switch op.kind {
		case 0:
			env, err = decls.opened.Envelope(bOpened{e})
		case 1:
			env, err = decls.deposited.Envelope(bDeposited{e})
		case 2:
			env, err = decls.withdrawn.Envelope(bWithdrawn{e})
		case 3:
			env, err = decls.closed.Envelope(bClosed{e})
		}
		if err != nil {
			tb.Fatal(err)
		}
		recs[i] = connector.Record{Offset: first + uint64(i), Headers: env.Headers, Payload: env.Payload}
	}
	return recs
}

// benchMeter adds up the wall and CPU time of a benchmark run's timed
// parts, and reports them per event.
type benchMeter struct{ elapsed, cpu time.Duration }

// time runs f with the benchmark's timer on (it is off around it) and
// adds its wall and CPU time.
func (m *benchMeter) time(b *testing.B, f func()) {
	t0, c0 := time.Now(), cpuTime()
	b.StartTimer()
	f()
	b.StopTimer()
	m.elapsed += time.Since(t0)
	m.cpu += cpuTime() - c0
}

// report reports events/s and cpu-ns/event for n events.
func (m *benchMeter) report(b *testing.B, n int) {
	b.ReportMetric(float64(n)/m.elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(m.cpu.Nanoseconds())/float64(n), "cpu-ns/event")
}

// driveChunks feeds n events to d chunk by chunk: pipe(from, to) pipes
// events [from, to) (untimed), d.Advance processes them (timed), and the
// committed records are dropped, as a broker's retention would, so that
// memory reflects processing, not the test's copy of the log.
func driveChunks(b *testing.B, d *taskDriver, n, chunk int, pipe func(from, to int)) benchMeter {
	var m benchMeter
	for start := 0; start < n; start += chunk {
		pipe(start, min(start+chunk, n))
		m.time(b, d.Advance)
		d.DropCommitted()
	}
	return m
}

// cpuTime returns the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resetPeakRSS resets the kernel's peak-RSS mark of this process (Linux).
func resetPeakRSS() {
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS returns the process's peak RSS in MB since resetPeakRSS (VmHWM).
func peakRSS() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

func checkBank(b *testing.B, tab *topology.Table[uint64, balance], ref map[uint64]balance) {
	ctx := context.Background()
	seen := 0
	err := tab.Scan(ctx, func(k uint64, v balance) bool {
		seen++
		if ref[k] != v {
			b.Fatalf("account %d: %+v, reference %+v", k, v, ref[k])
		}
		return true
	})
	if err != nil || seen != len(ref) {
		b.Fatalf("scan: %v, %d accounts, reference %d", err, seen, len(ref))
	}
}

// naiveRecord is what the naive consumer reads: key bytes, type tag and
// payload.
type naiveRecord struct {
	key     []byte
	tag     uint32
	payload []byte
}

func naiveRecords(ops []bankOp, binaryPayload bool) []naiveRecord {
	out := make([]naiveRecord, len(ops))
	for i, op := range ops {
		e := bankEvent{Account: op.account, Amount: op.amount}
		var p []byte
		if binaryPayload {
			p, _ = e.AppendBinary(nil)
		} else {
			p, _ = stream.JSON[bankEvent]().Append(nil, e)
		}
		out[i] = naiveRecord{key: binary.BigEndian.AppendUint64(nil, op.account), tag: uint32(op.kind) + 1, payload: p}
	}
	return out
}

// naive is the baseline consumer: for every event, in log order, decode
// the payload, Get the account from an indexed batch (reading its own
// writes), apply, Set; commit the batch with the offset, synced, every
// batch records.
type naive struct {
	cache  *pebble.Cache
	db     *pebble.DB
	binary bool
	offset uint64
}

func openNaive(b *testing.B, dir string, binaryPayload bool) *naive {
	cache := pebble.NewCache(64 << 20)
	db, err := pebble.Open(dir, &pebble.Options{
		Cache: cache, MemTableSize: 8 << 20, MemTableStopWritesThreshold: 4,
		FormatMajorVersion: pebble.FormatNewest, Logger: quietLogger{},
	})
	if err != nil {
		b.Fatal(err)
	}
	return &naive{cache: cache, db: db, binary: binaryPayload}
}

func (nv *naive) close() {
	_ = nv.db.Close()
	nv.cache.Unref()
}

func (nv *naive) process(b *testing.B, recs []naiveRecord, batch int) {
	jsonCodec := stream.JSON[bankEvent]()
	valueCodec := stream.Binary[balance]()
	offsetKey := []byte("o/bank/accounts/0")
	key := make([]byte, 0, 16)
	var val []byte
	var err error
	for start := 0; start < len(recs); start += batch {
		end := min(start+batch, len(recs))
		bt := nv.db.NewIndexedBatch()
		for _, r := range recs[start:end] {
			var e bankEvent
			if nv.binary {
				err = e.UnmarshalBinary(r.payload)
			} else {
				e, err = jsonCodec.Decode(r.payload)
			}
			if err != nil {
				b.Fatal(err)
			}
			key = append(append(key[:0], 't'), r.key...)
			var v balance
			raw, closer, err := bt.Get(key)
			switch {
			case err == nil:
				v, err = valueCodec.Decode(raw)
				closer.Close()
				if err != nil {
					b.Fatal(err)
				}
			case !errors.Is(err, pebble.ErrNotFound):
				b.Fatal(err)
			}
			switch r.tag {
			case 1:
				v.Open = true
				v.Opens++
			case 2:
				v.Balance += e.Amount
			case 3:
				v.Balance -= e.Amount
			case 4:
				v.Open = false
			}
			val, _ = valueCodec.Append(val[:0], v)
			if err := bt.Set(key, val, nil); err != nil {
				b.Fatal(err)
			}
		}
		nv.commit(b, bt, offsetKey, end-start)
	}
}

// commit writes to bt the offset after records more records, under
// offsetKey, and commits bt synced: the end of each of the naive
// consumers' batches.
func (nv *naive) commit(b *testing.B, bt *pebble.Batch, offsetKey []byte, records int) {
	nv.offset += uint64(records)
	if err := bt.Set(offsetKey, binary.BigEndian.AppendUint64(nil, nv.offset), nil); err != nil {
		b.Fatal(err)
	}
	if err := bt.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
