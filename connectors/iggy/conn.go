package iggy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apache/iggy/foreign/go/client/tcp"
)

// conn is one SDK client with what the SDK lacks: a probe before dialing,
// deadlines, context cancellation, panic recovery and lazy reconnect. It
// carries one call at a time (as the SDK does) and queues the others in a
// context-aware way.
type conn struct {
	cl   *Client
	role string // for logs: "admin", "reader bank/accounts partition 3", ...

	lock chan struct{} // one-slot semaphore held for a whole call

	// Guarded by lock.
	sdk      *tcp.IggyTcpClient
	failures int       // consecutive failed connects
	failedAt time.Time // when the last connect failed

	mu     sync.Mutex // guards raw against Close from another goroutine
	raw    net.Conn   // the SDK's socket, for deadlines and aborts
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

// call runs fn on a connected SDK client, connecting first when needed. The
// returned error is nil, a server error (wrapped SDK sentinel; the
// connection stays), or a transport failure wrapping ErrTimeout,
// ErrDisconnected, ErrProtocol, ErrUnreachable, ErrAuth, ErrClosed or the
// context's error (the connection is discarded).
//
// fn must be safe to repeat: when it fails on a connection that was idle
// since an earlier call (the server may have dropped it meanwhile), call
// reconnects and runs it once more.
func (k *conn) call(ctx context.Context, fn func(*tcp.IggyTcpClient) error) error {
	return k.do(ctx, true, fn)
}

// callOnce is call for requests that must not be repeated blindly
// (SendMessages): a failure is returned as it is.
func (k *conn) callOnce(ctx context.Context, fn func(*tcp.IggyTcpClient) error) error {
	return k.do(ctx, false, fn)
}

func (k *conn) do(ctx context.Context, repeat bool, fn func(*tcp.IggyTcpClient) error) error {
	if err := k.acquire(ctx); err != nil {
		return err
	}
	defer k.release()
	for {
		if k.closed.Load() {
			return ErrClosed
		}
		reused := k.sdk != nil
		if !reused {
			if err := k.gate(ctx); err != nil {
				return err
			}
			if err := k.connect(ctx); err != nil {
				return err
			}
		}
		err := k.invoke(ctx, fn)
		if err == nil || (classify(err) != classTransport && !errors.Is(err, ErrProtocol)) {
			return err
		}
		k.drop()
		err = k.transportError(ctx, err)
		if !repeat || !reused || !errors.Is(err, ErrDisconnected) {
			return err
		}
		k.cl.cfg.log.Debug("iggy: connection was lost while idle; reconnecting", "addr", k.cl.addr, "conn", k.role, "err", err)
		repeat = false
	}
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

// invoke runs fn under the call deadline and ctx, recovering SDK panics.
func (k *conn) invoke(ctx context.Context, fn func(*tcp.IggyTcpClient) error) (err error) {
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
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the SDK panicked decoding a reply from %s: %v\n%s", ErrProtocol, k.cl.addr, r, debug.Stack())
		}
	}()
	return fn(k.sdk)
}

// connect builds a fresh SDK client and logs in. It must hold lock.
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
	if err := probe(dctx, k.cl.addr, cfg.tls); err != nil {
		return fail(fmt.Errorf("%w: %s: %w", ErrUnreachable, k.cl.addr, err))
	}
	sdk, err := k.newSDK(dctx)
	if err != nil {
		return fail(err)
	}
	raw, err := rawConn(sdk)
	if err != nil {
		_ = sdk.Close()
		return fail(err)
	}
	setNoDelay(raw)
	k.mu.Lock()
	k.sdk, k.raw = sdk, raw
	k.mu.Unlock()
	if k.closed.Load() { // Close ran between probe and here
		k.drop()
		return ErrClosed
	}

	err = k.invoke(ctx, func(c *tcp.IggyTcpClient) error {
		var err error
		if cfg.token != "" {
			_, err = c.LoginWithPersonalAccessToken(cfg.token)
		} else {
			_, err = c.LoginUser(cfg.user, cfg.password)
		}
		return err
	})
	if err == nil {
		// A multi-node cluster may have redirected the SDK to its leader
		// during login, replacing the socket.
		if raw, err = rawConn(sdk); err == nil {
			k.mu.Lock()
			k.raw = raw
			k.mu.Unlock()
		}
	}
	if err != nil {
		k.drop()
		if classify(err) == classServer {
			who := "user " + cfg.user
			if cfg.token != "" {
				who = "personal access token"
			}
			return fail(fmt.Errorf("%w: %s as %s: %w", ErrAuth, k.cl.addr, who, err))
		}
		return fail(k.transportError(ctx, fmt.Errorf("during login: %w", err)))
	}
	if k.failures > 0 {
		k.cl.cfg.log.Info("iggy: reconnected", "addr", k.cl.addr, "conn", k.role, "after_failures", k.failures)
	}
	k.failures = 0
	return nil
}

// newSDK runs the SDK's constructor, which dials and, on failure, retries
// every 2s forever. The probe made a failure unlikely; if it happens anyway
// (the server vanished in between), give up at the dial deadline and let a
// reaper close the client whenever the SDK finally returns one.
func (k *conn) newSDK(ctx context.Context) (*tcp.IggyTcpClient, error) {
	opts := []tcp.Option{tcp.WithServerAddress(k.cl.addr)}
	if t := k.cl.cfg.tls; t != nil {
		var topts []tcp.TLSOption
		if t.serverName != "" {
			topts = append(topts, tcp.WithTLSDomain(t.serverName))
		}
		if t.caFile != "" {
			topts = append(topts, tcp.WithTLSCAFile(t.caFile))
		}
		topts = append(topts, tcp.WithTLSValidateCertificate(!t.skipVerify))
		opts = append(opts, tcp.WithTLS(topts...))
	}
	type result struct {
		c   *tcp.IggyTcpClient
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := tcp.NewIggyTcpClient(opts...)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, k.cl.addr, r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, fmt.Errorf("%w: %s: the SDK could not connect within %v although a probe did", ErrUnreachable, k.cl.addr, k.cl.cfg.dialTimeout)
	}
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
		err := k.call(ctx, func(c *tcp.IggyTcpClient) error {
			cs, err := c.GetClients()
			for _, ci := range cs {
				present = present || ci.Address == local
			}
			return err
		})
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

// drop discards the SDK client after a transport failure. It must hold lock
// (or be the connect path, which does).
func (k *conn) drop() {
	k.mu.Lock()
	sdk := k.sdk
	k.sdk, k.raw = nil, nil
	k.mu.Unlock()
	if sdk != nil {
		_ = sdk.Close() // the SDK's mutex is free: no call is in flight
	}
}

// close aborts any call in flight and releases the SDK client. Idempotent;
// safe to call from any goroutine.
func (k *conn) close() {
	if k.closed.Swap(true) {
		return
	}
	k.cancel()
	k.mu.Lock()
	if k.raw != nil {
		_ = k.raw.Close() // unblocks a call in flight; the SDK's Close would wait for it
	}
	k.mu.Unlock()
	k.lock <- struct{}{}
	k.drop()
	<-k.lock
}

// probe dials addr (and completes a TLS handshake when t is set) and hangs
// up, so that the SDK, whose dial retries forever, is only ever pointed at a
// live server.
func probe(ctx context.Context, addr string, t *tlsConfig) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if t == nil {
		return nil
	}
	cfg, err := t.std(addr)
	if err != nil {
		return err
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	return nil
}

// std builds the crypto/tls configuration the SDK will build from the same
// settings.
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

var netConnType = reflect.TypeFor[net.Conn]()

// rawConn returns the socket inside an SDK client. The SDK offers no way to
// abort a call or set a deadline: its Close waits for the mutex that a
// blocked call holds. Reaching the socket is the only way to make a stalled
// call return, so this reads the unexported field (the SDK is pinned at
// v0.8.0 and a test checks the field is there).
func rawConn(c *tcp.IggyTcpClient) (net.Conn, error) {
	f := reflect.ValueOf(c).Elem().FieldByName("conn")
	if !f.IsValid() || f.Type() != netConnType {
		return nil, fmt.Errorf("%w: this SDK version has no conn field of type net.Conn in tcp.IggyTcpClient", ErrProtocol)
	}
	nc := *(*net.Conn)(unsafe.Pointer(f.UnsafeAddr()))
	if nc == nil {
		return nil, fmt.Errorf("%w: the SDK client has no connection", ErrProtocol)
	}
	return nc, nil
}

// setNoDelay turns Nagle's algorithm off (the SDK leaves it on): every
// request is one write and the reply is awaited, so delaying it only adds
// latency.
func setNoDelay(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
}
