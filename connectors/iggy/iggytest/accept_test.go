package iggytest

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flakyListener fails its first Accept calls with EMFILE, as a process out
// of file descriptors does.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

func TestAcceptErrorsDoNotStopTheServer(t *testing.T) {
	srv, err := NewServer(WithTokenCleaner(-1), WithRebalancing(0, -1)) // only the accept loop runs
	must(t, err)
	defer srv.Close()
	// Swap in a listener that fails a few times, and restart the loop on it.
	srv.ln.Close()
	srv.wg.Wait()
	srv.closed.Store(false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(3)
	srv.ln, srv.addr = fl, ln.Addr().String()
	srv.wg.Add(1)
	go srv.acceptLoop()
	// A ping must be answered: before the fix the loop stopped at the
	// first EMFILE and the connection sat unaccepted in the backlog.
	c, err := net.DialTimeout("tcp", srv.addr, time.Second)
	must(t, err)
	defer c.Close()
	must(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Write([]byte{4, 0, 0, 0, byte(CmdPing), 0, 0, 0})
	must(t, err)
	var resp [8]byte
	if _, err := io.ReadFull(c, resp[:]); err != nil {
		t.Fatalf("no answer after failed accepts: %v", err)
	}
	if fl.fails.Load() >= 0 {
		t.Fatal("the failing accepts were not exercised")
	}
}
