package queryserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/topology"
)

// Headers the server reads and writes.
const (
	// HeaderForwarded marks a request one instance forwarded to the owner
	// of its key; an instance never forwards such a request again.
	HeaderForwarded = "Strand-Forwarded"
	// HeaderPartition is set on a get's answer: the key's partition.
	HeaderPartition = "Strand-Partition"
	// HeaderOwner is set on the answer to a forwarded (or redirected) get:
	// the query address of the owner that answered.
	HeaderOwner = "Strand-Owner"
	// HeaderCheckpoint is set on the answer to a get and to a scan page: the
	// committed checkpoint of each partition read, per source, as
	// "partition/source=next" items separated by ", " (a get reads one
	// partition). The answer holds exactly the partition's events below
	// next; a later answer never has a lower one, not even after a crash
	// or a failover (see topology.Freshness).
	HeaderCheckpoint = "Strand-Checkpoint"
	// HeaderEpoch is set, in a group, on the answer to a get and to a scan
	// page: the owner's epoch of each partition read, as "partition=epoch"
	// items separated by ", ".
	HeaderEpoch = "Strand-Epoch"
	// hopParam marks a redirected request, as HeaderForwarded marks a
	// forwarded one (a redirect cannot carry a header).
	hopParam = "strand-hop"
)

// Defaults of the options.
const (
	DefaultAddr           = "127.0.0.1:8080"
	DefaultLimit          = 100
	DefaultMaxLimit       = 10_000
	DefaultScanBudget     = 100_000
	DefaultReadyTimeout   = time.Second
	DefaultForwardTimeout = 10 * time.Second
)

// ErrNotLoopback is wrapped by Listen, ListenAndServe and Serve when asked
// to bind to an address that is not a loopback one without
// WithNonLoopback.
var ErrNotLoopback = errors.New("strand: queryserver: not a loopback address")

// Option configures New. An invalid value makes New fail with an error
// naming the option.
type Option interface {
	apply(*config) error
}

// optionFunc adapts a function to Option.
type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	tables         []table
	router         Router
	addr           string
	allowRemote    bool
	redirect       bool
	client         *http.Client
	forwardTimeout time.Duration
	maxLimit       int
	scanBudget     int
	readyTimeout   time.Duration
	log            *slog.Logger
	extra          []extraHandler
}

type extraHandler struct {
	pattern string
	h       http.Handler
}

// WithAddr sets the address ListenAndServe listens on (default
// 127.0.0.1:8080; port 0 picks a free one). An address that is not a
// loopback address is refused by ListenAndServe unless WithNonLoopback is
// given.
func WithAddr(addr string) Option {
	return optionFunc(func(c *config) error {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return strerr.Errorf("strand: queryserver.WithAddr: %q: %w", addr, err)
		}
		c.addr = addr
		return nil
	})
}

// WithNonLoopback lets ListenAndServe and Serve bind to an address other
// than a loopback one. The server authenticates nobody: put it behind
// something that does before exposing it.
func WithNonLoopback() Option {
	return optionFunc(func(c *config) error {
		c.allowRemote = true
		return nil
	})
}

// WithRouter sets the router that says where each table partition is
// served. The default routes an App of a group by the group's membership
// (see "Scale-out" in the package documentation); for any other App it
// serves the partitions the App processes (App.Processes) and answers 503
// for the others, whose rows are in no store here.
func WithRouter(r Router) Option {
	return optionFunc(func(c *config) error {
		if r == nil {
			return errors.New("strand: queryserver.WithRouter: nil router")
		}
		c.router = r
		return nil
	})
}

// WithRedirect makes the server answer a get of a key owned by another
// instance with a 307 redirect to the owner instead of forwarding it.
func WithRedirect() Option {
	return optionFunc(func(c *config) error {
		c.redirect = true
		return nil
	})
}

// WithHTTPClient sets the client that forwards gets to their owners (the
// default has its own transport, released by Close, and the
// WithForwardTimeout timeout).
func WithHTTPClient(hc *http.Client) Option {
	return optionFunc(func(c *config) error {
		if hc == nil {
			return errors.New("strand: queryserver.WithHTTPClient: nil client")
		}
		c.client = hc
		return nil
	})
}

// WithForwardTimeout bounds a forwarded get (default 10 seconds); an owner
// that does not answer in time is answered 502.
func WithForwardTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("strand: queryserver.WithForwardTimeout: %v, want more than 0", d)
		}
		c.forwardTimeout = d
		return nil
	})
}

// WithMaxLimit sets the largest limit a scan may ask for (default 10,000);
// a larger one is refused with 400.
func WithMaxLimit(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("strand: queryserver.WithMaxLimit: %d, want at least 1", n)
		}
		c.maxLimit = n
		return nil
	})
}

// WithScanBudget bounds how many rows one scan page reads (default
// 100,000), so that a prefix that matches few rows of a large table cannot
// make one request read all of it: the page ends early with a next cursor.
func WithScanBudget(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("strand: queryserver.WithScanBudget: %d, want at least 1", n)
		}
		c.scanBudget = n
		return nil
	})
}

// WithReadyTimeout sets how long GET /readyz waits for the App to catch up
// with its sources as they are when asked (App.WaitCaughtUp) before it
// answers 503 (default 1 second).
func WithReadyTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("strand: queryserver.WithReadyTimeout: %v, want more than 0", d)
		}
		c.readyTimeout = d
		return nil
	})
}

// WithLogger sets the logger of the server's own lines (an owner that did
// not answer, a forwarding loop); default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("strand: queryserver.WithLogger: nil logger")
		}
		c.log = l
		return nil
	})
}

// WithHandler mounts h at pattern (an http.ServeMux pattern, such as
// "GET /metrics") next to the query endpoints, so that one loopback server
// serves both; h gets GET and HEAD requests only, like the rest. A pattern
// that conflicts with the query endpoints or another WithHandler is refused
// by New, except "GET /group" exactly, which replaces the built-in group
// view.
func WithHandler(pattern string, h http.Handler) Option {
	return optionFunc(func(c *config) error {
		if pattern == "" || h == nil {
			return fmt.Errorf("strand: queryserver.WithHandler: pattern %q with handler %v: want both", pattern, h)
		}
		c.extra = append(c.extra, extraHandler{pattern, h})
		return nil
	})
}

// groupPattern is the built-in group view's pattern (GroupView).
const groupPattern = "GET /group"

// Server is the query server of one App. It is an http.Handler: serve it
// with ListenAndServe or Serve, or mount it on a server of one's own (under
// a path prefix with http.StripPrefix). Its methods are safe for concurrent
// use.
type Server struct {
	app       *topology.App
	cfg       config
	tables    map[string]table
	names     []string
	mux       *http.ServeMux
	transport *http.Transport // of the default client; closed by Close
	log       *slog.Logger
}

// New makes the query server of app, serving the tables registered with
// Table. It refuses a nil app, a table registered twice and invalid
// options.
func New(app *topology.App, opts ...Option) (*Server, error) {
	if app == nil {
		return nil, errors.New("strand: queryserver.New: nil app")
	}
	c := config{addr: DefaultAddr, router: appRouter(app), forwardTimeout: DefaultForwardTimeout,
		maxLimit: DefaultMaxLimit, scanBudget: DefaultScanBudget, readyTimeout: DefaultReadyTimeout, log: slog.Default()}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(&c); err != nil {
			return nil, err
		}
	}
	s := &Server{app: app, cfg: c, tables: map[string]table{},
		log: c.log.With(slog.String("component", "strand/queryserver"))}
	for _, t := range c.tables {
		name := t.info().Name
		if _, dup := s.tables[name]; dup {
			return nil, fmt.Errorf("strand: queryserver.WithTable: table %q registered twice", name)
		}
		s.tables[name] = t
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
	if s.cfg.client == nil {
		s.transport = http.DefaultTransport.(*http.Transport).Clone()
		s.cfg.client = &http.Client{Transport: s.transport, Timeout: c.forwardTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /tables/{table}/{key...}", s.handleGet)
	s.mux.HandleFunc("GET /tables/{table}", s.handleScan)
	s.mux.HandleFunc("GET /tables", s.handleTables)
	s.mux.HandleFunc("GET /stats", s.handleStats)
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	if !slices.ContainsFunc(c.extra, func(e extraHandler) bool { return e.pattern == groupPattern }) {
		s.mux.HandleFunc(groupPattern, s.handleGroup)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no endpoint %s: see GET /tables, /tables/{table}, /tables/{table}/{key}, /stats, /healthz, /readyz, /group", r.URL.Path))
	})
	for _, e := range c.extra {
		if err := handle(s.mux, e.pattern, e.h); err != nil {
			return nil, strerr.Errorf("strand: queryserver.WithHandler: %w", err)
		}
	}
	return s, nil
}

// handle mounts h, turning ServeMux's panic on a bad or conflicting
// pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pattern %q: %v", pattern, r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// ServeHTTP answers one request: GET and HEAD of the endpoints in the
// package documentation; any other method is refused with 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed: the query server is read-only (GET, HEAD)", r.Method))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Close releases the connections the server keeps to other instances for
// forwarding. It does not stop Serve (cancel its context) and does not
// close the App.
func (s *Server) Close() error {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	return nil
}

// Listen listens on the WithAddr address, refusing one that is not a
// loopback address unless WithNonLoopback was given.
func (s *Server) Listen() (net.Listener, error) {
	if err := s.checkAddr(s.cfg.addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", s.cfg.addr)
	if err != nil {
		return nil, strerr.Errorf("strand: queryserver: listen on %s: %w", s.cfg.addr, err)
	}
	return ln, nil
}

// ListenAndServe listens (see Listen) and serves until ctx is done, then
// shuts down gracefully (see Serve).
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := s.Listen()
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// shutdownTimeout bounds how long Serve waits for requests in flight.
const shutdownTimeout = 5 * time.Second

// Serve serves on ln until ctx is done, then stops accepting, lets the
// requests in flight finish (for up to 5 seconds), closes ln and returns
// nil; it returns the error if serving fails. A TCP listener that is not on
// a loopback address is refused unless WithNonLoopback was given.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		return errors.New("strand: queryserver: Serve: nil listener")
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !s.cfg.allowRemote && !a.IP.IsLoopback() {
		_ = ln.Close()
		return fmt.Errorf("%w: Serve on %s: the query server authenticates nobody, give queryserver.WithNonLoopback() to serve on it", ErrNotLoopback, a)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return strerr.Errorf("strand: queryserver: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		_ = hs.Close()
	}
	<-errc
	s.Close()
	if err != nil {
		return strerr.Errorf("strand: queryserver: shut down %s: %w", ln.Addr(), err)
	}
	return nil
}

// checkAddr refuses an address that is not a loopback one, unless allowed.
func (s *Server) checkAddr(addr string) error {
	if s.cfg.allowRemote {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return strerr.Errorf("strand: queryserver.WithAddr: %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: queryserver.WithAddr(%q): the query server authenticates nobody, give queryserver.WithNonLoopback() to listen on it", ErrNotLoopback, addr)
}

// table finds the request's table, answering 404 when there is none.
func (s *Server) table(w http.ResponseWriter, r *http.Request) (table, string, bool) {
	name := r.PathValue("table")
	t, ok := s.tables[name]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("no table %q: the server has %s", name, s.tableList()))
	}
	return t, name, ok
}

func (s *Server) tableList() string {
	if len(s.names) == 0 {
		return "no tables"
	}
	return "tables " + strings.Join(s.names, ", ")
}

func (s *Server) handleTables(w http.ResponseWriter, r *http.Request) {
	out := make([]tableInfo, 0, len(s.names))
	for _, n := range s.names {
		out = append(out, s.tables[n].info())
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.app.Stats())
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// route asks the router, and checks its answer.
func (s *Server) route(r *http.Request, q Query) (Route, error) {
	rt := s.cfg.router.Route(r.Context(), q)
	switch rt.Kind {
	case Local, Unavailable:
	case Remote:
		if rt.Owner == "" {
			return rt, fmt.Errorf("strand: partition %d of table %q is Remote without an owner address", q.Partition, q.Table)
		}
	default:
		return rt, fmt.Errorf("strand: partition %d of table %q: unknown %v", q.Partition, q.Table, rt.Kind)
	}
	return rt, nil
}

// readErr answers a failed read of the local store.
func readErr(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, topology.ErrNotOpen):
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("the App is not open: %w", err))
	case errors.Is(err, topology.ErrTableBuilding):
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("%w; retry in 5s", err))
	case errors.Is(err, topology.ErrNotConfirmed):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("%w; retry in 1s", err))
	case r.Context().Err() != nil:
		writeError(w, http.StatusServiceUnavailable, err) // the client is gone
	default:
		writeError(w, http.StatusInternalServerError, err)
	}
}

// unavailable answers 503 with Retry-After.
func unavailable(w http.ResponseWriter, q Query, rt Route) {
	secs := int64((rt.RetryAfter + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", fmt.Sprint(secs))
	reason := rt.Reason
	if reason == "" {
		reason = "unavailable"
	}
	writeError(w, http.StatusServiceUnavailable, fmt.Errorf("partition %d of table %q cannot be served now (%s); retry in %ds", q.Partition, q.Table, reason, secs))
}

// writeJSON writes v as the JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, errorBody(fmt.Errorf("encode the answer as JSON: %w", err))
	}
	writeBody(w, status, b)
}

func writeBody(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeBody(w, status, errorBody(err))
}

// maxErrorText bounds an error's text in a response: errors name the key or
// cursor they refuse, and a request may carry a megabyte of it.
const maxErrorText = 1024

func errorBody(err error) []byte {
	msg := err.Error()
	if len(msg) > maxErrorText {
		msg = strings.ToValidUTF8(msg[:maxErrorText], "") + fmt.Sprintf("... (error cut: %d bytes)", len(msg))
	}
	b, _ := json.Marshal(map[string]string{"error": msg})
	return b
}
