package topology_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// wDeposit is the event of BenchmarkWindowedDeposits: an amount for an
// account at an event time (Unix nanoseconds).
type wDeposit struct {
	Account uint64 `json:"a"`
	Amount  int64  `json:"m"`
	At      int64  `json:"t"`
}

func (e wDeposit) Key() uint64 { return e.Account }

// wWorkload returns n deposits of accounts Zipf-skewed keys, 10 ms of
// event time apart, each up to 20 s out of order (within the grace).
func wWorkload(n, accounts int) []wDeposit {
	rng := rand.New(rand.NewPCG(5, 5))
	z := rand.NewZipf(rng, 1.1, 1, uint64(accounts-1))
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	out := make([]wDeposit, n)
	for i := range out {
		at := t0 + int64(i)*int64(10*time.Millisecond) - rng.Int64N(int64(20*time.Second))
		out[i] = wDeposit{Account: z.Uint64(), Amount: 1 + rng.Int64N(1000), At: at}
	}
	return out
}

type wKey struct {
	account uint64
	start   int64
}

// BenchmarkWindowedDeposits sums deposits per account per minute of event
// time (tumbling windows, 30 s of grace, kept to the end) with a window table,
// against a naive windowed consumer over Pebble in the same run: per
// event, in log order, decode, Get the (account, window) sum from an indexed
// batch, add, Set; commit each batch with the offset, synced. Both hold the
// same sums at the end (checked); the naive one never closes or removes a
// window and has no notion of late events. STRAND_BENCH_EVENTS (200,000),
// STRAND_BENCH_ACCOUNTS (1,000), STRAND_BENCH_BATCH (10,000).
func BenchmarkWindowedDeposits(b *testing.B) {
	n := envInt("STRAND_BENCH_EVENTS", 200_000)
	accounts := envInt("STRAND_BENCH_ACCOUNTS", 1_000)
	batch := envInt("STRAND_BENCH_BATCH", 10_000)
	evs := wWorkload(n, accounts)
	const size = time.Minute
	ref := map[wKey]int64{}
	for _, e := range evs {
		ref[wKey{e.Account, e.At - e.At%int64(size)}] += e.Amount
	}
	decl := stream.Declare[uint64, wDeposit](1)
	b.Run("strand", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			t := topology.New("windowed")
			src := topology.Source[uint64](t, "bank/deposits")
			w := topology.NewWindowTable[uint64, int64](t, "per-minute", topology.Tumbling(size), stream.JSON[int64](),
				topology.WithGrace(30*time.Second), topology.WithRetention(time.Hour+time.Duration(n)*10*time.Millisecond)) // every window stays, to be compared
			topology.Aggregate(topology.On(src, decl), w,
				topology.EventTimeOf(func(e wDeposit) time.Time { return time.Unix(0, e.At) }),
				func(sum *int64, e wDeposit) error { *sum += e.Amount; return nil })
			d := newTaskDriver(b, t, tdBatchSize(batch), tdStateOptions(state.WithDurability(state.Sync)))
			m := driveChunks(b, d, n, 50_000, func(from, to int) { tdPipe(d, decl, evs[from:to]...) })
			m.report(b, n)
			got := map[wKey]int64{}
			err := w.Scan(b.Context(), func(k uint64, ws []topology.WindowResult[int64]) bool {
				for _, r := range ws {
					got[wKey{k, r.Start.UnixNano()}] = r.Value
				}
				return true
			})
			if err != nil {
				b.Fatal(err)
			}
			checkWindowSums(b, got, ref)
			d.Close()
			b.StartTimer()
		}
	})
	b.Run("naive", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			recs := make([][]byte, n)
			codec := stream.JSON[wDeposit]()
			for i, e := range evs {
				recs[i], _ = codec.Append(nil, e)
			}
			nv := openNaive(b, b.TempDir(), false)
			var m benchMeter
			m.time(b, func() { naiveWindows(b, nv, recs, batch, size) })
			m.report(b, n)
			got := map[wKey]int64{}
			it, err := nv.db.NewIter(&pebble.IterOptions{LowerBound: []byte("w"), UpperBound: []byte("x")})
			if err != nil {
				b.Fatal(err)
			}
			for it.First(); it.Valid(); it.Next() {
				k := it.Key()
				got[wKey{binary.BigEndian.Uint64(k[1:9]), int64(binary.BigEndian.Uint64(k[9:17]))}] = int64(binary.BigEndian.Uint64(it.Value()))
			}
			_ = it.Close()
			checkWindowSums(b, got, ref)
			nv.close()
			b.StartTimer()
		}
	})
}

// naiveWindows is the naive windowed consumer: per-key per-window sums in
// Pebble, one Get and one Set per event, a synced commit per batch.
func naiveWindows(b *testing.B, nv *naive, recs [][]byte, batch int, size time.Duration) {
	codec := stream.JSON[wDeposit]()
	offsetKey := []byte("o/bank/deposits/0")
	key := make([]byte, 17)
	key[0] = 'w'
	var val [8]byte
	for start := 0; start < len(recs); start += batch {
		end := min(start+batch, len(recs))
		bt := nv.db.NewIndexedBatch()
		for _, p := range recs[start:end] {
			e, err := codec.Decode(p)
			if err != nil {
				b.Fatal(err)
			}
			binary.BigEndian.PutUint64(key[1:9], e.Account)
			binary.BigEndian.PutUint64(key[9:17], uint64(e.At-e.At%int64(size)))
			var sum int64
			raw, closer, err := bt.Get(key)
			switch {
			case err == nil:
				sum = int64(binary.BigEndian.Uint64(raw))
				closer.Close()
			case !errors.Is(err, pebble.ErrNotFound):
				b.Fatal(err)
			}
			binary.BigEndian.PutUint64(val[:], uint64(sum+e.Amount))
			if err := bt.Set(key, val[:], nil); err != nil {
				b.Fatal(err)
			}
		}
		nv.commit(b, bt, offsetKey, end-start)
	}
}

func checkWindowSums(b *testing.B, got, want map[wKey]int64) {
	b.Helper()
	if len(got) != len(want) {
		b.Fatalf("%d windows, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			b.Fatalf("account %d window %v: %d, want %d", k.account, time.Unix(0, k.start).UTC(), got[k], v)
		}
	}
}
