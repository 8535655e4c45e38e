package iggytest

import (
	"sync"
	"time"
)

// Request is what a ControlFunc sees of one client request.
type Request struct {
	// Command is the request's command code.
	Command Command
	// Payload is the request payload after the 8-byte frame header. It is
	// only valid during the call and must not be modified.
	Payload []byte
	// ClientID is the server's id of the connection (XXH32 of its address).
	ClientID uint32
	// Authenticated reports whether the connection is logged in.
	Authenticated bool
}

// Action says what the broker does with a request a ControlFunc saw.
type Action uint8

const (
	// Pass handles the request normally (after Reply.Delay).
	Pass Action = iota
	// Fail answers Reply.Status (non-zero) with an empty payload, without
	// executing the request.
	Fail
	// Respond answers status 0 with Reply.Payload, without executing the
	// request. The payload must be what the SDK expects for the command.
	Respond
	// Drop closes the connection without answering, as a crash would.
	Drop
)

// Reply is a ControlFunc's decision about one request.
type Reply struct {
	Action  Action
	Delay   time.Duration // wait this long before acting (aborted by Close)
	Status  uint32        // for Fail
	Payload []byte        // for Respond
}

// ControlFunc inspects one request and decides what happens to it, in the
// manner of franz-go's kfake control functions. It is called from the
// connection goroutines, possibly concurrently, so it must be safe for
// concurrent use; it must not call methods of the Server that registered
// it other than its remove function.
type ControlFunc func(req *Request) Reply

type control struct{ fn ControlFunc }

// Control registers fn to see every request (of every connection) before
// the broker handles it, until the returned remove function is called.
// Controls run in registration order: their delays add up and the first one
// that returns an Action other than Pass decides. Registering costs nothing
// on connections while no control is registered.
func (s *Server) Control(fn ControlFunc) (remove func()) {
	c := &control{fn: fn}
	s.addControl(c)
	var once sync.Once
	return func() { once.Do(func() { s.removeControl(c) }) }
}

func (s *Server) addControl(c *control) {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	var cur []*control
	if p := s.controls.Load(); p != nil {
		cur = *p
	}
	next := append(append([]*control(nil), cur...), c)
	s.controls.Store(&next)
}

func (s *Server) removeControl(c *control) {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	var cur []*control
	if p := s.controls.Load(); p != nil {
		cur = *p
	}
	next := make([]*control, 0, len(cur))
	for _, x := range cur {
		if x != c {
			next = append(next, x)
		}
	}
	s.controls.Store(&next)
}

// FailNext answers the next n requests with command code (from any
// connection) with status instead of executing them, then stops. status
// should be an Iggy error code (see the Status constants); 0 is taken as
// StatusError.
func (s *Server) FailNext(code Command, n int, status uint32) {
	if status == 0 {
		status = StatusError
	}
	s.countedControl(code, n, Reply{Action: Fail, Status: status})
}

// DelayNext holds the next n requests with command code for d each before
// executing them normally, then stops.
func (s *Server) DelayNext(code Command, n int, d time.Duration) {
	s.countedControl(code, n, Reply{Action: Pass, Delay: d})
}

// countedControl applies r to the next n requests with code. The control
// removes itself through its own pointer: it may run on a connection
// before the registering call returns (an earlier version read the remove
// function from a variable assigned only after registration, a data race
// that could call a nil function and crash the process).
func (s *Server) countedControl(code Command, n int, r Reply) {
	if n <= 0 {
		return
	}
	var mu sync.Mutex
	left := n
	c := &control{}
	c.fn = func(req *Request) Reply {
		if req.Command != code {
			return Reply{}
		}
		mu.Lock()
		if left == 0 {
			mu.Unlock()
			return Reply{}
		}
		left--
		last := left == 0
		mu.Unlock()
		if last {
			s.removeControl(c)
		}
		return r
	}
	s.addControl(c)
}

// runControls applies the registered controls to one request. handled
// reports that a reply (or a drop) already happened.
func (c *conn) runControls(ctls []*control, cmd Command, payload []byte) (handled bool, err error) {
	req := &Request{Command: cmd, Payload: payload, ClientID: c.sess.clientID, Authenticated: c.sess.userID.Load() >= 0}
	var delay time.Duration
	decided := Reply{}
	for _, ctl := range ctls {
		r := ctl.fn(req)
		delay += r.Delay
		if r.Action != Pass {
			decided = r
			break
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.s.done:
			t.Stop()
			return true, errCloseConn
		}
	}
	switch decided.Action {
	case Fail:
		st := decided.Status
		if st == 0 {
			st = StatusError
		}
		return true, c.writeStatus(st)
	case Respond:
		b := append(c.wbuf[:8], decided.Payload...)
		return true, c.writeOK(b)
	case Drop:
		return true, errCloseConn
	}
	return false, nil
}
