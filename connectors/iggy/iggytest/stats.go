package iggytest

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// serverVersion is the version the broker reports in GetStats, with its
// numeric form (major, then minor and patch as three digits each).
const (
	serverVersion        = "0.8.0"
	serverSemver  uint32 = 8000
)

// getStats answers GetStats (code 10) with the server's layout: process
// and host figures read from /proc where available (zero elsewhere), and
// the broker's own counts of streams, topics, partitions, segments,
// messages, clients and consumer groups. CPU usage, disk I/O counters and
// cache metrics are reported as zero.
func (c *conn) getStats() ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := c.can(permServerInfo, 0, 0); err != nil {
		return nil, err
	}
	var streams, topics, parts, segments, groups uint32
	var msgs, size uint64
	s.streams.each(func(_ uint32, st *stream) {
		streams++
		st.topics.each(func(_ uint32, t *topic) {
			topics++
			groups += uint32(t.groups.n)
			parts += uint32(len(t.partitions))
			for _, p := range t.partitions {
				p.mu.Lock()
				segments += p.segmentsCount()
				p.mu.Unlock()
			}
			ts, tm := t.stats()
			size += ts
			msgs += tm
		})
	})
	total, avail := memInfo()
	now := time.Now()
	host, _ := os.Hostname()
	e := c.ok().u32(uint32(os.Getpid())).u32(0).u32(0)
	e = e.u64(rssBytes()).u64(total).u64(avail)
	e = e.u64(uint64(now.Sub(s.started).Microseconds())).u64(uint64(s.started.UnixMicro()))
	e = e.u64(0).u64(0).u64(size)
	e = e.u32(streams).u32(topics).u32(parts).u32(segments).u64(msgs)
	e = e.u32(uint32(len(s.clients))).u32(groups)
	e = e.str32(host).str32(runtime.GOOS).str32(osVersion()).str32(kernelVersion())
	e = e.str32(serverVersion).u32(serverSemver)
	e = e.u32(0) // cache metrics
	e = e.u32(uint32(runtime.NumGoroutine())).u64(0).u64(0)
	return e, nil
}

// rssBytes is the process's resident set size (0 when unknown).
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

func memInfo() (total, avail uint64) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = v * 1024
		case "MemAvailable:":
			avail = v * 1024
		}
	}
	return total, avail
}

func kernelVersion() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func osVersion() string {
	b, _ := os.ReadFile("/proc/sys/kernel/version")
	return strings.TrimSpace(string(b))
}
