package iggytest

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client"
	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The soaks run only with STRAND_SOAK=1 (for as long as
// STRAND_SOAK_DURATION, default 2m; run them under -race):
//
//	STRAND_SOAK=1 go test -race -run TestSoak -v -timeout 30m ./connectors/iggy/iggytest

func soakDuration(t *testing.T) time.Duration {
	if os.Getenv("STRAND_SOAK") != "1" {
		t.Skip("set STRAND_SOAK=1 to soak the fault paths")
	}
	if d, err := time.ParseDuration(os.Getenv("STRAND_SOAK_DURATION")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Minute
}

// soakClient is an SDK client whose calls are abandoned after a call
// timeout, as strand's connector abandons them: the client is closed (so
// the call returns) and a new one is made for the next call.
type soakClient struct {
	addr    string
	timeout time.Duration
	cli     iggcon.Client
}

func (sc *soakClient) close() {
	if sc.cli != nil {
		_ = sc.cli.Close()
		sc.cli = nil
	}
}

// call runs op with the call timeout; false when it failed or timed out.
func (sc *soakClient) call(op func(iggcon.Client) error) bool {
	if sc.cli == nil {
		// The SDK dials forever when nothing listens: probe first.
		c, err := net.DialTimeout("tcp", sc.addr, 200*time.Millisecond)
		if err != nil {
			return false
		}
		c.Close()
		cli, err := client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(sc.addr)))
		if err != nil {
			return false
		}
		sc.cli = cli
		if !sc.call(func(c iggcon.Client) error { _, err := c.LoginUser("iggy", "iggy"); return err }) {
			sc.close()
			return false
		}
	}
	cli := sc.cli
	done := make(chan error, 1)
	go func() { done <- op(cli) }()
	t := time.NewTimer(sc.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			sc.close() // the stream may be out of step; start afresh
			return false
		}
		return true
	case <-t.C:
		sc.close()
		<-done
		return false
	}
}

// answersPing reports whether a fresh connection gets a ping answered.
func answersPing(addr string, within time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, within)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(within))
	if _, err := c.Write([]byte{4, 0, 0, 0, byte(CmdPing), 0, 0, 0}); err != nil {
		return err
	}
	var resp [8]byte
	_, err = io.ReadFull(c, resp[:])
	return err
}

// TestSoakFaultsInProcess runs SDK clients with call timeouts against a
// durable broker while an injector delays requests past the call timeout,
// fails them, drops them and their connections, refuses connections and
// restarts the broker on its data directory. The broker must keep
// answering, and every acknowledged message must be there at the end.
func TestSoakFaultsInProcess(t *testing.T) {
	d := soakDuration(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	opts := []Option{WithDataDir(dir), WithAddr(addr), WithSegmentSize(256 << 10), WithCacheSize(1 << 20),
		WithHeartbeat(2 * time.Second)} // last: dropped for the final check
	var srvMu sync.Mutex
	srv, err := NewServer(opts...)
	must(t, err)
	defer func() {
		srvMu.Lock()
		if srv != nil {
			srv.Close()
		}
		srvMu.Unlock()
	}()
	setup := &soakClient{addr: addr, timeout: 5 * time.Second}
	sid, tid := mustID("soak"), mustID("t")
	const parts = 3
	if !setup.call(func(c iggcon.Client) error {
		if _, err := c.CreateStream("soak"); err != nil {
			return err
		}
		if _, err := c.CreateTopic(sid, "t", parts, iggcon.CompressionAlgorithmNone, 0, 0, nil); err != nil {
			return err
		}
		_, err := c.CreateConsumerGroup(sid, tid, "g")
		return err
	}) {
		t.Fatal("setup failed")
	}
	setup.close()

	stop := make(chan struct{})
	var acked [parts]atomic.Int64
	var ops, fails, faults, restarts atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := &soakClient{addr: addr, timeout: 150 * time.Millisecond}
			defer sc.close()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			consumer := iggcon.NewSingleConsumer(mustID(fmt.Sprint("c", w)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := uint32(rng.IntN(parts))
				var ok bool
				switch k := rng.IntN(10); {
				case k < 4:
					n := 1 + rng.IntN(20)
					ms := make([]iggcon.IggyMessage, n)
					for i := range ms {
						ms[i], _ = iggcon.NewIggyMessage([]byte(fmt.Sprintf("w%d-%d", w, i)))
					}
					if ok = sc.call(func(c iggcon.Client) error { return c.SendMessages(sid, tid, iggcon.PartitionId(p), ms) }); ok {
						acked[p].Add(int64(n))
					}
				case k < 6:
					ok = sc.call(func(c iggcon.Client) error {
						pm, err := c.PollMessages(sid, tid, consumer, iggcon.NextPollingStrategy(), uint32(1+rng.IntN(100)), true, &p)
						if err == nil && len(pm.Messages) > 0 {
							_ = c.StoreConsumerOffset(consumer, sid, tid, pm.Messages[len(pm.Messages)-1].Header.Offset, &p)
						}
						return err
					})
				case k < 7:
					ok = sc.call(func(c iggcon.Client) error {
						if err := c.JoinConsumerGroup(sid, tid, mustID("g")); err != nil {
							return err
						}
						_, err := c.PollMessages(sid, tid, iggcon.NewGroupConsumer(mustID("g")), iggcon.NextPollingStrategy(), 10, true, nil)
						if err != nil {
							return err
						}
						return c.LeaveConsumerGroup(sid, tid, mustID("g"))
					})
				case k < 8:
					ok = sc.call(func(c iggcon.Client) error {
						name := fmt.Sprintf("soak-%d-%d", w, rng.IntN(5))
						_, _ = c.CreateUser(name, "password", iggcon.Active, &iggcon.Permissions{})
						_, err := c.GetUser(mustID(name))
						return err
					})
				case k < 9:
					ok = sc.call(func(c iggcon.Client) error { _, err := c.GetStats(); return err })
				default:
					ok = sc.call(func(c iggcon.Client) error {
						_, err := c.GetTopic(sid, tid)
						return err
					})
				}
				ops.Add(1)
				if !ok {
					fails.Add(1)
				}
			}
		}()
	}

	// The injector.
	rng := rand.New(rand.NewPCG(42, 7))
	cmds := []Command{CmdSendMessages, CmdPollMessages, CmdStoreConsumerOffset, CmdJoinConsumerGroup, CmdLoginUser, CmdCreateUser, CmdGetStats}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
		srvMu.Lock()
		s := srv
		faults.Add(1)
		switch k := rng.IntN(12); {
		case k < 4:
			s.DelayNext(cmds[rng.IntN(len(cmds))], 1+rng.IntN(3), time.Duration(rng.IntN(400))*time.Millisecond)
		case k < 6:
			s.FailNext(cmds[rng.IntN(len(cmds))], 1, []uint32{StatusError, StatusPartitionNotFound, StatusUnauthenticated, StatusStaleClient}[rng.IntN(4)])
		case k < 7:
			s.DropConnections()
		case k < 8:
			s.RefuseConnections(time.Duration(rng.IntN(100)) * time.Millisecond)
		case k < 10:
			// Drop the next request (after a delay past the call
			// timeout, half the time) without answering it.
			var once atomic.Bool
			var rm atomic.Pointer[func()]
			delay := time.Duration(rng.IntN(2)) * 200 * time.Millisecond
			remove := s.Control(func(req *Request) Reply {
				if req.Command == CmdPing || !once.CompareAndSwap(false, true) {
					return Reply{}
				}
				if f := rm.Load(); f != nil {
					go (*f)()
				}
				return Reply{Action: Drop, Delay: delay}
			})
			rm.Store(&remove)
		default:
			must(t, s.Close())
			ns, err := NewServer(opts...)
			if err != nil {
				srvMu.Unlock()
				t.Fatalf("restart on the data directory: %v", err)
			}
			srv = ns
			restarts.Add(1)
		}
		srvMu.Unlock()
		// Whatever the fault, the broker answers a fresh ping soon.
		var perr error
		for i := 0; i < 40; i++ {
			if perr = answersPing(addr, time.Second); perr == nil {
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		if perr != nil {
			t.Fatalf("broker stopped answering after fault %d: %v", faults.Load(), perr)
		}
	}
	close(stop)
	wg.Wait()

	srvMu.Lock()
	must(t, srv.Close())
	// The check polls for longer than the heartbeat allows an SDK client
	// (it pings every 5 s): reopen without heartbeat verification.
	srv, err = NewServer(opts[:len(opts)-1]...)
	srvMu.Unlock()
	must(t, err)
	check := &soakClient{addr: addr, timeout: time.Minute}
	defer check.close()
	for p := uint32(0); p < parts; p++ {
		var got []iggcon.IggyMessage
		if !check.call(func(c iggcon.Client) (err error) {
			got, err = pollAllErr(c, sid, tid, p)
			return err
		}) {
			t.Fatalf("final poll of partition %d failed", p)
		}
		if int64(len(got)) < acked[p].Load() {
			t.Fatalf("partition %d: %d messages, %d were acknowledged", p, len(got), acked[p].Load())
		}
		for i, m := range got {
			if m.Header.Offset != uint64(i) {
				t.Fatalf("partition %d: message %d has offset %d", p, i, m.Header.Offset)
			}
		}
		t.Logf("partition %d: %d messages stored, %d acknowledged", p, len(got), acked[p].Load())
	}
	t.Logf("%v: %d operations (%d failed or timed out), %d faults, %d restarts", d, ops.Load(), fails.Load(), faults.Load(), restarts.Load())
}

// TestSoakKill9Restarts kills a durable broker process with SIGKILL again
// and again while a client publishes with a call timeout, restarts it on
// the same directory and address, and checks every acknowledged message.
func TestSoakKill9Restarts(t *testing.T) {
	d := soakDuration(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	startChild := func() *crashtest.Proc {
		p, _ := startBroker(t, dir, addr)
		return p
	}
	cmd := startChild()
	sc := &soakClient{addr: addr, timeout: 200 * time.Millisecond}
	defer sc.close()
	sid, tid := mustID("k"), mustID("t")
	if !sc.call(func(c iggcon.Client) error {
		if _, err := c.CreateStream("k"); err != nil {
			return err
		}
		_, err := c.CreateTopic(sid, "t", 2, iggcon.CompressionAlgorithmNone, 0, 0, nil)
		return err
	}) {
		t.Fatal("setup failed")
	}
	var acked [2]int64
	rounds := 0
	deadline := time.Now().Add(d)
	rng := rand.New(rand.NewPCG(9, 9))
	for time.Now().Before(deadline) {
		killAt := time.Now().Add(time.Duration(20+rng.IntN(300)) * time.Millisecond)
		var killed atomic.Bool
		go func() {
			time.Sleep(time.Until(killAt)) // a kill at a random moment
			cmd.Kill()
			killed.Store(true)
		}()
		for !killed.Load() {
			p := uint32(rng.IntN(2))
			n := 1 + rng.IntN(50)
			ms := make([]iggcon.IggyMessage, n)
			for i := range ms {
				ms[i], _ = iggcon.NewIggyMessage([]byte(strings.Repeat("k", 1+rng.IntN(200))))
			}
			if sc.call(func(c iggcon.Client) error { return c.SendMessages(sid, tid, iggcon.PartitionId(p), ms) }) {
				acked[p] += int64(n)
			}
		}
		<-cmd.Done()
		sc.close()
		cmd = startChild()
		rounds++
		for p := uint32(0); p < 2; p++ {
			var got []iggcon.IggyMessage
			check := &soakClient{addr: addr, timeout: 30 * time.Second}
			if !check.call(func(c iggcon.Client) (err error) { got, err = pollAllErr(c, sid, tid, p); return err }) {
				t.Fatalf("round %d: poll after restart failed", rounds)
			}
			check.close()
			if int64(len(got)) < acked[p] {
				t.Fatalf("round %d, partition %d: %d messages after kill -9, %d acknowledged", rounds, p, len(got), acked[p])
			}
			for i, m := range got {
				if m.Header.Offset != uint64(i) {
					t.Fatalf("round %d, partition %d: message %d has offset %d", rounds, p, i, m.Header.Offset)
				}
			}
		}
	}
	t.Logf("%d kill -9 rounds, %d + %d messages acknowledged and kept", rounds, acked[0], acked[1])
}

// pollAllErr is pollAll for a goroutine other than the test's.
func pollAllErr(cli iggcon.Client, sid, tid iggcon.Identifier, p uint32) ([]iggcon.IggyMessage, error) {
	var out []iggcon.IggyMessage
	for {
		pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.OffsetPollingStrategy(uint64(len(out))), 1000, false, &p)
		if err != nil {
			return out, err
		}
		if len(pm.Messages) == 0 {
			return out, nil
		}
		out = append(out, pm.Messages...)
	}
}
