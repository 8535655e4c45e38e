package state

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Benchmarks run on the real file system (fsync matters). Run with e.g.
//
//	go test -run '^$' -bench . -benchtime 2s ./stream/state/
//
// Figures and the exact command are in benchmarks/results/state.md.

type benchAccount struct {
	Owner   string `json:"owner"`
	Balance int64  `json:"balance"`
	Ops     int64  `json:"ops"`
}

// syncCounter counts fsyncs of the write-ahead log.
type syncCounter struct {
	vfs.FS
	syncs atomic.Int64
}

type countedFile struct {
	vfs.File
	c *syncCounter
}

func (c *syncCounter) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return countedFile{f, c}, nil
}

func (c *syncCounter) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	return c.wrap(name, f, err)
}

func (c *syncCounter) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.ReuseForWrite(oldname, newname, cat)
	return c.wrap(newname, f, err)
}

func (f countedFile) Sync() error     { f.c.syncs.Add(1); return f.File.Sync() }
func (f countedFile) SyncData() error { f.c.syncs.Add(1); return f.File.SyncData() }
func (f countedFile) SyncTo(n int64) (bool, error) {
	f.c.syncs.Add(1)
	return f.File.SyncTo(n)
}

func benchOpen(b *testing.B, opts ...Option) (*DB, *Table[string, benchAccount], *syncCounter) {
	b.Helper()
	sc := &syncCounter{FS: vfs.Default}
	db, err := Open(b.TempDir(), append([]Option{WithLogger(quiet), withFS(sc)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	tab := NewTable("accounts", String(), JSON[benchAccount]())
	if err := db.Attach(tab); err != nil {
		b.Fatal(err)
	}
	return db, tab, sc
}

func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "account-%08d", i)
	}
	return keys
}

// BenchmarkCommit: one Txn of N writes of random keys (1M keyspace) plus a
// checkpoint, committed. ns/op is per commit, including the N Writes.
func BenchmarkCommit(b *testing.B) {
	keys := benchKeys(1_000_000)
	for _, d := range []Durability{Sync, NoSync} {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/rows=%d", d, n), func(b *testing.B) {
				db, tab, _ := benchOpen(b, WithDurability(d))
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(1, 2))
				var off uint64
				b.ResetTimer()
				for b.Loop() {
					tx := db.NewTxn()
					for range n {
						k := keys[rng.IntN(len(keys))]
						if err := tab.Write(tx, 0, k, benchAccount{Owner: "someone", Balance: int64(off), Ops: 1}); err != nil {
							b.Fatal(err)
						}
						off++
					}
					tx.SetCheckpoint("bank/accounts", 0, off)
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// BenchmarkConcurrentCommitters: G goroutines (partition pipelines) each
// commit Txns of 100 rows plus their checkpoint, with Sync durability. Group
// commit shows as commits/s growing with G while fsyncs/commit falls.
func BenchmarkConcurrentCommitters(b *testing.B) {
	keys := benchKeys(1_000_000)
	const rows = 100
	for _, g := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("committers=%d", g), func(b *testing.B) {
			db, tab, sc := benchOpen(b)
			ctx := context.Background()
			var next atomic.Int64
			before := sc.syncs.Load()
			b.ResetTimer()
			var wg sync.WaitGroup
			for p := range g {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(p), 2))
					var off uint64
					for next.Add(1) <= int64(b.N) {
						tx := db.NewTxn()
						for range rows {
							k := keys[rng.IntN(len(keys))]
							if err := tab.Write(tx, uint32(p), k, benchAccount{Owner: "someone", Balance: 1}); err != nil {
								b.Error(err)
								return
							}
						}
						off += rows
						tx.SetCheckpoint("bank/accounts", uint32(p), off)
						if err := tx.Commit(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			syncs := sc.syncs.Load() - before
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
			b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(syncs)/float64(b.N), "fsyncs/commit")
		})
	}
}

// BenchmarkRead: Table.Read of a committed key from a fresh Txn. "hit"
// finds the decoded value in the value cache; "miss" has the cache off and
// pays a Pebble Get plus a JSON decode; "repeat" reads a key the Txn has
// already read.
func BenchmarkRead(b *testing.B) {
	const nkeys = 10_000
	keys := benchKeys(nkeys)
	setup := func(b *testing.B, opts ...Option) (*DB, *Table[string, benchAccount]) {
		db, tab, _ := benchOpen(b, append([]Option{WithDurability(NoSync)}, opts...)...)
		tx := db.NewTxn()
		for i, k := range keys {
			if err := tab.Write(tx, 0, k, benchAccount{Owner: "someone", Balance: int64(i)}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(context.Background()); err != nil {
			b.Fatal(err)
		}
		return db, tab
	}
	run := func(b *testing.B, db *DB, tab *Table[string, benchAccount], same bool) {
		rng := rand.New(rand.NewPCG(1, 2))
		tx := db.NewTxn()
		i := 0
		b.ResetTimer()
		for b.Loop() {
			if i++; i%1000 == 0 {
				tx.Discard()
				tx = db.NewTxn()
			}
			k := keys[0]
			if !same {
				k = keys[rng.IntN(nkeys)]
			}
			if _, ok, err := tab.Read(tx, 0, k); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		tx.Discard()
	}
	b.Run("hit", func(b *testing.B) {
		db, tab := setup(b)
		run(b, db, tab, false)
	})
	b.Run("miss", func(b *testing.B) {
		db, tab := setup(b, WithValueCacheSize(0))
		run(b, db, tab, false)
	})
	b.Run("repeat", func(b *testing.B) {
		db, tab := setup(b)
		run(b, db, tab, true)
	})
}

// BenchmarkGet: Table.Get (committed state, Pebble point read + decode) of
// random keys among 100k, idle and while another goroutine commits batches
// of 1000 rows (NoSync, unthrottled).
func BenchmarkGet(b *testing.B) {
	const nkeys = 100_000
	keys := benchKeys(nkeys)
	for _, writing := range []bool{false, true} {
		name := "idle"
		if writing {
			name = "while-writing"
		}
		b.Run(name, func(b *testing.B) {
			db, tab, _ := benchOpen(b, WithDurability(NoSync))
			ctx := context.Background()
			for lo := 0; lo < nkeys; lo += 10_000 {
				tx := db.NewTxn()
				for i := lo; i < lo+10_000; i++ {
					_ = tab.Write(tx, 0, keys[i], benchAccount{Owner: "someone", Balance: int64(i)})
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var written atomic.Int64
			if writing {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(3, 4))
					for off := uint64(0); ; off += 1000 {
						select {
						case <-stop:
							return
						default:
						}
						tx := db.NewTxn()
						for range 1000 {
							_ = tab.Write(tx, 0, keys[rng.IntN(nkeys)], benchAccount{Owner: "writer", Balance: int64(off)})
						}
						tx.SetCheckpoint("bank/accounts", 0, off)
						if err := tx.Commit(ctx); err != nil {
							b.Error(err)
							return
						}
						written.Add(1000)
					}
				})
			}
			rng := rand.New(rand.NewPCG(1, 2))
			start := time.Now()
			b.ResetTimer()
			for b.Loop() {
				if _, ok, err := tab.Get(ctx, string(keys[rng.IntN(nkeys)])); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			if writing {
				b.ReportMetric(float64(written.Load())/time.Since(start).Seconds(), "writer-rows/s")
			}
		})
	}
}

// BenchmarkBatchFold is the executor's state work for one polled batch,
// with runs already reduced to one write per key: for each distinct key of
// a batch of B events (Zipf s=1.1 over 10k accounts: ≈400 distinct keys for
// B=1000, ≈2200 for B=10000), Read (own writes, then cache, then Pebble) +
// Write, then Commit with the checkpoint. events/s is the ceiling the state
// layer puts on the pipeline. "raw" is the floor in the same run: the same
// pre-aggregated updates applied to a plain Go map and written straight
// into a Pebble batch (JSON-encoded), as in the reference measurements.
func BenchmarkBatchFold(b *testing.B) {
	const nkeys = 10_000
	keys := benchKeys(nkeys)
	for _, batch := range []int{1000, 10000} {
		for _, d := range []Durability{Sync, NoSync} {
			for _, raw := range []bool{false, true} {
				name := fmt.Sprintf("B=%d/%s/state", batch, d)
				if raw {
					name = fmt.Sprintf("B=%d/%s/raw", batch, d)
				}
				b.Run(name, func(b *testing.B) { benchBatchFold(b, keys, batch, d, raw) })
			}
		}
	}
}

func benchBatchFold(b *testing.B, keys [][]byte, batch int, d Durability, raw bool) {
	db, tab, _ := benchOpen(b, WithDurability(d))
	ctx := context.Background()
	zipf := rand.NewZipf(rand.New(rand.NewPCG(5, 6)), 1.1, 1, uint64(len(keys)-1))
	deltas := map[int]int64{}
	mem := map[int]benchAccount{} // raw: the state kept in memory
	codec := JSON[benchAccount]()
	var off uint64
	var buf []byte
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		clear(deltas)
		for range batch {
			deltas[int(zipf.Uint64())]++
		}
		b.StartTimer()
		off += uint64(batch)
		if raw {
			pb := db.pdb.NewBatch()
			for i, n := range deltas {
				a := mem[i]
				a.Balance += n
				a.Ops += n
				mem[i] = a
				buf, _ = codec.Append(buf[:0], a)
				_ = pb.Set(appendTableKey(nil, 1, 0, keys[i]), buf, nil)
			}
			_ = pb.Set(checkpointKey("bank/accounts", 0), binary.BigEndian.AppendUint64(nil, off), nil)
			if err := pb.Commit(db.wopts); err != nil {
				b.Fatal(err)
			}
			_ = pb.Close()
			continue
		}
		tx := db.NewTxn()
		for i, n := range deltas {
			a, _, err := tab.Read(tx, 0, keys[i])
			if err != nil {
				b.Fatal(err)
			}
			a.Balance += n
			a.Ops += n
			if err := tab.Write(tx, 0, keys[i], a); err != nil {
				b.Fatal(err)
			}
		}
		tx.SetCheckpoint("bank/accounts", 0, off)
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkJSON compares JSON[T] with encoding/json on the benchmark value.
func BenchmarkJSON(b *testing.B) {
	v := benchAccount{Owner: "someone \"quoted\"", Balance: -123456789, Ops: 17}
	c := JSON[benchAccount]()
	data, _ := c.Append(nil, v)
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = c.Append(buf[:0], v)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
