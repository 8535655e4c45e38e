package iggy

import (
	"log/slog"
	"math/rand/v2"
	"time"
)

// Option configures a Client; pass options to Connect.
type Option func(*config)

// TLSOption configures TLS; pass them to WithTLS.
type TLSOption func(*tlsConfig)

type tlsConfig struct {
	serverName string // SNI and verified name; default: host of the address
	caFile     string // PEM bundle; default: system roots
	skipVerify bool
}

type config struct {
	user, password string
	token          string
	tls            *tlsConfig
	dialTimeout    time.Duration
	callTimeout    time.Duration
	backoff        backoff
	log            *slog.Logger
}

func defaultConfig() config {
	return config{
		user:        "iggy",
		password:    "iggy",
		dialTimeout: 5 * time.Second,
		callTimeout: 10 * time.Second,
		backoff:     backoff{min: 50 * time.Millisecond, max: 5 * time.Second},
		log:         slog.Default(),
	}
}

// WithCredentials logs in with a username and password. Without it, and
// without WithPersonalAccessToken, the client logs in as iggy/iggy, the root
// user of a freshly installed server.
func WithCredentials(user, password string) Option {
	return func(c *config) { c.user, c.password, c.token = user, password, "" }
}

// WithPersonalAccessToken logs in with a personal access token instead of a
// username and password.
func WithPersonalAccessToken(token string) Option {
	return func(c *config) { c.token, c.user, c.password = token, "", "" }
}

// WithTLS turns TLS on, configured by opts (by default the server name is
// the host of the address and the certificate is checked against the
// system's roots). It maps one-to-one onto the SDK's tcp.WithTLS options.
func WithTLS(opts ...TLSOption) Option {
	return func(c *config) {
		t := &tlsConfig{}
		for _, o := range opts {
			if o != nil {
				o(t)
			}
		}
		c.tls = t
	}
}

// TLSServerName sets the name sent for SNI and checked in the server's
// certificate (the SDK's tcp.WithTLSDomain).
func TLSServerName(name string) TLSOption {
	return func(t *tlsConfig) { t.serverName = name }
}

// TLSCAFile trusts the PEM certificates in path instead of the system's roots
// (the SDK's tcp.WithTLSCAFile).
func TLSCAFile(path string) TLSOption {
	return func(t *tlsConfig) { t.caFile = path }
}

// TLSInsecureSkipVerify accepts any server certificate (the SDK's
// tcp.WithTLSValidateCertificate(false)). For tests only.
func TLSInsecureSkipVerify() TLSOption {
	return func(t *tlsConfig) { t.skipVerify = true }
}

// WithDialTimeout bounds how long establishing one connection may take:
// TCP dial, TLS handshake and the SDK's own dial (default 5s). Login is a
// call and falls under WithCallTimeout.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.dialTimeout = d
		}
	}
}

// WithCallTimeout bounds every request/reply round trip (default 10s). A call
// that exceeds it fails with ErrTimeout and its connection is discarded,
// because a reply that arrives later would be read as the answer to the
// next request.
func WithCallTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.callTimeout = d
		}
	}
}

// WithBackoff sets the bounds of the capped exponential backoff, with jitter,
// between reconnect attempts and retries of failed calls (default 50ms to
// 5s). The n-th consecutive retry waits a random time between half and all
// of min·2ⁿ, capped at max.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) {
		if min > 0 {
			c.backoff.min = min
		}
		if max >= c.backoff.min {
			c.backoff.max = max
		} else {
			c.backoff.max = c.backoff.min
		}
	}
}

// WithLogger sends the package's diagnostics (reconnects, retries) to l
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

type backoff struct{ min, max time.Duration }

// step returns min·2^attempt, capped at max.
func (b backoff) step(attempt int) time.Duration {
	if attempt < 32 {
		if e := b.min << uint(attempt); e > 0 && e < b.max {
			return e
		}
	}
	return b.max
}

// delay returns the wait before retry number attempt (0-based): equal jitter
// over step(attempt), so between its half and all of it.
func (b backoff) delay(attempt int) time.Duration {
	d := b.step(attempt)
	half := d / 2
	return half + rand.N(d-half+1)
}

// floor is the shortest delay(attempt) can be.
func (b backoff) floor(attempt int) time.Duration { return b.step(attempt) / 2 }

// sleep waits d, or until ctx is done or stop is closed; it reports whether
// the whole wait elapsed.
func sleep(ctx interface{ Done() <-chan struct{} }, d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}
