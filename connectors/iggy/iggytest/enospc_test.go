package iggytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
)

// fullDisk fails writes with ENOSPC while full is set, after writing half
// of the bytes, as a disk that fills up in the middle of a write does.
type fullDisk struct{ full atomic.Bool }

type fullDiskFile struct {
	*os.File
	d *fullDisk
}

func (f fullDiskFile) Write(b []byte) (int, error) {
	if f.d.full.Load() {
		n, _ := f.File.Write(b[:len(b)/2])
		return n, syscall.ENOSPC
	}
	return f.File.Write(b)
}

// Truncate fails too while the disk is full, so the partial record stays
// until the next write, which must cut it first.
func (f fullDiskFile) Truncate(n int64) error {
	if f.d.full.Load() {
		return syscall.EIO
	}
	return f.File.Truncate(n)
}

func (d *fullDisk) wrap(_ string, f *os.File) fileWriter { return fullDiskFile{File: f, d: d} }

// logRecorder keeps the log records of a server.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// errorsByFile counts error records by their "file" attribute.
func (l *logRecorder) errorsByFile() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, r := range l.recs {
		if r.Level < slog.LevelError {
			continue
		}
		file := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "file" {
				file = a.Value.String()
			}
			return true
		})
		out[file]++
	}
	return out
}

func TestFullDiskFailsWritesThenResumesWithoutDamage(t *testing.T) {
	dir := t.TempDir()
	disk := &fullDisk{}
	rec := &logRecorder{}
	tg := durable(t, dir, withFileWrapper(disk.wrap), WithLogger(slog.New(rec)), withSegmentBytes(600))
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	var want []string
	send := func(prefix string, n int) error {
		m := msgs(t, prefix, n)
		err := cli.SendMessages(sid, tid, iggcon.PartitionId(0), m)
		if err == nil {
			for _, x := range m {
				want = append(want, string(x.Payload))
			}
		}
		return err
	}
	for i := 0; i < 5; i++ {
		must(t, send(fmt.Sprint("before", i), 3))
	}
	disk.full.Store(true)
	for i := 0; i < 10; i++ {
		if err := send(fmt.Sprint("full", i), 3); err == nil {
			t.Fatalf("send %d on a full disk succeeded", i)
		}
	}
	if _, err := cli.CreateStream("s2"); err == nil {
		t.Fatalf("create stream on a full disk succeeded")
	}
	if err := cli.StoreConsumerOffset(iggcon.DefaultConsumer(), sid, tid, 2, u32p(0)); err == nil {
		t.Fatalf("store offset on a full disk succeeded")
	}
	byFile := rec.errorsByFile()
	if len(byFile) != 3 {
		t.Fatalf("want one error per file (segment, meta.log, offsets.log), got %v", byFile)
	}
	for f, n := range byFile {
		if n != 1 || !strings.HasPrefix(f, dir) {
			t.Fatalf("failure of %q logged %d times, want once with the path", f, n)
		}
	}
	disk.full.Store(false)
	for i := 0; i < 10; i++ {
		must(t, send(fmt.Sprint("after", i), 3))
	}
	_, err = cli.CreateStream("s2")
	must(t, err)
	must(t, cli.StoreConsumerOffset(iggcon.DefaultConsumer(), sid, tid, 2, u32p(0)))
	check := func(cli iggcon.Client) {
		got := pollAll(t, cli, sid, tid, 0)
		if len(got) != len(want) {
			t.Fatalf("%d messages, want %d", len(got), len(want))
		}
		for i, m := range got {
			if m.Header.Offset != uint64(i) || string(m.Payload) != want[i] {
				t.Fatalf("message %d: offset %d %q, want %q", i, m.Header.Offset, m.Payload, want[i])
			}
		}
	}
	check(cli)
	must(t, tg.srv.Close())
	// Reopened without repair: the failed writes left nothing behind.
	tg2 := durable(t, dir, withSegmentBytes(600))
	cli2 := tg2.login(t)
	check(cli2)
	if _, err := cli2.GetStream(mustID("s2")); err != nil {
		t.Fatalf("stream created after the disk had room again: %v", err)
	}
}

// TestFullFilesystemResumesWhenSpaceIsFreed fills a real 1 MiB tmpfs. It
// needs root and a working mount; elsewhere it is skipped.
func TestFullFilesystemResumesWhenSpaceIsFreed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	dir := filepath.Join(mnt, "data")
	tg := durable(t, dir)
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	// Leave little room, held by a file that can be removed later.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	must(t, err)
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	must(t, f.Close())
	payload := strings.Repeat("x", 3000)
	acked := 0
	var sendErr error
	for i := 0; i < 1000 && sendErr == nil; i++ {
		m := []iggcon.IggyMessage{}
		for j := 0; j < 3; j++ {
			msg, err := iggcon.NewIggyMessage([]byte(fmt.Sprint(i, "-", j, payload)))
			must(t, err)
			m = append(m, msg)
		}
		if sendErr = cli.SendMessages(sid, tid, iggcon.PartitionId(0), m); sendErr == nil {
			acked += 3
		}
	}
	if sendErr == nil {
		t.Fatalf("the filesystem never filled up")
	}
	must(t, os.Remove(filler))
	for i := 0; i < 5; i++ {
		msg, err := iggcon.NewIggyMessage([]byte(fmt.Sprint("after-", i)))
		must(t, err)
		must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(0), []iggcon.IggyMessage{msg}))
		acked++
	}
	must(t, tg.srv.Close())
	srv, err := NewServer(WithDataDir(dir))
	if err != nil {
		var de *DamageError
		t.Fatalf("reopen after a full filesystem: %v (damage: %v)", err, errors.As(err, &de))
	}
	got, _ := served(t, srv)
	must(t, srv.Close())
	if len(got[0]) != acked {
		t.Fatalf("%d messages after the reopen, %d acknowledged", len(got[0]), acked)
	}
	for off := range got[0] {
		if off >= uint64(acked) {
			t.Fatalf("offset %d served, only %d acknowledged", off, acked)
		}
	}
}
