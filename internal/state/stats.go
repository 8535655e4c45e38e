package state

import (
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Stats describe how a DB's reads were served and the state of its Pebble
// store, for benchmarks and telemetry. Counters run from Open.
type Stats struct {
	// ValueCacheHits and ValueCacheMisses count the first Reads of a key in
	// a Txn that the value cache served or did not; ValueCacheEntries and
	// ValueCacheBytes are what it holds now (bytes as the budget counts
	// them).
	ValueCacheHits, ValueCacheMisses   int64
	ValueCacheEntries, ValueCacheBytes int64
	// KeyFilterSkips counts the misses that the key filter answered "no
	// such row" without reading Pebble; KeyFilterBytes is its size and
	// KeyFilterReady whether it answers yet (its scan at Open is done).
	KeyFilterSkips int64
	KeyFilterBytes int64
	KeyFilterReady bool
	// PebbleReads counts point reads of table rows (misses of the value
	// cache and Table.Get); PebbleReadsFound those that found a row.
	PebbleReads, PebbleReadsFound int64

	// From Pebble's metrics: block cache hits and misses, read
	// amplification (sublevels of L0 plus non-empty levels), estimated
	// compaction debt in bytes, compactions and flushes done, the bytes of
	// live sstables, and write stalls with their total duration.
	BlockCacheHits, BlockCacheMisses int64
	ReadAmp                          int
	CompactionDebt                   uint64
	Compactions, Flushes             int64
	LiveBytes                        uint64
	WriteStalls                      int64
	WriteStallTime                   time.Duration
}

// dbStats are the counters behind Stats that Pebble does not keep.
type dbStats struct {
	reads, found, skips atomic.Int64
	stalls              atomic.Int64
	stallStart          atomic.Int64 // unix nanoseconds of the stall in progress, 0 if none
	stallTime           atomic.Int64
}

// listener counts Pebble's write stalls into s.
func (s *dbStats) listener() *pebble.EventListener {
	return &pebble.EventListener{
		WriteStallBegin: func(pebble.WriteStallBeginInfo) {
			s.stalls.Add(1)
			s.stallStart.Store(time.Now().UnixNano())
		},
		WriteStallEnd: func() {
			if t := s.stallStart.Swap(0); t != 0 {
				s.stallTime.Add(time.Now().UnixNano() - t)
			}
		},
	}
}

// Stats returns the DB's read counters and Pebble's metrics (see [Stats]).
// After Close it returns the counters only.
func (db *DB) Stats() Stats {
	st := Stats{
		KeyFilterSkips:   db.stats.skips.Load(),
		PebbleReads:      db.stats.reads.Load(),
		PebbleReadsFound: db.stats.found.Load(),
		WriteStalls:      db.stats.stalls.Load(),
		WriteStallTime:   time.Duration(db.stats.stallTime.Load()),
		ValueCacheBytes:  db.budget.used.Load(),
	}
	if db.filter != nil {
		st.KeyFilterBytes = db.filter.size()
		st.KeyFilterReady = db.filter.ready.Load()
	}
	db.mu.Lock()
	for _, t := range db.attached {
		h, m, n := t.cacheStats()
		st.ValueCacheHits += h
		st.ValueCacheMisses += m
		st.ValueCacheEntries += n
	}
	db.mu.Unlock()
	if db.enter() != nil {
		return st
	}
	defer db.exit()
	m := db.pdb.Metrics()
	st.BlockCacheHits, st.BlockCacheMisses = m.BlockCache.Hits, m.BlockCache.Misses
	st.ReadAmp = m.ReadAmp()
	st.CompactionDebt = m.Compact.EstimatedDebt
	st.Compactions, st.Flushes = m.Compact.Count, m.Flush.Count
	st.LiveBytes = m.Table.Local.LiveSize
	return st
}
