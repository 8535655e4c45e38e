package scenario

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/sysstat"
	"github.com/strand-io/strand/internal/state"
)

// A timeline samples a long run once a second: events committed, resident
// memory, live Go heap, the store's size on disk and Pebble's compaction
// debt, read amplification and write stalls. From it the run's throughput
// per tenth of its events is worked out ("tenth_1_rate" ... "tenth_10_rate"
// in Result.Extra: events per second over each successive tenth of the
// events; "tenth_1_cpu_us" ...: CPU microseconds per event over each tenth,
// which other load on the machine moves much less), to show whether
// throughput holds up as the store grows.
type timeline struct {
	start     time.Time
	cpu0      time.Duration
	db        *state.DB
	dir       string
	committed atomic.Int64
	stop      chan struct{}
	done      chan struct{}
	mu        sync.Mutex
	samples   []sample
}

type sample struct {
	at         time.Duration
	cpu        time.Duration // of the process since the timeline started
	events     int64
	rss, heap  int64
	storeBytes int64
	st         state.Stats
}

func startTimeline(db *state.DB, dir string) *timeline {
	tl := &timeline{start: time.Now(), cpu0: sysstat.CPUTime(), db: db, dir: dir, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tl.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				tl.sample()
			case <-tl.stop:
				tl.sample()
				return
			}
		}
	}()
	return tl
}

func (tl *timeline) sample() {
	s := sample{at: time.Since(tl.start), cpu: sysstat.CPUTime() - tl.cpu0, events: tl.committed.Load(), rss: sysstat.RSS(), heap: int64(readHeap()), st: tl.db.Stats()}
	_ = filepath.WalkDir(tl.dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				s.storeBytes += info.Size()
			}
		}
		return nil
	})
	tl.mu.Lock()
	tl.samples = append(tl.samples, s)
	tl.mu.Unlock()
}

// finish stops sampling and adds the per-tenth rates, the largest RSS and
// store size sampled and the stalls to res.Extra; it writes the samples to
// path as CSV unless path is empty.
func (tl *timeline) finish(res *Result, total int64, path string) error {
	close(tl.stop)
	<-tl.done
	tl.mu.Lock()
	defer tl.mu.Unlock()
	ss := tl.samples
	// The moment (wall clock and CPU) each tenth of the events was
	// committed, interpolated between samples.
	at := func(n int64) (wall, cpu time.Duration) {
		prev := sample{}
		for _, s := range ss {
			if s.events >= n {
				if s.events == prev.events {
					return s.at, s.cpu
				}
				f := float64(n-prev.events) / float64(s.events-prev.events)
				return prev.at + time.Duration(f*float64(s.at-prev.at)), prev.cpu + time.Duration(f*float64(s.cpu-prev.cpu))
			}
			prev = s
		}
		return prev.at, prev.cpu
	}
	var lastWall, lastCPU time.Duration
	for i := 1; i <= 10; i++ {
		wall, cpu := at(total * int64(i) / 10)
		if d := (wall - lastWall).Seconds(); d > 0 {
			res.Extra[fmt.Sprintf("tenth_%d_rate", i)] = float64(total) / 10 / d
		}
		res.Extra[fmt.Sprintf("tenth_%d_cpu_us", i)] = (cpu - lastCPU).Seconds() * 1e6 / (float64(total) / 10)
		lastWall, lastCPU = wall, cpu
	}
	var maxRSS, maxStore, maxDebt int64
	for _, s := range ss {
		maxRSS, maxStore, maxDebt = max(maxRSS, s.rss), max(maxStore, s.storeBytes), max(maxDebt, int64(s.st.CompactionDebt))
	}
	res.Extra["timeline_max_rss"] = float64(maxRSS)
	res.Extra["timeline_max_store"] = float64(maxStore)
	res.Extra["timeline_max_debt"] = float64(maxDebt)
	if len(ss) > 0 {
		res.Extra["timeline_end_store"] = float64(ss[len(ss)-1].storeBytes)
	}
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "s,cpu_s,events,events_per_s,rss_mib,go_heap_mib,store_mib,compaction_debt_mib,read_amp,compactions,flushes,write_stalls,stall_s,value_cache_hit,pebble_reads")
	prev := sample{}
	for _, s := range ss {
		rate := 0.0
		if d := (s.at - prev.at).Seconds(); d > 0 {
			rate = float64(s.events-prev.events) / d
		}
		hit := 0.0
		if n := s.st.ValueCacheHits + s.st.ValueCacheMisses; n > 0 {
			hit = float64(s.st.ValueCacheHits) / float64(n)
		}
		fmt.Fprintf(w, "%.1f,%.2f,%d,%.0f,%.1f,%.1f,%.1f,%.1f,%d,%d,%d,%d,%.2f,%.3f,%d\n", s.at.Seconds(), s.cpu.Seconds(), s.events, rate,
			float64(s.rss)/(1<<20), float64(s.heap)/(1<<20), float64(s.storeBytes)/(1<<20), float64(s.st.CompactionDebt)/(1<<20),
			s.st.ReadAmp, s.st.Compactions, s.st.Flushes, s.st.WriteStalls, s.st.WriteStallTime.Seconds(), hit, s.st.PebbleReads)
		prev = s
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
