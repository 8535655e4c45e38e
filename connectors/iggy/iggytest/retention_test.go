package iggytest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/internal/testrun"
)

// segFiles lists the segment files under dir.
func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".seg") {
			out = append(out, path)
		}
		return err
	})
	must(t, err)
	return out
}

func firstOffset(t *testing.T, cli iggcon.Client, sid, tid iggcon.Identifier, p uint32) (uint64, int) {
	t.Helper()
	pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.FirstPollingStrategy(), 1_000_000, false, &p)
	must(t, err)
	if len(pm.Messages) == 0 {
		return 0, 0
	}
	return pm.Messages[0].Header.Offset, len(pm.Messages)
}

// fill sends batches of 10 messages of about 1 KiB to partition p.
func fill(t *testing.T, cli iggcon.Client, sid, tid iggcon.Identifier, p uint32, batches int) {
	t.Helper()
	body := strings.Repeat("x", 1000)
	for i := 0; i < batches; i++ {
		ms := make([]iggcon.IggyMessage, 10)
		for j := range ms {
			m, err := iggcon.NewIggyMessage([]byte(fmt.Sprint(i, "-", j, body)))
			must(t, err)
			ms[j] = m
		}
		must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(p), ms))
	}
}

func TestRetentionExpiryDropsOldSealedSegments(t *testing.T) {
	for _, durableRun := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durableRun), func(t *testing.T) {
			dir := t.TempDir()
			opts := []Option{WithSegmentSize(16 << 10)}
			if durableRun {
				opts = append(opts, WithDataDir(dir))
			}
			tg := embeddedTarget(t, opts...)
			cli := tg.login(t)
			_, err := cli.CreateStream("s")
			must(t, err)
			sid, tid := mustID("s"), mustID("t")
			_, err = cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, iggcon.Duration(time.Hour.Microseconds()), 0, nil)
			must(t, err)
			fill(t, cli, sid, tid, 0, 10) // ~100 KiB: several 16 KiB segments
			topic, err := cli.GetTopic(sid, tid)
			must(t, err)
			segs := topic.Partitions[0].SegmentsCount
			if segs < 4 {
				t.Fatalf("segments = %d, want several", segs)
			}
			files := len(segFiles(t, dir))
			if durableRun && files != int(segs) {
				t.Fatalf("%d segment files for %d segments", files, segs)
			}
			now := uint64(time.Now().UnixMicro())
			if n := tg.srv.cleanMessages(now); n != 0 {
				t.Fatalf("cleaner removed %d fresh messages", n)
			}
			// An hour later every sealed segment has expired; the active one stays.
			removed := tg.srv.cleanMessages(now + uint64(time.Hour.Microseconds()) + 1)
			first, n := firstOffset(t, cli, sid, tid, 0)
			if removed == 0 || first != removed || n != 100-int(removed) {
				t.Fatalf("removed %d, first offset %d, %d left", removed, first, n)
			}
			topic, err = cli.GetTopic(sid, tid)
			must(t, err)
			p := topic.Partitions[0]
			if p.SegmentsCount != 1 || p.MessagesCount != uint64(n) || p.CurrentOffset != 99 {
				t.Fatalf("partition after expiry = %+v", p)
			}
			if durableRun {
				if f := segFiles(t, dir); len(f) != 1 {
					t.Fatalf("segment files after expiry: %v", f)
				}
				// Restart: the deletion holds.
				must(t, tg.srv.Close())
				tg2 := embeddedTarget(t, opts...)
				first2, n2 := firstOffset(t, tg2.login(t), sid, tid, 0)
				if first2 != first || n2 != n {
					t.Fatalf("after restart first %d (%d left), want %d (%d)", first2, n2, first, n)
				}
			}
		})
	}
}

func TestRetentionStoredOffsetsHoldSegments(t *testing.T) {
	tg := embeddedTarget(t, WithSegmentSize(16<<10))
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, 1, 0, nil) // 1 µs expiry
	must(t, err)
	fill(t, cli, sid, tid, 0, 10)
	must(t, cli.StoreConsumerOffset(iggcon.NewSingleConsumer(mustID("slow")), sid, tid, 5, u32p(0)))
	later := uint64(time.Now().Add(time.Second).UnixMicro())
	if n := tg.srv.cleanMessages(later); n != 0 {
		t.Fatalf("removed %d messages a consumer has not read", n)
	}
	must(t, cli.StoreConsumerOffset(iggcon.NewSingleConsumer(mustID("slow")), sid, tid, 99, u32p(0)))
	if n := tg.srv.cleanMessages(later); n == 0 {
		t.Fatal("nothing removed once the consumer caught up")
	}
}

func TestRetentionMaxTopicSizeDropsOldestSegmentsAcrossPartitions(t *testing.T) {
	dir := t.TempDir()
	tg := embeddedTarget(t, WithSegmentSize(16<<10), WithDataDir(dir))
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 2, iggcon.CompressionAlgorithmNone, 0, 8<<10, nil)
	wantErr(t, err, ierror.ErrInvalidTopicSize) // below the segment size
	_, err = cli.CreateTopic(sid, "t", 2, iggcon.CompressionAlgorithmNone, 0, 64<<10, nil)
	must(t, err)
	fill(t, cli, sid, tid, 0, 8) // partition 0 first: its segments are the oldest
	fill(t, cli, sid, tid, 1, 8)
	topic, err := cli.GetTopic(sid, tid)
	must(t, err)
	if topic.Size < 100<<10 {
		t.Fatalf("topic size %d", topic.Size)
	}
	tg.srv.cleanMessages(uint64(time.Now().UnixMicro()))
	topic, err = cli.GetTopic(sid, tid)
	must(t, err)
	if topic.Size >= 64<<10/10*9 {
		t.Fatalf("topic size after cleaning %d, want below 90%% of 64 KiB", topic.Size)
	}
	f0, _ := firstOffset(t, cli, sid, tid, 0)
	if f0 == 0 {
		t.Fatalf("partition 0 (oldest) kept its first segment: %+v", topic.Partitions)
	}
	if got := len(segFiles(t, dir)); got != int(topic.Partitions[0].SegmentsCount+topic.Partitions[1].SegmentsCount) {
		t.Fatalf("%d segment files for %+v", got, topic.Partitions)
	}
}

func TestRetentionCleanerRunsPeriodically(t *testing.T) {
	tg := embeddedTarget(t, WithSegmentSize(16<<10), WithMessageCleaner(20*time.Millisecond))
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, 1000, 0, nil) // 1 ms
	must(t, err)
	fill(t, cli, sid, tid, 0, 10)
	testrun.WaitFor(t, 5*time.Second, func() error {
		if first, _ := firstOffset(t, cli, sid, tid, 0); first == 0 {
			return errors.New("the cleaner never removed expired segments")
		}
		return nil
	})
}

func TestPurgeTopicOnDiskDeletesSegmentFiles(t *testing.T) {
	dir := t.TempDir()
	opts := []Option{WithSegmentSize(16 << 10), WithDataDir(dir)}
	tg := embeddedTarget(t, opts...)
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	fill(t, cli, sid, tid, 0, 10)
	if len(segFiles(t, dir)) < 4 {
		t.Fatal("expected several segment files")
	}
	st, _ := tg.rawCall(t, CmdPurgeTopic, append(rawIdentBytes(sid), rawIdentBytes(tid)...))
	if st != 0 {
		t.Fatalf("purge topic: status %d", st)
	}
	if f := segFiles(t, dir); len(f) != 0 {
		t.Fatalf("segment files after purge: %v", f)
	}
	fill(t, cli, sid, tid, 0, 1)
	must(t, tg.srv.Close())
	tg2 := embeddedTarget(t, opts...)
	first, n := firstOffset(t, tg2.login(t), sid, tid, 0)
	if first != 0 || n != 10 {
		t.Fatalf("after purge, send and restart: first %d, %d messages", first, n)
	}
}

func TestDurableReadsComeFromDiskThroughABoundedCache(t *testing.T) {
	dir := t.TempDir()
	const cacheSize = 32 << 10
	opts := []Option{WithSegmentSize(64 << 10), WithDataDir(dir), WithCacheSize(cacheSize)}
	tg := embeddedTarget(t, opts...)
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 2, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	fill(t, cli, sid, tid, 0, 30) // ~300 KiB per partition, 10x the cache
	fill(t, cli, sid, tid, 1, 30)
	check := func(srv *Server, cli iggcon.Client) {
		for p := uint32(0); p < 2; p++ {
			got := pollAll(t, cli, sid, tid, p)
			if len(got) != 300 {
				t.Fatalf("partition %d: %d messages", p, len(got))
			}
			for i, m := range got {
				if m.Header.Offset != uint64(i) || !strings.HasPrefix(string(m.Payload), fmt.Sprint(i/10, "-", i%10, "x")) {
					t.Fatalf("partition %d message %d: offset %d payload %.10q", p, i, m.Header.Offset, m.Payload)
				}
			}
		}
		// A batch (~10 KiB) may overshoot the budget only while it is added.
		if used := srv.cache.residentBytes(); used > cacheSize {
			t.Fatalf("cache holds %d bytes, budget %d", used, cacheSize)
		}
		resident := 0
		srv.mu.RLock()
		srv.streams.each(func(_ uint32, st *stream) {
			st.topics.each(func(_ uint32, tp *topic) {
				for _, p := range tp.partitions {
					p.mu.Lock()
					for _, b := range p.batches {
						if r := b.res.Load(); r != nil {
							resident += len(r.data)
						}
					}
					p.mu.Unlock()
				}
			})
		})
		srv.mu.RUnlock()
		if resident > cacheSize {
			t.Fatalf("%d message bytes resident, budget %d", resident, cacheSize)
		}
	}
	check(tg.srv, cli)
	must(t, tg.srv.Close())
	tg2 := embeddedTarget(t, opts...)
	check(tg2.srv, tg2.login(t))
}
