package iggytest

import (
	"math"
	"time"
)

// limits bounds what clients, logged in or not, can make the broker hold.
// Every limit has an option and a default that keeps a broker on loopback
// or in a test small; see WithLimits.
type limits struct {
	maxConns        int
	maxUnauthConns  int
	preLoginPayload int
	maxFrame        int
	maxPollBytes    int
	loginTimeout    time.Duration
}

// Defaults of the limits (see Limits).
const (
	DefaultMaxConnections       = 1024
	DefaultMaxUnauthenticated   = 64
	DefaultMaxPreLoginFrame     = 16 << 10
	DefaultMaxFrame             = 64 << 20
	DefaultMaxPollBytes         = 64 << 20
	DefaultLoginTimeout         = 10 * time.Second
	maxReplyBytes               = math.MaxUint32 - 16 // a reply's length is a u32
	minFrameBytes               = 1 << 10
	defaultMaxControlFrameBytes = maxControlPayload
)

// Limits bounds the resources clients can take. A zero field keeps its
// default. The defaults are as tight as Iggy server 0.8.0's own or
// tighter, and no client of the official SDK reaches them.
type Limits struct {
	// MaxConnections caps open client connections; more are accepted and
	// closed at once. Default DefaultMaxConnections.
	MaxConnections int
	// MaxUnauthenticated caps connections that have not logged in yet
	// (part of MaxConnections). Default DefaultMaxUnauthenticated.
	MaxUnauthenticated int
	// MaxPreLoginFrame is the largest request payload, in bytes, read
	// from a connection that has not logged in (a login is a few hundred
	// bytes); a larger frame is answered with status 40
	// (Unauthenticated) and the connection closed, before its payload is
	// read. Default DefaultMaxPreLoginFrame.
	MaxPreLoginFrame int
	// MaxFrame is the largest request payload in bytes (a SendMessages
	// batch; other requests are capped at 10 MiB, as the server does); a
	// larger frame is answered with status 3 (InvalidCommand) and the
	// connection closed. Default DefaultMaxFrame.
	MaxFrame int
	// MaxPollBytes caps the message bytes of one PollMessages reply: the
	// reply stops at the last whole message under the cap (it always holds
	// at least one message, so the cap is raised to the largest message
	// the broker accepts, see WithMaxMessageSize), and the client polls
	// again for the rest. At
	// most 4 GiB − 17, since a reply's length is a u32. Default
	// DefaultMaxPollBytes.
	MaxPollBytes int
	// LoginTimeout closes connections that have not logged in this long
	// after they were accepted. Default DefaultLoginTimeout; negative:
	// never.
	LoginTimeout time.Duration
}

// WithLimits sets the limits on clients (see Limits); zero fields keep
// their defaults.
func WithLimits(l Limits) Option {
	return optionFunc(func(c *config) {
		if l.MaxConnections > 0 {
			c.limits.maxConns = l.MaxConnections
		}
		if l.MaxUnauthenticated > 0 {
			c.limits.maxUnauthConns = l.MaxUnauthenticated
		}
		if l.MaxPreLoginFrame > 0 {
			c.limits.preLoginPayload = l.MaxPreLoginFrame
		}
		if l.MaxFrame > 0 {
			c.limits.maxFrame = l.MaxFrame
		}
		if l.MaxPollBytes > 0 {
			c.limits.maxPollBytes = l.MaxPollBytes
		}
		if l.LoginTimeout != 0 {
			c.limits.loginTimeout = l.LoginTimeout
		}
	})
}

func defaultLimits() limits {
	return limits{
		maxConns: DefaultMaxConnections, maxUnauthConns: DefaultMaxUnauthenticated,
		preLoginPayload: DefaultMaxPreLoginFrame, maxFrame: DefaultMaxFrame,
		maxPollBytes: DefaultMaxPollBytes, loginTimeout: DefaultLoginTimeout,
	}
}

// clamp keeps the limits workable: a poll reply holds the largest message
// (of maxPayload bytes), fits a u32 length, and a frame holds a login.
func (l *limits) clamp(maxPayload int) {
	l.maxPollBytes = min(max(l.maxPollBytes, maxPayload+maxUserHeadersSize+messageHeaderSize), maxReplyBytes)
	l.maxFrame = max(l.maxFrame, minFrameBytes)
	l.preLoginPayload = min(max(l.preLoginPayload, 1024), l.maxFrame)
	l.maxUnauthConns = min(l.maxUnauthConns, l.maxConns)
}

// frameLimit returns the largest payload c may send for cmd now, and the
// status to answer a larger one with: InvalidCommand over the frame limit
// (as the server answers an oversized frame), Unauthenticated over the
// pre-login limit.
func (c *conn) frameLimit(cmd Command, plen int) (int, uint32) {
	l := &c.s.cfg.limits
	limit := min(l.maxFrame, defaultMaxControlFrameBytes)
	if cmd == CmdSendMessages {
		limit = min(l.maxFrame, c.s.cfg.maxSendBytes)
	}
	if !c.loggedInOnce && plen <= limit && l.preLoginPayload < limit {
		return l.preLoginPayload, StatusUnauthenticated
	}
	return limit, StatusInvalidCommand
}

// admitConn reports whether a new connection may be served, counting it
// as unauthenticated when it is.
func (s *Server) admitConn() bool {
	l := &s.cfg.limits
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if len(s.conns) >= l.maxConns || s.unauth >= l.maxUnauthConns {
		return false
	}
	s.unauth++
	return true
}

// replyLogin replies to a login; a successful one ends the connection's
// unauthenticated phase first, so a client that saw the reply finds the
// place it held free.
func (c *conn) replyLogin(b []byte, err error) error {
	if err == nil {
		c.loggedIn()
	}
	return c.reply(b, err)
}

// loggedIn ends c's unauthenticated phase (once): its login deadline and
// its place among the unauthenticated connections.
func (c *conn) loggedIn() {
	if c.loggedInOnce {
		return
	}
	c.loggedInOnce = true
	_ = c.nc.SetReadDeadline(time.Time{})
	c.s.connMu.Lock()
	c.s.unauth--
	c.s.connMu.Unlock()
}
