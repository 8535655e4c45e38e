package iggy

import (
	"errors"
	"fmt"
	"github.com/strand-io/strand/internal/strerr"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"
)

// Option configures a Client; pass options to Connect. Every option of
// this package refuses an invalid value: the constructor it is passed to
// returns an error naming the option, instead of clamping the value.
type Option interface {
	apply(*config) error
}

// optionFunc adapts a function to Option.
type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// TLSOption configures TLS; pass them to WithTLS.
type TLSOption interface {
	apply(*tlsConfig) error
}

// tLSOptionFunc adapts a function to TLSOption.
type tLSOptionFunc func(*tlsConfig) error

func (f tLSOptionFunc) apply(c *tlsConfig) error { return f(c) }

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
	sourceOpts     []SourceOption // WithSourceOptions
	protocol       Protocol       // WithProtocol
	sessionLogDir  string         // WithSessionLogDir
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

// WithSourceOptions sets options that Client.OpenSource applies to every
// Source it opens: the sources a topology's App reads through this client
// (package topology opens them with OpenSource). For example
// WithSourceOptions(WithPollLinger(5*time.Millisecond)) makes the second
// stage of a topology batch as its first does. An invalid option makes
// Connect fail, naming it.
func WithSourceOptions(opts ...SourceOption) Option {
	return optionFunc(func(c *config) error {
		sc := defaultSrcConfig()
		for _, o := range opts {
			if o == nil {
				continue
			}
			if err := o.apply(&sc); err != nil {
				return strerr.Errorf("strand: iggy.WithSourceOptions: %w", err)
			}
		}
		c.sourceOpts = append(c.sourceOpts, opts...)
		return nil
	})
}

// WithProtocol chooses the Iggy wire protocol: ProtocolAuto (the default)
// speaks Iggy server 0.10's binary protocol 0.12.0 and falls back to 0.8's
// legacy protocol when the server answers as a 0.8 server; Protocol010 and
// Protocol08 speak only the one. A server that speaks another protocol than
// the one chosen gives an error wrapping ErrIncompatible that names both.
func WithProtocol(p Protocol) Option {
	return optionFunc(func(c *config) error {
		if p > Protocol010 {
			return fmt.Errorf("strand: iggy.WithProtocol: unknown protocol %d", p)
		}
		c.protocol = p
		return nil
	})
}

// WithCredentials logs in with a username and password. Without it, and
// without WithPersonalAccessToken, the client logs in as iggy/iggy, the root
// user of a freshly installed server.
func WithCredentials(user, password string) Option {
	return optionFunc(func(c *config) error {
		if user == "" {
			return errors.New("strand: iggy.WithCredentials: empty user name")
		}
		c.user, c.password, c.token = user, password, ""
		return nil
	})
}

// WithPersonalAccessToken logs in with a personal access token instead of a
// username and password.
func WithPersonalAccessToken(token string) Option {
	return optionFunc(func(c *config) error {
		if token == "" {
			return errors.New("strand: iggy.WithPersonalAccessToken: empty token")
		}
		c.token, c.user, c.password = token, "", ""
		return nil
	})
}

// WithTLS turns TLS on, configured by opts (by default the server name is
// the host of the address and the certificate is checked against the
// system's roots). It maps one-to-one onto the SDK's tcp.WithTLS options.
func WithTLS(opts ...TLSOption) Option {
	return optionFunc(func(c *config) error {
		t := &tlsConfig{}
		for _, o := range opts {
			if o == nil {
				continue
			}
			if err := o.apply(t); err != nil {
				return err
			}
		}
		c.tls = t
		return nil
	})
}

// WithTLSServerName sets the name sent for SNI and checked in the server's
// certificate (the SDK's tcp.WithTLSDomain).
func WithTLSServerName(name string) TLSOption {
	return tLSOptionFunc(func(t *tlsConfig) error {
		if name == "" {
			return errors.New("strand: iggy.WithTLSServerName: empty name")
		}
		t.serverName = name
		return nil
	})
}

// WithTLSCAFile trusts the PEM certificates in path instead of the system's roots
// (the SDK's tcp.WithTLSCAFile).
func WithTLSCAFile(path string) TLSOption {
	return tLSOptionFunc(func(t *tlsConfig) error {
		if path == "" {
			return errors.New("strand: iggy.WithTLSCAFile: empty path")
		}
		t.caFile = path
		return nil
	})
}

// WithTLSInsecureSkipVerify accepts any server certificate (the SDK's
// tcp.WithTLSValidateCertificate(false)). For tests only.
func WithTLSInsecureSkipVerify() TLSOption {
	return tLSOptionFunc(func(t *tlsConfig) error { t.skipVerify = true; return nil })
}

// WithDialTimeout bounds how long establishing one connection may take:
// TCP dial, TLS handshake and the SDK's own dial (default 5s). Login is a
// call and falls under WithCallTimeout.
func WithDialTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("strand: iggy.WithDialTimeout: %v, want more than 0", d)
		}
		c.dialTimeout = d
		return nil
	})
}

// WithCallTimeout bounds every request/reply round trip (default 10s). A call
// that exceeds it fails with ErrTimeout and its connection is discarded,
// because a reply that arrives later would be read as the answer to the
// next request.
func WithCallTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("strand: iggy.WithCallTimeout: %v, want more than 0", d)
		}
		c.callTimeout = d
		return nil
	})
}

// WithBackoff sets the bounds of the capped exponential backoff, with jitter,
// between reconnect attempts and retries of failed calls (default 50ms to
// 5s). The n-th consecutive retry waits a random time between half and all
// of min·2ⁿ, capped at max.
func WithBackoff(min, max time.Duration) Option {
	return optionFunc(func(c *config) error {
		if min <= 0 || max < min {
			return fmt.Errorf("strand: iggy.WithBackoff: %v..%v, want 0 < min <= max", min, max)
		}
		c.backoff = backoff{min: min, max: max}
		return nil
	})
}

// WithLogger sends the package's diagnostics (reconnects, retries) to l
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("strand: iggy.WithLogger: nil logger")
		}
		c.log = l
		return nil
	})
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

// WithSessionLogDir makes every Sink that Client.OpenSink opens (the
// dead-letter and output sinks of a topology's App) keep a session log in
// dir, one file per topic (WithSessionLog): after a kill, the restarted
// process's first check of what was sent waits until the killed one's
// sessions are gone from the server, so that a send it left at the broker
// cannot land after that check (protocol 0.8; docs/design.md §2). dir must
// belong to this process alone and outlive its restarts (next to its state
// directory); it is created if missing.
func WithSessionLogDir(dir string) Option {
	return optionFunc(func(c *config) error {
		if dir == "" {
			return errors.New("strand: iggy.WithSessionLogDir: empty directory")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return strerr.Errorf("strand: iggy.WithSessionLogDir: %w", err)
		}
		c.sessionLogDir = dir
		return nil
	})
}
