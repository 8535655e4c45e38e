package iggytest

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"

	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/internal/xxh32"
)

// Option configures a Server built by NewServer.
type Option interface {
	apply(*config)
}

// optionFunc adapts a function to Option.
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	addr             string
	user, pass       string
	token            string
	dataDir          string
	maxMsgSize       int
	maxPerPart       int
	maxSendBytes     int
	syncWrites       bool
	segmentBytes     int64
	logger           *slog.Logger
	cluster          *Cluster
	certFile         string
	keyFile          string
	heartbeat        time.Duration
	rebalanceTimeout time.Duration
	rebalanceEvery   time.Duration
	cacheBytes       int64
	cleaner          time.Duration
	tokenCleaner     time.Duration
	repair           bool
	wrapFile         func(path string, f *os.File) fileWriter
	limits           limits
	protocol         Protocol
}

// WithAddr sets the TCP address to listen on. The default is
// "127.0.0.1:0": loopback, a port chosen by the kernel (read it with Addr).
func WithAddr(addr string) Option { return optionFunc(func(c *config) { c.addr = addr }) }

// WithCredentials sets the root user's name and password, "iggy"/"iggy" by
// default as in server 0.8.0. The root user has id 0 and every permission,
// and can be neither deleted nor restricted. Other users are created
// through the protocol (CreateUser). With a data directory a root user
// whose record was changed (ChangePassword, UpdateUser) keeps the logged
// record, as the server keeps its root user after the first start.
func WithCredentials(user, password string) Option {
	return optionFunc(func(c *config) { c.user, c.pass = user, password })
}

// WithPersonalAccessToken makes token a valid, never-expiring personal
// access token of the root user, named "iggytest", for
// LoginWithPersonalAccessToken, in addition to the tokens created through
// the protocol (CreatePersonalAccessToken). An unknown token is refused
// with status 20 (ResourceNotFound), as the server answers.
func WithPersonalAccessToken(token string) Option {
	return optionFunc(func(c *config) { c.token = token })
}

// WithDataDir makes the broker durable: users, streams, topics,
// partitions, consumer groups, messages and consumer offsets are kept in
// append-only, checksummed files under dir and come back when a Server is
// opened on the same directory again, after Close or after the process was
// killed. Messages are read back from their segment files through a cache
// of bounded size (WithCacheSize), so memory does not grow with the log.
//
// Every request's writes are handed to the operating system before the
// reply is sent, so a killed process (kill -9) loses nothing the client saw
// acknowledged; a machine crash or power loss can lose the last requests
// unless WithSyncWrites is given too. A torn record at the end of the
// newest file of a log is detected and cut off when the directory is
// opened; any other damage makes NewServer fail with a *DamageError (see
// WithRepair). A write that fails (a full disk) is cut back, so the files
// stay intact and writes succeed again once there is room. The default is
// in memory.
func WithDataDir(dir string) Option { return optionFunc(func(c *config) { c.dataDir = dir }) }

// WithSyncWrites makes a durable broker (WithDataDir) fsync every write
// before it replies: a power loss then loses nothing acknowledged, at the
// cost of one fsync per request.
func WithSyncWrites() Option { return optionFunc(func(c *config) { c.syncWrites = true }) }

// WithMaxMessageSize refuses messages whose payload is larger than n bytes
// with status 4022 (TooBigMessagePayload). The default is the server's
// 10,000,000 bytes; n ≤ 0 keeps the default.
func WithMaxMessageSize(n int) Option { return optionFunc(func(c *config) { c.maxMsgSize = n }) }

// WithMaxMessagesPerPartition keeps at most n messages per partition (the
// newest); older ones are dropped, and First/Next polls start at the oldest
// kept message. Segments (files, with WithDataDir) are deleted once all of
// their messages are dropped. This is a broker-specific cap; the server's
// own retention (message expiry, maximum topic size) is WithMessageCleaner.
// The default (n ≤ 0) keeps everything.
func WithMaxMessagesPerPartition(n int) Option {
	return optionFunc(func(c *config) { c.maxPerPart = n })
}

// WithLogger sets the logger for connection and storage events (debug level
// for per-connection events, warn for dropped bad input, error for storage
// failures). The default discards everything.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// Server is an in-process broker speaking Iggy server 0.8.0's TCP protocol
// and, by default on the same listener, server 0.10's (WithProtocol).
// Create it with NewServer, point the official Go SDK at Addr, and Close it
// when done. All methods are safe for concurrent use.
type Server struct {
	cfg    config
	log    *slog.Logger
	ln     net.Listener
	addr   string
	tcport uint16

	// metadata: streams → topics → partitions/groups, sessions. Message
	// data and offsets are guarded by each partition's own mutex.
	mu          sync.RWMutex
	streams     slab[stream]
	streamNames map[string]*stream
	clients     map[uint32]*session
	nextUID     uint64
	disk        *disk
	cache       *cache // with a data directory: resident message bytes
	users       slab[user]
	userNames   map[string]*user
	streamPerms map[uint64]*streamPerms // (user, stream) → permissions, see indexPermissions
	started     time.Time

	connMu sync.Mutex
	conns  map[*conn]struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
	done   chan struct{}

	unauth      int          // connections not logged in yet, guarded by connMu
	lastCapWarn atomic.Int64 // unix nanoseconds of the last connection-cap warning

	refuseUntil atomic.Int64

	ctlMu    sync.Mutex
	controls atomic.Pointer[[]*control]

	v012 state012 // binary protocol 0.12.0 sessions (serve012.go)
}

// NewServer starts a broker listening on loopback (see WithAddr) and
// returns once it accepts connections. With WithDataDir it first restores
// the directory's contents; an unreadable directory is an error. The caller
// must Close the server.
func NewServer(opts ...Option) (*Server, error) {
	cfg := config{
		addr: "127.0.0.1:0", user: "iggy", pass: "iggy",
		maxMsgSize: maxPayloadSize, maxSendBytes: defaultMaxSendBytes, segmentBytes: segmentSizeDefault,
		cacheBytes: defaultCacheBytes, tokenCleaner: time.Minute, limits: defaultLimits(),
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.rebalanceTimeout <= 0 {
		cfg.rebalanceTimeout = rebalancingTimeoutDefault
	}
	if cfg.rebalanceEvery == 0 {
		cfg.rebalanceEvery = rebalancingCheckDefault
	}
	if cfg.maxMsgSize <= 0 || cfg.maxMsgSize > maxPayloadSize {
		cfg.maxMsgSize = maxPayloadSize
	}
	s := newServer(cfg)
	if cfg.dataDir != "" {
		s.cache = newCache(cfg.cacheBytes)
		if err := s.openDisk(); err != nil {
			return nil, strerr.Errorf("strand: iggytest: open data directory %q: %w", cfg.dataDir, err)
		}
		s.mu.Lock()
		s.ensureConfiguredToken()
		s.mu.Unlock()
	}
	tcfg, err := cfg.tlsConfig()
	if err != nil {
		s.closeDiskOnFailure()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		s.closeDiskOnFailure()
		return nil, strerr.Errorf("strand: iggytest: listen on %q: %w", cfg.addr, err)
	}
	s.ln = ln
	s.addr = ln.Addr().String()
	if ta, ok := ln.Addr().(*net.TCPAddr); ok {
		s.tcport = uint16(ta.Port)
	}
	if tcfg != nil {
		s.ln = tls.NewListener(ln, tcfg)
	}
	s.wg.Add(1)
	go s.acceptLoop()
	if cfg.heartbeat > 0 {
		s.wg.Add(1)
		go s.heartbeatLoop()
	}
	if cfg.rebalanceEvery > 0 {
		s.wg.Add(1)
		go s.rebalanceLoop()
	}
	if cfg.cleaner > 0 {
		s.wg.Add(1)
		go s.cleanerLoop()
	}
	if cfg.tokenCleaner > 0 {
		s.wg.Add(1)
		go s.tokenCleanerLoop()
	}
	return s, nil
}

// closeDiskOnFailure closes the data files of a server that will not start.
func (s *Server) closeDiskOnFailure() {
	if s.disk != nil {
		s.mu.Lock()
		_ = s.closeDiskLocked()
		s.mu.Unlock()
	}
}

// newServer builds the broker without listening or starting goroutines.
func newServer(cfg config) *Server {
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.limits == (limits{}) {
		cfg.limits = defaultLimits()
	}
	if cfg.maxMsgSize <= 0 || cfg.maxMsgSize > maxPayloadSize {
		cfg.maxMsgSize = maxPayloadSize
	}
	cfg.limits.clamp(cfg.maxMsgSize)
	s := &Server{
		cfg: cfg, log: cfg.logger, addr: "127.0.0.1:0",
		streamNames: map[string]*stream{}, clients: map[uint32]*session{},
		conns: map[*conn]struct{}{}, done: make(chan struct{}),
		userNames: map[string]*user{}, streamPerms: map[uint64]*streamPerms{}, started: time.Now(),
	}
	s.addRootUser()
	return s
}

// Addr returns the address the server listens on, as "host:port", for
// tcp.WithServerAddress.
func (s *Server) Addr() string { return s.addr }

// Close stops accepting, closes every client connection, waits for all of
// the server's goroutines to end and, with a data directory, flushes and
// closes its files. It is safe to call more than once; later calls return
// nil.
func (s *Server) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.done)
	err := s.ln.Close()
	s.DropConnections()
	s.wg.Wait()
	if s.disk != nil {
		s.mu.Lock()
		derr := s.closeDiskLocked()
		s.mu.Unlock()
		if derr != nil {
			return derr
		}
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// DropConnections closes every client connection now, as a server restart
// or a network failure would. Requests in flight get no reply. The server
// keeps accepting new connections; dropped sessions leave their consumer
// groups as on a disconnect.
func (s *Server) DropConnections() {
	s.connMu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.connMu.Unlock()
}

// RefuseConnections makes the server accept and immediately close every
// new connection for d, as a server that is restarting would. Existing
// connections are not affected (use DropConnections for them).
func (s *Server) RefuseConnections(d time.Duration) {
	s.refuseUntil.Store(time.Now().Add(d).UnixNano())
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Anything else (too many open files, out of buffers, a
			// network reset) is transient for a listener that is still
			// open: back off and accept again rather than stop serving.
			if delay == 0 {
				delay = 5 * time.Millisecond
				s.log.Warn("iggytest: accept failed, backing off", "err", err)
			} else if delay < time.Second {
				delay *= 2
			}
			select {
			case <-time.After(delay):
			case <-s.done:
				return
			}
			continue
		}
		delay = 0
		if time.Now().UnixNano() < s.refuseUntil.Load() {
			nc.Close()
			continue
		}
		if !s.admitConn() {
			nc.Close()
			if now := time.Now().UnixNano(); now-s.lastCapWarn.Load() > int64(time.Second) {
				s.lastCapWarn.Store(now)
				s.log.Warn("iggytest: connection limit reached, closing new connections",
					"max_connections", s.cfg.limits.maxConns, "max_unauthenticated", s.cfg.limits.maxUnauthConns)
			}
			continue
		}
		c := s.newConn(nc)
		s.connMu.Lock()
		if s.closed.Load() {
			s.unauth--
			s.connMu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.connMu.Unlock()
		s.wg.Add(1)
		go c.serve()
	}
}

// conn is one client connection and its session.
type conn struct {
	s    *Server
	nc   net.Conn
	br   *bufio.Reader
	sess *session
	rng  *rand.ChaCha8
	rbuf []byte // payload of non-send requests
	wbuf []byte // small responses, header included
	vec  net.Buffers
	hdr  [8]byte

	loggedInOnce bool     // the connection left its unauthenticated phase
	v012         *conn012 // set when the connection speaks binary protocol 0.12.0
}

func (s *Server) newConn(nc net.Conn) *conn {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	addr := nc.RemoteAddr().String()
	sess := &session{clientID: xxh32.Sum([]byte(addr), 0), addr: addr}
	sess.userID.Store(-1)
	sess.lastBeat.Store(time.Now().UnixNano())
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], rand.Uint64())
	binary.LittleEndian.PutUint64(seed[8:], rand.Uint64())
	binary.LittleEndian.PutUint64(seed[16:], rand.Uint64())
	binary.LittleEndian.PutUint64(seed[24:], rand.Uint64())
	if d := s.cfg.limits.loginTimeout; d > 0 {
		_ = nc.SetReadDeadline(time.Now().Add(d))
	}
	return &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, 64<<10), sess: sess, rng: rand.NewChaCha8(seed), wbuf: make([]byte, 8, 512)}
}

func (c *conn) serve() {
	s := c.s
	defer s.wg.Done()
	s.mu.Lock()
	s.clients[c.sess.clientID] = c.sess
	s.mu.Unlock()
	defer func() {
		c.nc.Close()
		s.connMu.Lock()
		delete(s.conns, c)
		if !c.loggedInOnce {
			s.unauth--
		}
		s.connMu.Unlock()
		s.removeSession(c.sess)
		s.log.Debug("iggytest: connection closed", "client", c.sess.clientID, "addr", c.sess.addr)
	}()
	serveOne := c.serveOne
	if c.speaks012() {
		serveOne = c.serveOne012
	}
	for {
		if err := serveOne(); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errCloseConn) {
				s.log.Debug("iggytest: connection ended", "client", c.sess.clientID, "err", err)
			}
			return
		}
	}
}

var errCloseConn = errors.New("strand: iggytest: connection closed by the broker")

// serveOne reads one request frame and writes its response.
func (c *conn) serveOne() error {
	if _, err := io.ReadFull(c.br, c.hdr[:]); err != nil {
		return err
	}
	length := binary.LittleEndian.Uint32(c.hdr[0:4])
	cmd := Command(binary.LittleEndian.Uint32(c.hdr[4:8]))
	if length < 4 {
		// The server answers InvalidCommand and reads on; the frame had no
		// payload, so the stream is still in step.
		return c.writeStatus(StatusInvalidCommand)
	}
	plen := int(length - 4)
	if limit, status := c.frameLimit(cmd, plen); plen > limit {
		// The server answers InvalidCommand without reading the payload,
		// which leaves the stream out of step; the broker closes instead.
		// Before a login only small frames are read at all.
		level := slog.LevelWarn
		if !c.loggedInOnce {
			level = slog.LevelDebug // anyone can send these: no log flood
		}
		c.s.log.Log(context.Background(), level, "iggytest: request too large, closing connection", "client", c.sess.clientID,
			"command", cmd, "length", plen, "limit", limit, "logged_in", c.loggedInOnce)
		_ = c.writeStatus(status)
		return errCloseConn
	}
	var payload []byte
	var err error
	switch {
	case cmd == CmdSendMessages:
		payload, err = readGrowing(c.br, plen) // becomes the stored batch
	case plen <= cap(c.rbuf):
		payload = c.rbuf[:plen]
		_, err = io.ReadFull(c.br, payload)
	case plen <= readChunk:
		c.rbuf = make([]byte, plen)
		payload = c.rbuf
		_, err = io.ReadFull(c.br, payload)
	default:
		payload, err = readGrowing(c.br, plen) // not kept: a large buffer is not held between requests
	}
	if err != nil {
		return err
	}
	if ctls := c.s.controls.Load(); ctls != nil && len(*ctls) > 0 {
		handled, err := c.runControls(*ctls, cmd, payload)
		if handled || err != nil {
			return err
		}
	}
	err = c.dispatch(cmd, payload)
	if !c.loggedInOnce && c.sess.userID.Load() >= 0 {
		c.loggedIn()
	}
	return err
}

const readChunk = 1 << 20

// readGrowing reads exactly n bytes into a new buffer that starts at most
// readChunk long and grows as bytes arrive, so that a frame header alone
// cannot make the broker allocate a huge buffer.
func readGrowing(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, readChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(nb, buf)
			buf = nb
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil && len(buf) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

func (c *conn) writeStatus(st uint32) error {
	b := c.wbuf[:8]
	binary.LittleEndian.PutUint32(b[0:4], st)
	binary.LittleEndian.PutUint32(b[4:8], 0)
	_, err := c.nc.Write(b)
	return err
}

// writeOK sends c.wbuf, whose first 8 bytes are reserved for the header.
func (c *conn) writeOK(b []byte) error {
	if uint64(len(b)-8) > maxReplyBytes {
		// A reply's length is a u32: never send one that would wrap.
		c.wbuf = b[:8]
		c.s.log.Error("iggytest: reply too large for the protocol, answering status 1", "client", c.sess.clientID, "bytes", len(b)-8)
		return c.writeStatus(StatusError)
	}
	binary.LittleEndian.PutUint32(b[0:4], 0)
	binary.LittleEndian.PutUint32(b[4:8], uint32(len(b)-8))
	_, err := c.nc.Write(b)
	c.wbuf = b[:8]
	return err
}

// reply writes the outcome of a handler: an error status, or the OK
// payload accumulated in c.wbuf after the 8 header bytes.
func (c *conn) reply(b []byte, err error) error {
	if err != nil {
		var st statusError
		if errors.As(err, &st) {
			if uint32(st) == StatusStaleClient {
				_ = c.writeStatus(uint32(st))
				return errCloseConn
			}
			return c.writeStatus(uint32(st))
		}
		if !isWriteError(err) { // a data file logs its write failures once
			c.s.log.Error("iggytest: request failed", "client", c.sess.clientID, "err", err)
		}
		return c.writeStatus(StatusError)
	}
	return c.writeOK(b)
}
