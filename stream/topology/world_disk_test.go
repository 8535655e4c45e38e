package topology_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The state directory's disk fills up while an App runs (docs/design.md,
// "When the log or the store changes"): Run stops with an error wrapping
// ErrDiskFull, the process that embeds the App goes on, and a restart with
// room again is exact. The disk is a real small file system (a tmpfs the
// test mounts; the test is skipped where mounting is not allowed) and the
// App runs in a child process, so that a crash of the process is seen as
// one.

const fullDiskChildEnv = "STRAND_FULLDISK_CHILD" // broker address, state directory, filler file

// TestFullDiskChild is the child process: it runs the counter topology on
// the broker until it has caught up, fills the disk of its state directory
// to the last byte, says so, and reports what Run returned once more events
// arrive. It does nothing in a normal run.
func TestFullDiskChild(t *testing.T) {
	crashtest.Child(t, "full-disk")
	spec := os.Getenv(fullDiskChildEnv)
	addr, rest, _ := strings.Cut(spec, "|")
	dir, filler, _ := strings.Cut(rest, "|")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := iggy.Connect(ctx, addr, iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topo, _, _ := grouptest.Counter("fulldisk")
	app, err := topology.Open(ctx, topo, cl, dir, topology.WithDiskReserve(4<<20), topology.WithCacheSize(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fillDisk(filler); err != nil {
		t.Fatal(err)
	}
	fmt.Println("fulldisk: filled")
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("Run goes on on a full disk")
	}
	fmt.Printf("fulldisk: run: %v\n", err)
	if !errors.Is(err, topology.ErrDiskFull) || !errors.Is(err, topology.ErrStoreFailed) {
		t.Fatalf("Run on a full disk = %v, want ErrDiskFull", err)
	}
}

// fillDisk writes name until its disk is full.
func fillDisk(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

func TestFullDiskStopsTheAppNotTheProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("child process test skipped in -short mode")
	}
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", disk).CombinedOutput(); err != nil {
		t.Skipf("a small file system cannot be mounted here (mount -t tmpfs: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", disk).Run() })
	dir, filler := filepath.Join(disk, "state"), filepath.Join(disk, "filler")

	ctx := context.Background()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	_, _, decl := grouptest.Counter("fulldisk")
	publishN(t, cl, decl, 200)

	child := crashtest.Start(t, crashtest.Spec{Role: "full-disk", Test: "TestFullDiskChild",
		Env: []string{fullDiskChildEnv + "=" + cl.Addr() + "|" + dir + "|" + filler}})
	child.WaitLine(t, "fulldisk: filled", time.Minute)
	publishN(t, cl, decl, 200) // events the child cannot commit
	_, report, _ := strings.Cut(child.WaitLine(t, "fulldisk: run: ", time.Minute), "fulldisk: ")
	if err := child.Wait(t, time.Minute); err != nil {
		t.Fatalf("the process embedding the App did not survive the full disk: %v (it said %q)", err, child.Tail(20))
	}
	t.Log(report)
	for _, want := range []string{"disk full", "bytes free", "make room on the disk"} {
		if !strings.Contains(report, want) {
			t.Errorf("Run's error does not say %q: %s", want, report)
		}
	}

	// Room again: a restart is exact.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	topo, n, _ := grouptest.Counter("fulldisk")
	reserve := topology.WithDiskReserve(4 << 20)
	runCaughtUp(t, topo, cl, dir, reserve)
	app, err := topology.Open(ctx, topo, cl, dir, reserve)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	for k := range 10 {
		if v, _, err := n.Get(ctx, fmt.Sprintf("k%d", k)); err != nil || v != 40 {
			t.Errorf("k%d = %d (%v) after the restart, want 40", k, v, err)
		}
	}
}
