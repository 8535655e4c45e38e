package iggytest

import (
	"math"
	"time"
)

// defaultCacheBytes is the read cache of a durable broker when
// WithCacheSize is not given.
const defaultCacheBytes = 64 << 20

// WithSegmentSize sets the size at which a partition's segment is sealed
// and a new one started (server 0.8.0's segment.size, 1 GiB by default).
// Retention deletes whole sealed segments, so smaller segments make it
// finer; CreateTopic refuses a maximum topic size below it (1019,
// InvalidTopicSize), as the server does. With a data directory every
// segment is one file. n ≤ 0 keeps the default.
func WithSegmentSize(n int64) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.segmentBytes = n
		}
	})
}

// WithCacheSize bounds the message bytes a durable broker (WithDataDir)
// keeps in memory: messages live in their segment files and polls read
// them back, the most recently written or read n bytes staying resident.
// The broker's memory then depends on n, not on the size of the log. The
// default is 64 MiB; n ≤ 0 keeps it. Without a data directory every
// message is in memory and the option has no effect.
func WithCacheSize(n int64) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.cacheBytes = n
		}
	})
}

// WithMessageCleaner turns on retention as server 0.8.0 enforces it with
// data_maintenance.messages.cleaner_enabled: every interval, in every
// topic, sealed segments whose last message is older than the topic's
// message expiry are deleted, and while the topic holds 90% or more of its
// maximum size the oldest sealed segment (by first timestamp, across its
// partitions) is deleted. The active segment is never deleted, nor is a
// segment holding messages past the lowest offset a consumer or consumer
// group stored in that partition. Deleted messages are gone from polls
// (First starts after them) and, with a data directory, from disk. The
// server's default is off (d ≤ 0), as here.
func WithMessageCleaner(interval time.Duration) Option {
	return optionFunc(func(c *config) { c.cleaner = interval })
}

func (s *Server) cleanerLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.cleaner)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-tick.C:
			s.cleanMessages(uint64(now.UnixMicro()))
		}
	}
}

type cleanTarget struct {
	parts   []*partition
	expiry  uint64
	maxSize uint64
}

// cleanMessages runs one pass of the message cleaner at now (µs) and
// returns the number of messages deleted.
func (s *Server) cleanMessages(now uint64) uint64 {
	var targets []cleanTarget
	s.mu.RLock()
	s.streams.each(func(_ uint32, st *stream) {
		st.topics.each(func(_ uint32, t *topic) {
			ct := cleanTarget{parts: append([]*partition(nil), t.partitions...), expiry: t.expiry, maxSize: t.maxSize}
			if ct.expiry == 0 || ct.expiry == math.MaxUint64 {
				ct.expiry = 0
			}
			if ct.maxSize == math.MaxUint64 {
				ct.maxSize = 0
			}
			if ct.expiry != 0 || ct.maxSize != 0 {
				targets = append(targets, ct)
			}
		})
	})
	s.mu.RUnlock()
	var removed uint64
	for _, ct := range targets {
		if ct.expiry != 0 {
			for _, p := range ct.parts {
				p.mu.Lock()
				for !p.deleted && len(p.segs) > 1 && p.segs[0].endTS != 0 &&
					p.segs[0].endTS+ct.expiry <= now && !p.blockedLocked(p.segs[0]) {
					removed += p.removeOldestSegLocked()
				}
				p.mu.Unlock()
			}
		}
		if ct.maxSize != 0 {
			threshold := ct.maxSize / 10 * 9
			for {
				var size uint64
				for _, p := range ct.parts {
					p.mu.Lock()
					size += p.size
					p.mu.Unlock()
				}
				if size < threshold {
					break
				}
				var oldest *partition
				var oldestTS uint64
				for _, p := range ct.parts {
					p.mu.Lock()
					if !p.deleted && len(p.segs) > 1 && !p.blockedLocked(p.segs[0]) &&
						(oldest == nil || p.segs[0].startTS < oldestTS) {
						oldest, oldestTS = p, p.segs[0].startTS
					}
					p.mu.Unlock()
				}
				if oldest == nil {
					break
				}
				oldest.mu.Lock()
				n := uint64(0)
				if !oldest.deleted {
					n = oldest.removeOldestSegLocked()
				}
				oldest.mu.Unlock()
				if n == 0 {
					break
				}
				removed += n
			}
		}
	}
	return removed
}

// blockedLocked reports whether sg holds messages past the lowest offset
// any consumer or group stored in p (the server keeps such segments).
func (p *partition) blockedLocked(sg *segMeta) bool {
	if sg.next == sg.base {
		return false
	}
	last := sg.next - 1
	for _, off := range p.offsets {
		if last > off {
			return true
		}
	}
	for _, off := range p.groupOffsets {
		if last > off {
			return true
		}
	}
	return false
}
