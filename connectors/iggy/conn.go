package iggy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	ierror "github.com/apache/iggy/foreign/go/errors"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// conn is one connection of strand's own to the server (session.go speaks
// the protocol): dialing, TLS, login, deadlines, context cancellation and
// lazy reconnect. It carries one call at a time (the protocols allow one
// request in flight per connection) and queues the others in a
// context-aware way.
type conn struct {
	cl   *Client
	role string // for logs: "admin", "reader bank/accounts partition 3", ...

	lock chan struct{} // one-slot semaphore held for a whole call

	// Guarded by lock.
	sess     *session
	id012    *identity012 // binary protocol 0.12.0 identity, kept across reconnects
	failures int          // consecutive failed connects
	failedAt time.Time    // when the last connect failed

	mu     sync.Mutex // guards raw against Close from another goroutine
	raw    net.Conn   // the session's socket, for deadlines and aborts
	closed atomic.Bool
	life   context.Context // done when the conn is closed
	cancel context.CancelFunc
}

func newConn(cl *Client, role string) *conn {
	k := &conn{cl: cl, role: role, lock: make(chan struct{}, 1)}
	k.life, k.cancel = context.WithCancel(context.Background())
	return k
}

func (k *conn) acquire(ctx context.Context) error {
	select {
	case k.lock <- struct{}{}:
		return nil
	default:
	}
	select {
	case k.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-k.life.Done():
		return ErrClosed
	}
}

func (k *conn) release() { <-k.lock }

// call runs fn on a connected session, connecting first when needed. The
// returned error is nil, a server error (the SDK's sentinel for its status;
// the connection stays), or a transport failure wrapping ErrTimeout,
// ErrDisconnected, ErrProtocol, ErrUnreachable, ErrAuth, ErrIncompatible,
// ErrClosed or the context's error (the connection is discarded).
//
// fn must be safe to repeat: when it fails on a connection that was idle
// since an earlier call (the server may have dropped it meanwhile), call
// reconnects and runs it once more.
func (k *conn) call(ctx context.Context, fn func(*session) error) error {
	return k.do(ctx, true, fn)
}

// callOnce is call for requests that must not be repeated blindly
// (SendMessages): a failure is returned as it is.
func (k *conn) callOnce(ctx context.Context, fn func(*session) error) error {
	return k.do(ctx, false, fn)
}

func (k *conn) do(ctx context.Context, repeat bool, fn func(*session) error) error {
	if err := k.acquire(ctx); err != nil {
		return err
	}
	defer k.release()
	// A request that may be repeated (call) is sent again, on a fresh
	// connection, when the connection was lost before it was answered or
	// could not be made (a broker restarting, or dropping connections):
	// up to repeatLost times, paced by gate. Timeouts are not repeated.
	lost := 0
	for {
		if k.closed.Load() {
			return ErrClosed
		}
		if k.sess == nil {
			if err := k.gate(ctx); err != nil {
				return err
			}
			if err := k.connect(ctx); err != nil {
				if !k.repeatable(ctx, repeat, &lost, err) {
					return err
				}
				continue
			}
		}
		err := k.invoke(ctx, fn)
		if err == nil || (classify(err) != classTransport && !errors.Is(err, ErrProtocol)) {
			return err
		}
		k.drop()
		err = k.transportError(ctx, err)
		if !k.repeatable(ctx, repeat, &lost, err) {
			return err
		}
		k.cl.cfg.log.Debug("iggy: connection was lost; sending the request again on a new one", "addr", k.cl.addr, "conn", k.role, "err", err)
	}
}

// repeatLost is how many times call sends a request again after its
// connection was lost.
const repeatLost = 3

// repeatable reports whether a request that failed with err is sent again
// (see do), counting the repeat in lost.
func (k *conn) repeatable(ctx context.Context, repeat bool, lost *int, err error) bool {
	if !repeat || *lost >= repeatLost || ctx.Err() != nil || k.closed.Load() ||
		!(errors.Is(err, ErrDisconnected) || errors.Is(err, ErrUnreachable)) {
		return false
	}
	*lost++
	return true
}

// gate keeps a connection that keeps failing to connect from being retried
// in a tight loop by its callers: after n consecutive failures, the next
// attempt waits until at least half of the n-th backoff step has passed
// since the last one (callers that back off themselves do not wait twice).
func (k *conn) gate(ctx context.Context) error {
	if k.failures == 0 {
		return nil
	}
	d := time.Until(k.failedAt.Add(k.cl.cfg.backoff.floor(k.failures - 1)))
	if d <= 0 {
		return nil
	}
	if !sleep(ctx, d, k.life.Done()) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrClosed
	}
	return nil
}

// transportError turns the raw failure of a call into this package's error.
func (k *conn) transportError(ctx context.Context, err error) error {
	switch {
	case k.closed.Load():
		return ErrClosed
	case errors.Is(err, ErrProtocol):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("%w (connection abandoned: %v)", ctx.Err(), err)
	case isDeadline(err):
		return fmt.Errorf("%w: no reply from %s within %v: %w", ErrTimeout, k.cl.addr, k.cl.cfg.callTimeout, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrDisconnected, k.cl.addr, err)
}

// invoke runs fn under the call deadline and ctx.
func (k *conn) invoke(ctx context.Context, fn func(*session) error) (err error) {
	raw := k.raw
	_ = raw.SetDeadline(time.Now().Add(k.cl.cfg.callTimeout))
	var fired chan struct{}
	var stop func() bool
	if ctx.Done() != nil {
		fired = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			_ = raw.SetDeadline(time.Unix(1, 0))
			close(fired)
		})
	}
	defer func() {
		if stop != nil && !stop() {
			<-fired // its SetDeadline must not land after the next call's
		}
	}()
	return fn(k.sess)
}

// connect dials, logs in and, with ProtocolAuto, finds the server's
// protocol. It must hold lock.
func (k *conn) connect(ctx context.Context) error {
	cfg := &k.cl.cfg
	dctx, cancel := context.WithTimeout(ctx, cfg.dialTimeout)
	defer cancel()
	unlink := context.AfterFunc(k.life, cancel)
	defer unlink()

	fail := func(err error) error {
		k.failures++
		k.failedAt = time.Now()
		switch {
		case k.closed.Load():
			return ErrClosed
		case ctx.Err() != nil:
			return &connectError{fmt.Errorf("%w (connecting to %s: %v)", ctx.Err(), k.cl.addr, err)}
		}
		return &connectError{err}
	}
	proto := k.cl.protocol()
	err := k.dialLogin(ctx, dctx, proto, k.cl.addr)
	if errors.Is(err, errLegacyServer) && cfg.protocol == ProtocolAuto {
		k.cl.cfg.log.Info("iggy: the server speaks Iggy 0.8's legacy protocol; using it", "addr", k.cl.addr)
		k.cl.detected.Store(uint32(wire.Legacy))
		proto = wire.Legacy
		err = k.dialLogin(ctx, dctx, proto, k.cl.addr)
	}
	if err == nil {
		err = k.followLeader(ctx, dctx, proto)
	}
	if err != nil {
		return fail(err)
	}
	if cfg.protocol == ProtocolAuto {
		k.cl.detected.CompareAndSwap(0, uint32(proto))
	}
	if k.failures > 0 {
		k.cl.cfg.log.Info("iggy: reconnected", "addr", k.cl.addr, "conn", k.role, "after_failures", k.failures)
	}
	k.failures = 0
	return nil
}

// maxRedirects bounds how often one connect follows the cluster's leader
// (as the official SDK does).
const maxRedirects = 3

// followLeader moves a fresh session to the cluster's leader, as the
// official SDK does after each login: when GetClusterMetadata lists more
// than one node and a healthy leader at another address, the connection
// logs in there instead. A server that cannot answer, or a single node,
// keeps the connection where it is. In Iggy 0.10 the leader is the metadata
// primary; partition primaries are not routed (docs/design.md §7).
func (k *conn) followLeader(ctx, dctx context.Context, proto wire.Protocol) error {
	at := k.cl.addr
	for range maxRedirects {
		var leader string
		if err := k.invoke(ctx, func(s *session) error {
			var err error
			leader, err = s.leader()
			return err
		}); err != nil {
			k.drop()
			return k.transportError(ctx, fmt.Errorf("reading the cluster metadata: %w", err))
		}
		if leader == "" || leader == at {
			return nil
		}
		k.cl.cfg.log.Info("iggy: following the cluster's leader", "from", at, "leader", leader, "conn", k.role)
		k.drop()
		if err := k.dialLogin(ctx, dctx, proto, leader); err != nil {
			return err
		}
		at = leader
	}
	return nil
}

// dialLogin opens a socket to addr and logs in with protocol proto.
func (k *conn) dialLogin(ctx, dctx context.Context, proto wire.Protocol, addr string) error {
	cfg := &k.cl.cfg
	raw, err := dial(dctx, addr, cfg.tls)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, addr, err)
	}
	s := &session{nc: raw, proto: proto}
	if proto == wire.V012 {
		if k.id012 == nil {
			k.id012 = newIdentity012()
		}
		s.id = k.id012
	}
	k.mu.Lock()
	k.sess, k.raw = s, raw
	k.mu.Unlock()
	if k.closed.Load() { // Close ran meanwhile
		k.drop()
		return ErrClosed
	}
	err = k.invoke(ctx, func(s *session) error { return s.login(cfg) })
	if err == nil {
		return nil
	}
	k.drop()
	who := "user " + cfg.user
	if cfg.token != "" {
		who = "personal access token"
	}
	var ev *evictionError
	switch {
	case errors.Is(err, errLegacyServer):
		if cfg.protocol == ProtocolAuto {
			return err
		}
		return fmt.Errorf("%w: %s speaks %s, but the client was told to speak %s (WithProtocol(Protocol010)); use WithProtocol(Protocol08) or ProtocolAuto",
			ErrIncompatible, k.cl.addr, wire.Legacy, wire.V012)
	case errors.As(err, &ev) && ev.e.Reason == wire.EvictIncompatibleProtocol:
		return fmt.Errorf("%w: %s: %w", ErrIncompatible, k.cl.addr, err)
	case errors.As(err, &ev) && ev.e.Reason == wire.EvictInvalidCredentials:
		return fmt.Errorf("%w: %s as %s: %w (%w)", ErrAuth, k.cl.addr, who, err, ierror.ErrInvalidCredentials)
	case errors.As(err, &ev) && ev.e.Reason == wire.EvictInvalidToken:
		return fmt.Errorf("%w: %s as %s: %w (%w)", ErrAuth, k.cl.addr, who, err, ierror.ErrInvalidPersonalAccessToken)
	case errors.As(err, &ev) && ev.e.Reason == wire.EvictUserInactive:
		return fmt.Errorf("%w: %s as %s: %w (%w)", ErrAuth, k.cl.addr, who, err, ierror.ErrUserInactive)
	case classify(err) == classServer:
		return fmt.Errorf("%w: %s as %s: %w", ErrAuth, k.cl.addr, who, err)
	case proto == wire.Legacy && isDeadline(err) && ctx.Err() == nil:
		if cfg.protocol == ProtocolAuto {
			// The server may have been upgraded since 0.8 was found: try
			// 0.10 first again on the next connect.
			k.cl.detected.Store(0)
		}
		return fmt.Errorf("%w: no reply from %s to a %s login within %v: a server that speaks %s waits for a longer frame; use WithProtocol(Protocol010) or ProtocolAuto: %w",
			ErrIncompatible, k.cl.addr, wire.Legacy, cfg.callTimeout, wire.V012, err)
	}
	return k.transportError(ctx, fmt.Errorf("during login: %w", err))
}

// dial opens a TCP connection to addr (with a TLS handshake when t is
// set) within ctx, with Nagle's algorithm off: every request is one write
// and its reply is awaited.
func dial(ctx context.Context, addr string, t *tlsConfig) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if t == nil {
		return c, nil
	}
	cfg, err := t.std(addr)
	if err != nil {
		c.Close()
		return nil, err
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// awaitSessionGone waits until the server no longer lists a client
// connected from local (the server's view of a socket of ours that broke),
// polling GetClients, for at most max(4 × the call timeout, 30s). Behind a
// proxy or NAT the server sees another address and this returns at once.
// If the user may not list clients, it returns at once too (and logs why).
func (k *conn) awaitSessionGone(ctx context.Context, local string) error {
	if local == "" {
		return nil
	}
	deadline := time.Now().Add(max(4*k.cl.cfg.callTimeout, 30*time.Second))
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		present := false
		asked := true
		err := k.call(ctx, func(c *session) error {
			addrs, ok, err := c.clientAddresses()
			asked = ok
			for _, a := range addrs {
				present = present || a == local
			}
			return err
		})
		if err == nil && !asked {
			return nil
		}
		switch {
		case err != nil && classify(err) == classServer:
			k.cl.cfg.log.Debug("iggy: cannot list the server's clients to wait for a broken session", "addr", k.cl.addr, "err", err)
			return nil
		case err != nil:
			return err
		case !present:
			return nil
		case time.Now().After(deadline):
			k.cl.cfg.log.Warn("iggy: the server still holds a broken session; checking the log anyway", "addr", k.cl.addr, "session", local)
			return nil
		}
		if !sleep(ctx, wait, k.life.Done()) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return ErrClosed
		}
	}
}

// drop discards the session after a transport failure. It must hold lock
// (or be the connect path, which does).
func (k *conn) drop() {
	k.mu.Lock()
	raw := k.raw
	k.sess, k.raw = nil, nil
	k.mu.Unlock()
	if raw != nil {
		_ = raw.Close()
	}
}

// close aborts any call in flight and releases the session. Idempotent;
// safe to call from any goroutine.
func (k *conn) close() {
	if k.closed.Swap(true) {
		return
	}
	k.cancel()
	k.mu.Lock()
	if k.raw != nil {
		_ = k.raw.Close() // unblocks a call in flight
	}
	k.mu.Unlock()
	k.lock <- struct{}{}
	k.drop()
	<-k.lock
}

// std builds the crypto/tls configuration of the settings.
func (t *tlsConfig) std(addr string) (*tls.Config, error) {
	cfg := &tls.Config{InsecureSkipVerify: t.skipVerify} //nolint:gosec // opt-in
	cfg.ServerName = t.serverName
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", t.caFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
