package iggytest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/binary_serialization"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/internal/testrun"
)

func TestFailNextFailsExactlyNRequestsOfThatCommand(t *testing.T) {
	tg := embeddedTarget(t)
	cli := tg.login(t)
	sid, tid := tg.newTopic(t, cli, 1)
	tg.srv.FailNext(CmdSendMessages, 2, StatusPartitionNotFound)
	must(t, cli.Ping()) // other commands are untouched
	wantErr(t, cli.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, "a", 1)), ierror.ErrPartitionNotFound)
	wantErr(t, cli.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, "b", 1)), ierror.ErrPartitionNotFound)
	must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, "c", 1)))
	pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.FirstPollingStrategy(), 10, false, u32p(0))
	must(t, err)
	if got := payloads(pm); len(got) != 1 || got[0] != "c-0" {
		t.Fatalf("failed sends were stored: %v", got)
	}
}

func TestDelayNextHoldsRequests(t *testing.T) {
	tg := embeddedTarget(t)
	cli := tg.login(t)
	tg.srv.DelayNext(CmdPing, 1, 150*time.Millisecond)
	start := time.Now()
	must(t, cli.Ping())
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("delayed ping took %v", d)
	}
	start = time.Now()
	must(t, cli.Ping())
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("second ping still delayed: %v", d)
	}
}

func TestDropConnectionsCutsClientsAndTheirGroups(t *testing.T) {
	tg := embeddedTarget(t)
	admin := tg.login(t)
	sid, tid := tg.newTopic(t, admin, 2)
	_, err := admin.CreateConsumerGroup(sid, tid, "g")
	must(t, err)
	member := tg.login(t)
	must(t, member.JoinConsumerGroup(sid, tid, mustID("g")))
	tg.srv.DropConnections()
	if err := member.Ping(); err == nil {
		t.Fatal("ping on a dropped connection succeeded")
	}
	fresh := tg.login(t)
	testrun.WaitFor(t, 2*time.Second, func() error {
		g, err := fresh.GetConsumerGroup(sid, tid, mustID("g"))
		must(t, err)
		if g.MembersCount != 0 {
			return fmt.Errorf("dropped member still in group: %+v", g)
		}
		return nil
	})
}

func TestRefuseConnectionsClosesNewConnectionsForAWhile(t *testing.T) {
	tg := embeddedTarget(t)
	old := tg.login(t)
	tg.srv.RefuseConnections(300 * time.Millisecond)
	nc, err := net.Dial("tcp", tg.addr)
	must(t, err)
	_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read on a refused connection: %v, want EOF", err)
	}
	nc.Close()
	must(t, old.Ping()) // existing connections keep working
	waitAccepting(t, tg.addr)
	must(t, tg.login(t).Ping())
}

func TestControlCanAnswerDropAndObserve(t *testing.T) {
	tg := embeddedTarget(t)
	var seen atomic.Int32
	var authed atomic.Bool
	remove := tg.srv.Control(func(r *Request) Reply {
		switch r.Command {
		case CmdGetStreams:
			seen.Add(1)
			authed.Store(r.Authenticated)
			// One stream header, as the SDK expects.
			e := encoder(nil).u32(9).u64(1).u32(0).u64(0).u64(0).name("fake")
			return Reply{Action: Respond, Payload: e}
		case CmdGetTopics:
			return Reply{Action: Drop}
		}
		return Reply{}
	})
	cli := tg.login(t)
	list, err := cli.GetStreams()
	must(t, err)
	if len(list) != 1 || list[0].Name != "fake" || list[0].Id != 9 || seen.Load() != 1 || !authed.Load() {
		t.Fatalf("controlled GetStreams = %+v (seen %d)", list, seen.Load())
	}
	other := tg.login(t)
	if _, err := other.GetTopics(mustID("x")); err == nil {
		t.Fatal("dropped request answered")
	}
	remove()
	list, err = cli.GetStreams()
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("after remove: %+v", list)
	}
}

func TestCloseAbortsDelaysAndEndsEveryGoroutine(t *testing.T) {
	srv, err := NewServer()
	must(t, err)
	tg := target{addr: srv.Addr(), user: "iggy", pass: "iggy", srv: srv}
	cli := tg.login(t)
	held := make(chan struct{})
	var once sync.Once
	srv.Control(func(req *Request) Reply {
		if req.Command != CmdPing {
			return Reply{}
		}
		once.Do(func() { close(held) })
		return Reply{Action: Pass, Delay: time.Hour}
	})
	errc := make(chan error, 1)
	go func() { errc <- cli.Ping() }()
	<-held // the ping is held by the broker
	start := time.Now()
	must(t, srv.Close())
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if err := <-errc; err == nil {
		t.Fatal("ping answered although the server closed")
	}
	must(t, srv.Close()) // idempotent
	// goleak (TestMain) checks that no goroutine is left behind.
}

func TestPersonalAccessTokenLogin(t *testing.T) {
	tg := embeddedTarget(t, WithPersonalAccessToken("secret-token"), WithCredentials("admin", "s3cret"))
	cli := tg.connect(t)
	_, err := cli.LoginWithPersonalAccessToken("wrong-token")
	wantErr(t, err, ierror.ErrResourceNotFound)
	id, err := cli.LoginWithPersonalAccessToken("secret-token")
	must(t, err)
	if id.UserId != 0 {
		t.Fatalf("user id %d", id.UserId)
	}
	must(t, cli.Ping())
	_, err = tg.connect(t).LoginUser("iggy", "iggy")
	wantErr(t, err, ierror.ErrInvalidCredentials)
	_, err = tg.connect(t).LoginUser("admin", "s3cret")
	must(t, err)
}

func TestGetMeShowsThisSession(t *testing.T) {
	tg := embeddedTarget(t)
	cli := tg.login(t)
	sid, tid := tg.newTopic(t, cli, 1)
	_, err := cli.CreateConsumerGroup(sid, tid, "g")
	must(t, err)
	// The v0.8.0 SDK has no GetMe: decode the raw reply with its decoder.
	st, body := tg.rawCall(t, CmdGetMe, nil)
	if st != 0 {
		t.Fatalf("GetMe status %d", st)
	}
	me := binaryserialization.DeserializeClient(body)
	if me.UserID != 0 || me.Transport != string(iggcon.Tcp) || me.ConsumerGroupsCount != 0 || me.Address == "" {
		t.Fatalf("GetMe = %+v", me)
	}
	// GetClient of an unknown id answers an empty OK, as the server does.
	st, body = tg.rawCall(t, CmdGetClient, binary.LittleEndian.AppendUint32(nil, 12345))
	if st != 0 || len(body) != 0 {
		t.Fatalf("GetClient(unknown) = %d, %x", st, body)
	}
}

func TestGroupPollOfAnUnownedPartitionIsEmpty(t *testing.T) {
	tg := embeddedTarget(t)
	cli := tg.login(t)
	sid, tid := tg.newTopic(t, cli, 2)
	_, err := cli.CreateConsumerGroup(sid, tid, "g")
	must(t, err)
	must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(1), msgs(t, "m", 1)))
	other := tg.login(t)
	must(t, cli.JoinConsumerGroup(sid, tid, mustID("g")))
	must(t, other.JoinConsumerGroup(sid, tid, mustID("g")))
	g, err := cli.GetConsumerGroup(sid, tid, mustID("g"))
	must(t, err)
	if len(g.Members) != 2 || len(g.Members[0].Partitions) != 1 || g.Members[0].Partitions[0] != 0 {
		t.Fatalf("assignment %+v", g.Members)
	}
	pm, err := cli.PollMessages(sid, tid, iggcon.NewGroupConsumer(mustID("g")), iggcon.FirstPollingStrategy(), 10, false, u32p(1))
	must(t, err)
	if len(pm.Messages) != 0 || pm.PartitionId != 0 || pm.CurrentOffset != 0 {
		t.Fatalf("poll of unowned partition = %+v", pm)
	}
	pm, err = other.PollMessages(sid, tid, iggcon.NewGroupConsumer(mustID("g")), iggcon.FirstPollingStrategy(), 10, false, u32p(1))
	must(t, err)
	if len(pm.Messages) != 1 || pm.PartitionId != 1 {
		t.Fatalf("poll of owned partition = %+v", pm)
	}
}

// TestGarbageNeverHurtsTheBroker sends malformed frames over TCP: each is
// answered with the server's status or its connection is closed, and the
// broker keeps serving the SDK with its data intact.
func TestGarbageNeverHurtsTheBroker(t *testing.T) {
	tg := embeddedTarget(t)
	cli := tg.login(t)
	sid, tid := tg.newTopic(t, cli, 1)
	must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, "kept", 2)))
	frame := func(length uint32, code Command, payload []byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, length)
		b = binary.LittleEndian.AppendUint32(b, uint32(code))
		return append(b, payload...)
	}
	for _, tc := range []struct {
		name   string
		bytes  []byte
		status uint32 // expected first reply; 0 = none expected, connection closed
		closed bool
	}{
		{"unknown code", frame(4+3, 9999, []byte{1, 2, 3}), StatusInvalidCommand, false},
		{"length below 4", frame(2, CmdPing, nil), StatusInvalidCommand, false},
		{"oversized control frame", frame(0xFFFFFFF0, CmdGetStreams, nil), StatusInvalidCommand, true},
		{"oversized send frame", frame(0xFFFFFFF0, CmdSendMessages, nil), StatusInvalidCommand, true},
		{"truncated identifier", frame(4+2, CmdGetStream, []byte{1, 4}), StatusInvalidCommand, false},
		{"bad identifier kind", frame(4+6, CmdGetStream, []byte{7, 4, 0, 0, 0, 0}), StatusInvalidCommand, false},
		{"numeric identifier of 3 bytes", frame(4+5, CmdGetStream, []byte{1, 3, 0, 0, 0}), StatusInvalidFormat, false},
		{"send before login", frame(4+4, CmdSendMessages, []byte{0, 0, 0, 0}), StatusUnauthenticated, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", tg.addr)
			must(t, err)
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = nc.Write(tc.bytes)
			must(t, err)
			var hdr [8]byte
			_, err = io.ReadFull(nc, hdr[:])
			must(t, err)
			if st := binary.LittleEndian.Uint32(hdr[:]); st != tc.status || binary.LittleEndian.Uint32(hdr[4:]) != 0 {
				t.Fatalf("reply %x, want status %d", hdr, tc.status)
			}
			if tc.closed {
				if _, err := nc.Read(hdr[:1]); err != io.EOF {
					t.Fatalf("connection not closed after an oversized frame: %v", err)
				}
				return
			}
			_, err = nc.Write(frame(4, CmdPing, nil)) // still in step
			must(t, err)
			_, err = io.ReadFull(nc, hdr[:])
			must(t, err)
			if binary.LittleEndian.Uint32(hdr[:]) != 0 {
				t.Fatalf("ping after bad frame: %x", hdr)
			}
		})
	}
	pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.FirstPollingStrategy(), 10, false, u32p(0))
	must(t, err)
	if len(pm.Messages) != 2 {
		t.Fatalf("stored data changed: %v", payloads(pm))
	}
}

// TestCountedControlsAreSafeUnderLoad registers FailNext and DelayNext
// while other connections keep sending the targeted command: a control can
// run before its registration returns. Under -race this caught a read of
// the not yet assigned remove function (a nil call, fatal to the process).
func TestCountedControlsAreSafeUnderLoad(t *testing.T) {
	tg := embeddedTarget(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	var clis []iggcon.Client
	for i := 0; i < 4; i++ {
		clis = append(clis, tg.login(t))
	}
	for _, cli := range clis {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
					_, _ = cli.GetStreams()
				}
			}
		}()
	}
	for i := 0; i < 100; i++ {
		if i%2 == 0 {
			tg.srv.FailNext(CmdGetStreams, 1, StatusError)
		} else {
			tg.srv.DelayNext(CmdGetStreams, 1, 0)
		}
		// Let a connection use it up before anything else synchronises
		// with this goroutine.
		time.Sleep(time.Millisecond)
	}
	close(stop)
	for range clis {
		<-done
	}
	// Controls whose requests never came stay registered; they harm nothing.
	cli := tg.login(t)
	for i := 0; i < 1000; i++ {
		if p := tg.srv.controls.Load(); p == nil || len(*p) == 0 {
			return
		}
		_, _ = cli.GetStreams()
	}
	t.Fatal("counted controls never used up")
}

// waitAccepting waits until the server at addr accepts connections again
// after RefuseConnections: a refused connection is closed at once (EOF or
// a reset), an accepted one answers a ping. (Waiting for a read to time
// out instead took a refusing server that had not yet reached the
// connection for an accepting one, on a loaded machine.) The deadlines are
// hang guards.
func waitAccepting(t *testing.T, addr string) {
	t.Helper()
	testrun.WaitFor(t, 10*time.Second, func() error {
		nc, err := net.Dial("tcp", addr)
		must(t, err)
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = nc.Write([]byte{4, 0, 0, 0, byte(CmdPing), 0, 0, 0})
		var resp [8]byte
		if err == nil {
			_, err = io.ReadFull(nc, resp[:])
		}
		nc.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a ping got no answer and no close within 5 s")
		}
		if err != nil {
			return fmt.Errorf("the server still refuses connections: %v", err)
		}
		return nil
	})
}
