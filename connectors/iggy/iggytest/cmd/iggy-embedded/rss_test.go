package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client"
	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
)

// procStatus reads a "VmRSS"/"VmHWM" line (kB) of /proc/PID/status.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestBrokerMemoryIsBoundedByTheCache publishes STRAND_RSS_MESSAGES
// (default 20,000,000) messages of 100 bytes to a durable iggy-embedded
// process, polls them all back, and checks that the process's peak
// resident set stays under STRAND_RSS_LIMIT_MIB (default 200). It runs only
// with STRAND_RSS=1 (or STRAND_SOAK=1): it writes about 3.5 GB and takes
// minutes.
//
//	STRAND_RSS=1 go test -run TestBrokerMemoryIsBoundedByTheCache -v -timeout 60m ./connectors/iggy/iggytest/cmd/iggy-embedded
func TestBrokerMemoryIsBoundedByTheCache(t *testing.T) {
	if os.Getenv("STRAND_RSS") != "1" && os.Getenv("STRAND_SOAK") != "1" {
		t.Skip("set STRAND_RSS=1 to measure the broker's memory (writes ~3.5 GB)")
	}
	total := envInt("STRAND_RSS_MESSAGES", 20_000_000)
	limitMiB := int64(envInt("STRAND_RSS_LIMIT_MIB", 200))
	const parts, batch, payload = 4, 5000, 100
	dir := t.TempDir()
	addr := freeAddr(t)
	args := []string{"-addr", addr, "-data", dir}
	if c := os.Getenv("STRAND_RSS_CACHE"); c != "" {
		args = append(args, "-cache", c)
	}
	cmd := brokerCommand(t, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	var peakKB atomic.Int64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				if kb, err := procStatus(pid, "VmRSS"); err == nil && kb > peakKB.Load() {
					peakKB.Store(kb)
				}
			}
		}
	}()
	defer func() { close(stopSampling); sampler.Wait() }()
	waitServing(t, addr, 30*time.Second, "broker")
	connect := func() iggcon.Client {
		cli, err := client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(addr)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.LoginUser("iggy", "iggy"); err != nil {
			t.Fatal(err)
		}
		return cli
	}
	admin := connect()
	defer admin.Close()
	if _, err := admin.CreateStream("rss"); err != nil {
		t.Fatal(err)
	}
	sid, _ := iggcon.NewIdentifier("rss")
	tid, _ := iggcon.NewIdentifier("t")
	if _, err := admin.CreateTopic(sid, "t", parts, iggcon.CompressionAlgorithmNone, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	body := []byte(strings.Repeat("m", payload))
	perPart := total / parts
	run := func(what string, fn func(p uint32, cli iggcon.Client) error) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, parts)
		for p := uint32(0); p < parts; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cli := connect()
				defer cli.Close()
				if err := fn(p, cli); err != nil {
					errs <- fmt.Errorf("%s, partition %d: %w", what, p, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	sendTime := run("send", func(p uint32, cli iggcon.Client) error {
		ms := make([]iggcon.IggyMessage, batch)
		for i := range ms {
			m, err := iggcon.NewIggyMessage(body)
			if err != nil {
				return err
			}
			ms[i] = m
		}
		for sent := 0; sent < perPart; sent += batch {
			if err := cli.SendMessages(sid, tid, iggcon.PartitionId(p), ms[:min(batch, perPart-sent)]); err != nil {
				return err
			}
		}
		return nil
	})
	afterSendKB := peakKB.Load()
	pollTime := run("poll", func(p uint32, cli iggcon.Client) error {
		next := uint64(0)
		for next < uint64(perPart) {
			pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.OffsetPollingStrategy(next), batch, false, &p)
			if err != nil {
				return err
			}
			if len(pm.Messages) == 0 {
				return fmt.Errorf("no messages at offset %d", next)
			}
			for _, m := range pm.Messages {
				if m.Header.Offset != next || len(m.Payload) != payload {
					return fmt.Errorf("message at %d: offset %d, %d bytes", next, m.Header.Offset, len(m.Payload))
				}
				next++
			}
		}
		return nil
	})
	hwm, _ := procStatus(pid, "VmHWM")
	peak := max(peakKB.Load(), hwm)
	var du int64
	_ = filepathWalkSize(dir, &du)
	t.Logf("%d messages of %d B in %d partitions: send %v (%.0f msg/s), poll %v (%.0f msg/s)",
		total, payload, parts, sendTime.Round(time.Second), float64(total)/sendTime.Seconds(),
		pollTime.Round(time.Second), float64(total)/pollTime.Seconds())
	t.Logf("broker RSS: peak %d MiB (after sending %d MiB, VmHWM %d MiB); data directory %d MiB",
		peak/1024, afterSendKB/1024, hwm/1024, du>>20)
	if peak > limitMiB*1024 {
		t.Fatalf("broker peak RSS %d MiB, limit %d MiB", peak/1024, limitMiB)
	}
}
