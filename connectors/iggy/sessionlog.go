package iggy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/strand-io/strand/internal/strerr"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// WithSessionLog makes the publisher (and a Sink) record, in the file at
// path, the client address of every session it sends on, synced to disk
// before the session's first SendMessages; and makes a Sink's first Sent
// call wait until the sessions an earlier process recorded there are gone
// from the server's client list (GetClients) before it looks for any
// message. That closes, on Iggy 0.8, most of the window a kill leaves: a
// request of the killed process that the broker still holds lands or is
// dropped before its successor asks whether it was sent, instead of
// possibly after (then strand would send it again). What remains is what
// the wait on a broken session cannot cover (see Publisher): a user that
// may not list clients, a proxy that hides client addresses, or a session
// the server holds longer than max(4 × call timeout, 30s). Give each
// publishing process its own file that survives its restarts (next to its
// state directory). An Iggy 0.10 server is not asked (a retried request is
// recognised by its request number there).
func WithSessionLog(path string) PublisherOption {
	return publisherOptionFunc(func(c *pubConfig) error {
		if path == "" {
			return errors.New("strand: iggy.WithSessionLog: empty path")
		}
		c.sessionLog = path
		return nil
	})
}

// sessionLog is a publisher's record of its sessions (WithSessionLog).
type sessionLog struct {
	path string

	mu      sync.Mutex
	f       *os.File
	prev    []string        // recorded by an earlier process, not yet known gone
	cur     map[string]bool // recorded by this one
	settled bool            // prev waited for and dropped from the file
	settle  sync.Mutex      // one settlePrev at a time
}

// sessionLogError is a session that could not be recorded: nothing was
// sent on it.
type sessionLogError struct{ err error }

func (e *sessionLogError) Error() string { return e.err.Error() }
func (e *sessionLogError) Unwrap() error { return e.err }

// openSessionLog reads the sessions an earlier process recorded at path
// and opens it to record this one's.
func openSessionLog(path string) (*sessionLog, error) {
	l := &sessionLog{path: path, cur: map[string]bool{}}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, strerr.Errorf("strand: iggy: session log: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	seen := map[string]bool{}
	for sc.Scan() {
		if a := strings.TrimSpace(sc.Text()); a != "" && !seen[a] {
			seen[a] = true
			l.prev = append(l.prev, a)
		}
	}
	if l.f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, strerr.Errorf("strand: iggy: session log: %w", err)
	}
	if err := syncDir(path); err != nil {
		l.f.Close()
		return nil, strerr.Errorf("strand: iggy: session log: %w", err)
	}
	return l, nil
}

func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// record writes addr to the log and syncs it, once per address.
func (l *sessionLog) record(addr string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur[addr] {
		return nil
	}
	if l.f == nil {
		return &sessionLogError{fmt.Errorf("strand: iggy: session log %s: closed", l.path)}
	}
	if _, err := l.f.WriteString(addr + "\n"); err != nil {
		return &sessionLogError{strerr.Errorf("strand: iggy: session log %s: record session %s: %w", l.path, addr, err)}
	}
	if err := l.f.Sync(); err != nil {
		return &sessionLogError{strerr.Errorf("strand: iggy: session log %s: record session %s: %w", l.path, addr, err)}
	}
	l.cur[addr] = true
	return nil
}

// settlePrev waits, once, until the server no longer lists the sessions
// an earlier process recorded (gone: each address's wait, k's
// awaitSessionGone), then rewrites the log with this process's sessions
// only.
func (l *sessionLog) settlePrev(ctx context.Context, gone func(ctx context.Context, addr string) error) error {
	l.settle.Lock()
	defer l.settle.Unlock()
	l.mu.Lock()
	if l.settled {
		l.mu.Unlock()
		return nil
	}
	var wait []string
	for _, a := range l.prev {
		if !l.cur[a] { // an address of ours now is no earlier session
			wait = append(wait, a)
		}
	}
	l.mu.Unlock()
	for _, a := range wait {
		if err := gone(ctx, a); err != nil {
			return strerr.Errorf("strand: iggy: wait for the session %s of an earlier process (session log %s) to end: %w", a, l.path, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for a := range l.cur {
		b.WriteString(a + "\n")
	}
	tmp := l.path + ".tmp"
	if err := writeSynced(tmp, b.String()); err != nil {
		return strerr.Errorf("strand: iggy: session log %s: %w", l.path, err)
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return strerr.Errorf("strand: iggy: session log %s: %w", l.path, err)
	}
	if err := syncDir(l.path); err != nil {
		return strerr.Errorf("strand: iggy: session log %s: %w", l.path, err)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return strerr.Errorf("strand: iggy: session log %s: %w", l.path, err)
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.prev, l.settled = f, nil, true
	return nil
}

func writeSynced(path, s string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// close closes the log's file.
func (l *sessionLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// settleEarlierSessions waits, on the first call, until the sessions an
// earlier process recorded in the session log are gone from the server
// (WithSessionLog); without a log it returns at once.
func (p *Publisher) settleEarlierSessions(ctx context.Context) error {
	if p.slog == nil || len(p.senders) == 0 {
		return nil
	}
	k := p.senders[0].k
	return p.slog.settlePrev(ctx, k.awaitSessionGone)
}
