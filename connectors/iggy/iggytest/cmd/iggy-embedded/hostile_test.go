package main

import (
	"encoding/binary"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client"
	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
)

// TestHostileClientsKeepTheBrokerSmall repeats the measurements of the
// issue against the command run as its own process, with its default
// limits: 8 unauthenticated connections sending whole 200 MiB
// SendMessages frames, 40 unauthenticated connections sending a 10 MiB
// control frame each and staying open, and one poll of 2^32-1 messages on
// a 400 MB partition. It checks the broker's peak RSS. Opt-in: it moves
// about 2.5 GB over loopback.
func TestHostileClientsKeepTheBrokerSmall(t *testing.T) {
	if os.Getenv("STRAND_RSS") != "1" && os.Getenv("STRAND_SOAK") != "1" {
		t.Skip("set STRAND_RSS=1 to measure the broker's memory under hostile clients")
	}
	limitMiB := int64(envInt("STRAND_RSS_LIMIT_MIB", 200))
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := brokerCommand(t, "-addr", addr, "-data", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	waitServing(t, addr, 30*time.Second, "broker")
	rss := func() int64 {
		kb, err := procStatus(pid, "VmHWM")
		if err != nil {
			t.Fatal(err)
		}
		return kb / 1024
	}
	frame := func(code uint32, n int) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(n+4))
		return binary.LittleEndian.AppendUint32(b, code)
	}
	flood := func(conns int, code uint32, n int, keep bool) {
		var wg sync.WaitGroup
		for i := 0; i < conns; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc, err := dialTCP(addr)
				if err != nil {
					t.Error(err)
					return
				}
				if !keep {
					defer nc.Close()
				}
				_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
				chunk := make([]byte, 1<<20)
				if _, err := nc.Write(frame(code, n)); err != nil {
					return
				}
				for sent := 0; sent < n; sent += len(chunk) {
					if _, err := nc.Write(chunk[:min(len(chunk), n-sent)]); err != nil {
						return // closed by the broker
					}
				}
			}()
		}
		wg.Wait()
	}
	flood(8, 101, 200<<20, false)
	t.Logf("after 8 unauthenticated 200 MiB SendMessages frames: peak RSS %d MiB", rss())
	flood(40, 201, 10<<20, true)
	t.Logf("after 40 unauthenticated 10 MiB control frames: peak RSS %d MiB", rss())

	cli, err := client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.LoginUser("iggy", "iggy"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.CreateStream("h"); err != nil {
		t.Fatal(err)
	}
	sid, _ := iggcon.NewIdentifier("h")
	tid, _ := iggcon.NewIdentifier("t")
	if _, err := cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	body := []byte(strings.Repeat("m", 10_000))
	ms := make([]iggcon.IggyMessage, 1000)
	for i := range ms {
		ms[i], _ = iggcon.NewIggyMessage(body)
	}
	for i := 0; i < 40; i++ {
		if err := cli.SendMessages(sid, tid, iggcon.PartitionId(0), ms); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("after sending 400 MB: peak RSS %d MiB", rss())
	part := uint32(0)
	pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.FirstPollingStrategy(), math.MaxUint32, false, &part)
	if err != nil {
		t.Fatal(err)
	}
	peak := rss()
	t.Logf("after one poll of 2^32-1 messages: %d messages in the reply, peak RSS %d MiB", len(pm.Messages), peak)
	if len(pm.Messages) == 0 || len(pm.Messages) == 40_000 {
		t.Fatalf("poll reply of %d messages: not capped", len(pm.Messages))
	}
	if peak > limitMiB {
		t.Fatalf("broker peak RSS %d MiB, limit %d MiB", peak, limitMiB)
	}
}
