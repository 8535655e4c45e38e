package iggytest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/internal/testrun"
)

// rawConn is a client connection that speaks frames directly.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, nc: nc}
}

// send writes a frame header claiming length payload bytes, then payload
// (which may be shorter: the rest is never sent).
func (r *rawConn) send(code Command, length int, payload []byte) {
	r.t.Helper()
	frame := binary.LittleEndian.AppendUint32(nil, uint32(length+4))
	frame = binary.LittleEndian.AppendUint32(frame, uint32(code))
	_, err := r.nc.Write(append(frame, payload...))
	must(r.t, err)
}

// status reads one reply and returns its status.
func (r *rawConn) status() uint32 {
	r.t.Helper()
	var hdr [8]byte
	_, err := io.ReadFull(r.nc, hdr[:])
	must(r.t, err)
	_, err = io.CopyN(io.Discard, r.nc, int64(binary.LittleEndian.Uint32(hdr[4:])))
	must(r.t, err)
	return binary.LittleEndian.Uint32(hdr[:])
}

// closedByPeer reports whether the broker closed the connection.
func (r *rawConn) closedByPeer() bool {
	var b [1]byte
	_, err := r.nc.Read(b[:])
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

func (r *rawConn) login(user, pass string) uint32 {
	r.t.Helper()
	p := append([]byte{byte(len(user))}, user...)
	p = append(append(p, byte(len(pass))), pass...)
	p = binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(p, 0), 0)
	r.send(CmdLoginUser, len(p), p)
	return r.status()
}

func TestLimitsOnlySmallFramesBeforeLogin(t *testing.T) {
	tg := embeddedTarget(t)
	for _, tc := range []struct {
		name   string
		code   Command
		length int
		status uint32
	}{
		{"a 200 MiB SendMessages (over the frame limit too)", CmdSendMessages, 200 << 20, StatusInvalidCommand},
		{"a 32 MiB SendMessages", CmdSendMessages, 32 << 20, StatusUnauthenticated},
		{"a 10 MiB control frame", CmdGetStreams, 10 << 20, StatusUnauthenticated},
		{"a frame just over the pre-login limit", CmdLoginUser, DefaultMaxPreLoginFrame + 1, StatusUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, tg.addr)
			r.send(tc.code, tc.length, nil) // the payload is never sent
			if st := r.status(); st != tc.status {
				t.Fatalf("status %d, want %d", st, tc.status)
			}
			if !r.closedByPeer() {
				t.Fatalf("connection left open")
			}
		})
	}
	// Logged in, a frame over the pre-login limit is read and answered.
	r := dialRaw(t, tg.addr)
	if st := r.login("iggy", "iggy"); st != 0 {
		t.Fatalf("login: %d", st)
	}
	big := make([]byte, 1<<20)
	r.send(CmdGetStream, len(big), big)
	if st := r.status(); st != StatusInvalidCommand {
		t.Fatalf("1 MiB GetStream after login: status %d, want %d (read and refused as malformed)", st, StatusInvalidCommand)
	}
	// Over the frame limit: refused unread, connection closed.
	r.send(CmdSendMessages, DefaultMaxFrame+1, nil)
	if st := r.status(); st != StatusInvalidCommand || !r.closedByPeer() {
		t.Fatalf("frame over the limit: status %d", st)
	}
}

func TestLimitsCapConnections(t *testing.T) {
	tg := embeddedTarget(t, WithLimits(Limits{MaxConnections: 3, MaxUnauthenticated: 2}))
	a, b := dialRaw(t, tg.addr), dialRaw(t, tg.addr)
	a.send(CmdPing, 0, nil)
	b.send(CmdPing, 0, nil)
	if a.status() != 0 || b.status() != 0 {
		t.Fatalf("ping failed")
	}
	if c := dialRaw(t, tg.addr); !c.closedByPeer() {
		t.Fatalf("a third unauthenticated connection was served")
	}
	if st := a.login("iggy", "iggy"); st != 0 {
		t.Fatalf("login: %d", st)
	}
	// a is logged in: one unauthenticated place is free again.
	c := dialRaw(t, tg.addr)
	c.send(CmdPing, 0, nil)
	if c.status() != 0 {
		t.Fatalf("ping after a login freed a place")
	}
	// Three connections: the total cap.
	if d := dialRaw(t, tg.addr); !d.closedByPeer() {
		t.Fatalf("a fourth connection was served")
	}
	// Closing one frees its place.
	b.nc.Close()
	testrun.WaitFor(t, 10*time.Second, func() error {
		tg.srv.connMu.Lock()
		n := len(tg.srv.conns)
		tg.srv.connMu.Unlock()
		if n != 2 {
			return fmt.Errorf("closed connection still counted: %d connections, want 2", n)
		}
		return nil
	})
	e := dialRaw(t, tg.addr)
	if st := e.login("iggy", "iggy"); st != 0 {
		t.Fatalf("login on a freed place: %d", st)
	}
}

func TestLimitsLoginTimeoutClosesIdleUnauthenticatedConnections(t *testing.T) {
	const timeout = time.Second // a login right after the dial takes far less
	tg := embeddedTarget(t, WithLimits(Limits{LoginTimeout: timeout}))
	start := time.Now()
	idle := dialRaw(t, tg.addr)
	authed := dialRaw(t, tg.addr)
	if st := authed.login("iggy", "iggy"); st != 0 {
		t.Fatalf("login: %d", st)
	}
	if !idle.closedByPeer() {
		t.Fatalf("idle unauthenticated connection not closed")
	}
	time.Sleep(time.Until(start.Add(timeout + 200*time.Millisecond))) // past the timeout: the logged-in one stays
	authed.send(CmdPing, 0, nil)
	if st := authed.status(); st != 0 {
		t.Fatalf("ping on the logged-in connection: %d", st)
	}
}

func TestLimitsPollReplyStopsAtTheCap(t *testing.T) {
	const size = 1000
	tg := embeddedTarget(t, WithMaxMessageSize(size), WithLimits(Limits{MaxPollBytes: 1}))
	cap := tg.srv.cfg.limits.maxPollBytes
	if cap != size+maxUserHeadersSize+messageHeaderSize {
		t.Fatalf("poll cap %d: not raised to the largest message", cap)
	}
	cli := tg.login(t)
	sid, tid := tg.newTopic(t, cli, 1)
	payload := strings.Repeat("p", size)
	for i := 0; i < 4; i++ {
		var m []iggcon.IggyMessage
		for j := 0; j < 100; j++ {
			msg, err := iggcon.NewIggyMessage([]byte(fmt.Sprintf("%03d%s", i*100+j, payload[3:])))
			must(t, err)
			m = append(m, msg)
		}
		must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(0), m))
	}
	next := uint64(0)
	polls := 0
	for next < 400 {
		pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.OffsetPollingStrategy(next), math.MaxUint32, false, u32p(0))
		must(t, err)
		bytes := 0
		for i, m := range pm.Messages {
			if m.Header.Offset != next+uint64(i) || string(m.Payload[:3]) != fmt.Sprintf("%03d", next+uint64(i)) {
				t.Fatalf("poll from %d: message %d is offset %d", next, i, m.Header.Offset)
			}
			bytes += messageHeaderSize + len(m.Payload) + len(m.UserHeaders)
		}
		if len(pm.Messages) == 0 || bytes > cap {
			t.Fatalf("poll from %d: %d messages, %d bytes, cap %d", next, len(pm.Messages), bytes, cap)
		}
		next += uint64(len(pm.Messages))
		polls++
	}
	if want := 400 * (size + messageHeaderSize) / cap; polls <= want {
		t.Fatalf("%d polls for %d bytes under a cap of %d", polls, 400*(size+messageHeaderSize), cap)
	}
}

func TestLimitsClamp(t *testing.T) {
	l := limits{maxConns: 4, maxUnauthConns: 9, preLoginPayload: 1 << 30, maxFrame: 10, maxPollBytes: 8 << 30}
	l.clamp(maxPayloadSize)
	if l.maxPollBytes != maxReplyBytes || l.maxFrame != minFrameBytes || l.preLoginPayload != minFrameBytes || l.maxUnauthConns != 4 {
		t.Fatalf("clamped limits %+v", l)
	}
	if uint64(l.maxPollBytes)+16 > math.MaxUint32 {
		t.Fatalf("a poll reply could overflow its u32 length")
	}
}

// TestLimitsFlood sends what the issue measured (8 unauthenticated
// 200 MiB SendMessages frames, 40 idle connections with a 10 MiB control
// frame each) and checks the broker answered each without reading it.
// STRAND_SOAK=1 also sends the whole payloads.
func TestLimitsFlood(t *testing.T) {
	tg := embeddedTarget(t, WithLimits(Limits{MaxUnauthenticated: 64}))
	full := os.Getenv("STRAND_SOAK") != ""
	for i := 0; i < 48; i++ {
		r := dialRaw(t, tg.addr)
		code, n := CmdSendMessages, 200<<20
		if i >= 8 {
			code, n = CmdGetStreams, 10<<20
		}
		r.send(code, n, nil)
		if st := r.status(); st != StatusUnauthenticated && st != StatusInvalidCommand {
			t.Fatalf("connection %d: status %d", i, st)
		}
		if full {
			_, _ = r.nc.Write(make([]byte, n)) // fails once the broker closed
		}
	}
}
