package iggytest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// Protocol selects the wire protocol(s) a Server speaks.
type Protocol uint8

const (
	// ProtocolAuto (the default) speaks both and tells them apart per
	// connection by the client's first bytes: a legacy (0.8) request
	// starts with its non-zero length, a binary protocol 0.12.0 (0.10)
	// request with a 256-byte header whose first 48 bytes are zero.
	ProtocolAuto Protocol = iota
	// Protocol08 speaks only Iggy server 0.8's legacy protocol. A 0.10
	// client gets InvalidCommand replies, as from a real 0.8 server.
	Protocol08
	// Protocol010 speaks only binary protocol 0.12.0, as Iggy server 0.10
	// does. A 0.8 client's requests are read as 256-byte headers; they
	// stall and the connection is closed, as a real 0.10 server does.
	Protocol010
)

// WithProtocol selects the protocols the listener speaks; the default is
// ProtocolAuto.
func WithProtocol(p Protocol) Option { return optionFunc(func(c *config) { c.protocol = p }) }

// String names the protocol selection.
func (p Protocol) String() string {
	switch p {
	case Protocol08:
		return "0.8"
	case Protocol010:
		return "0.10"
	}
	return "auto"
}

// serverVersion012 is the release the broker reports to 0.10 clients.
const serverVersion012 = "0.10.0"

// state012 is what the broker keeps across binary protocol 0.12.0
// connections: session numbers and each client id's recently committed
// partition requests (request de-duplication survives a reconnect that
// keeps the client id, as on the server).
type state012 struct {
	mu       sync.Mutex
	sessions uint64
	seen     map[wire.ClientID]*dedup
}

// dedupWindow is how many committed partition-request numbers are
// remembered per client (the server's window is 128 per partition).
const dedupWindow = 1024

type dedup struct {
	// mu serializes the client's partition writes across its connections:
	// a retry on a new connection waits for the original request, still
	// executing on the old one, so it is recognised once that commits.
	mu    sync.Mutex
	order []uint64
	set   map[uint64]struct{}
}

// client returns the de-duplication state of a client id.
func (st *state012) client(id wire.ClientID) *dedup {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.seen == nil {
		st.seen = map[wire.ClientID]*dedup{}
	}
	d := st.seen[id]
	if d == nil {
		d = &dedup{set: map[uint64]struct{}{}}
		st.seen[id] = d
	}
	return d
}

func (st *state012) newSession() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sessions++
	return st.sessions
}

// committed reports whether the request was committed already; d.mu held.
func (d *dedup) committed(req uint64) bool {
	_, ok := d.set[req]
	return ok
}

// commit records the request as committed; d.mu held.
func (d *dedup) commit(req uint64) {
	if len(d.order) == dedupWindow {
		delete(d.set, d.order[0])
		d.order = d.order[1:]
	}
	d.order = append(d.order, req)
	d.set[req] = struct{}{}
}

// conn012 is a binary protocol 0.12.0 connection's state.
type conn012 struct {
	client  wire.ClientID
	session uint64
	base    uint64 // first offset of the last batch sendMessages appended
	hdr     [wire.HeaderSize]byte
	rep     [wire.HeaderSize]byte
	vec     net.Buffers
	poll    []byte // poll replies, reused
}

// captureConn diverts the legacy handlers' replies into a buffer, from
// which the 0.12.0 loop translates them.
type captureConn struct {
	net.Conn
	buf []byte
}

func (cc *captureConn) Write(b []byte) (int, error) {
	cc.buf = append(cc.buf, b...)
	return len(b), nil
}

// appended records the base offset of a batch sendMessages appended, for
// the 0.12.0 send reply's confirmation.
func (c *conn) appended(base uint64) {
	if c.v012 != nil {
		c.v012.base = base
	}
}

// speaks012 decides, before the first request, whether the connection
// speaks binary protocol 0.12.0, and prepares it if so.
func (c *conn) speaks012() bool {
	switch c.s.cfg.protocol {
	case Protocol08:
		return false
	case ProtocolAuto:
		b, err := c.br.Peek(4)
		if err != nil || binary.LittleEndian.Uint32(b) != 0 {
			return false
		}
	}
	c.v012 = &conn012{}
	c.s.connMu.Lock() // DropConnections reads c.nc under connMu
	c.nc = &captureConn{Conn: c.nc}
	c.s.connMu.Unlock()
	return true
}

// serveOne012 reads one 0.12.0 request frame and writes its reply.
func (c *conn) serveOne012() error {
	v := c.v012
	if _, err := io.ReadFull(c.br, v.hdr[:]); err != nil {
		return err
	}
	size := wire.FrameSize(v.hdr[:])
	if size < wire.HeaderSize || size > wire.MaxFrameSize || int(size-wire.HeaderSize) > max(c.s.cfg.maxSendBytes, maxControlPayload) {
		// The server drops such a connection without a reply.
		c.s.log.Warn("iggytest: 0.12.0 frame size out of range, closing connection", "client", c.sess.clientID, "size", size)
		return errCloseConn
	}
	body, err := readGrowing(c.br, int(size-wire.HeaderSize))
	if err != nil {
		return err
	}
	q, err := wire.ParseRequestHeader(v.hdr[:])
	if err != nil {
		// The server drops an invalid header silently: no reply.
		c.s.log.Warn("iggytest: invalid 0.12.0 request header dropped", "client", c.sess.clientID, "err", err)
		return nil
	}
	if q.RequestChecksum != 0 && q.RequestChecksum != wire.BodyChecksum(body) {
		return c.reply012(&q, wire.StatusInvalidFormat, nil)
	}
	switch {
	case q.Operation == wire.OpRegister:
		return c.register012(&q, body)
	case q.Operation == wire.OpNonReplicated:
		return c.read012(&q, body)
	case v.session == 0 || q.Session != v.session:
		return c.evict012(wire.EvictNoSession)
	case q.Operation == wire.OpLogout:
		st, _, err := c.legacy(CmdLogoutUser, nil)
		if err != nil {
			return err
		}
		return c.reply012(&q, st, nil)
	case q.Operation.Partition():
		return c.partitionOp012(&q, body)
	default:
		return c.metadata012(&q, body)
	}
}

// legacy runs a translated request through the controls and the legacy
// handlers, and returns the status and payload they answered.
func (c *conn) legacy(cmd Command, payload []byte) (wire.Status, []byte, error) {
	cc := c.nc.(*captureConn)
	cc.buf = cc.buf[:0]
	var err error
	handled := false
	if ctls := c.s.controls.Load(); ctls != nil && len(*ctls) > 0 {
		handled, err = c.runControls(*ctls, cmd, payload)
	}
	if !handled && err == nil {
		err = c.dispatch(cmd, payload)
	}
	if err != nil {
		return 0, nil, err
	}
	st, n, perr := wire.ParseLegacyReplyHeader(cc.buf)
	if perr != nil || int(n) != len(cc.buf)-wire.LegacyHeaderSize {
		return 0, nil, fmt.Errorf("strand: iggytest: a legacy handler answered %d bytes for command %v: %v", len(cc.buf), cmd, perr)
	}
	return st, cc.buf[wire.LegacyHeaderSize:], nil
}

// reply012 writes a reply with status st and body (header and body in one
// vectored write, the body not copied).
func (c *conn) reply012(q *wire.RequestHeader, st wire.Status, body []byte) error {
	v := c.v012
	h := wire.ReplyHeader{
		Size: uint32(wire.HeaderSize + len(body)), Client: q.Client, Op: v.session, Commit: v.session,
		Timestamp: q.Timestamp, Request: q.Request, Operation: q.Operation, Status: st, RequestChecksum: q.RequestChecksum,
	}
	if st != 0 {
		h.Size, body = wire.HeaderSize, nil
	}
	h.Put(v.rep[:])
	v.vec = append(v.vec[:0], v.rep[:], body)
	bufs := v.vec
	_, err := bufs.WriteTo(c.nc.(*captureConn).Conn)
	clear(v.vec[:2])
	return err
}

// evict012 sends an eviction frame and ends the connection.
func (c *conn) evict012(reason uint8) error {
	return c.evictVersion012(wire.Eviction{Client: c.v012.client, Reason: reason})
}

func (c *conn) evictVersion012(e wire.Eviction) error {
	var h [wire.HeaderSize]byte
	e.Put(h[:])
	_, _ = c.nc.(*captureConn).Conn.Write(h[:])
	return errCloseConn
}

// register012 handles LoginRegister: the version gate, then the
// credentials through the legacy login handlers.
func (c *conn) register012(q *wire.RequestHeader, body []byte) error {
	v := c.v012
	v.client = q.Client
	ver, err := wire.ParseRegisterVersion(body)
	if err != nil {
		return c.evict012(wire.EvictMalformedLogin)
	}
	if ver != wire.ProtocolVersion {
		return c.evictVersion012(wire.Eviction{Client: q.Client, Reason: wire.EvictIncompatibleProtocol,
			MaxVersion: wire.ProtocolVersion, MinVersion: wire.ProtocolVersion})
	}
	g, err := wire.ParseRegister(body)
	if err != nil {
		return c.evict012(wire.EvictMalformedLogin)
	}
	var st wire.Status
	var payload []byte
	if g.Token != "" {
		st, payload, err = c.legacy(CmdLoginWithPersonalAccessToken, append([]byte{byte(len(g.Token))}, g.Token...))
	} else {
		lb, _ := (&wire.Login{User: g.User, Password: g.Password, Version: serverVersion012}).AppendLegacy(nil)
		st, payload, err = c.legacy(CmdLoginUser, lb)
	}
	if err != nil {
		return err
	}
	if st != 0 {
		switch {
		case g.Token != "":
			return c.evict012(wire.EvictInvalidToken)
		case uint32(st) == StatusUserInactive:
			return c.evict012(wire.EvictUserInactive)
		}
		return c.evict012(wire.EvictInvalidCredentials)
	}
	uid, err := wire.ParseLegacyLoginReply(payload)
	if err != nil {
		return err
	}
	v.session = c.s.v012.newSession()
	rep := wire.RegisterReply{UserID: uid, Session: v.session, ServerVersion: wire.ProtocolVersion, ServerRelease: serverVersion012}
	return c.reply012(q, 0, rep.Append(nil))
}

var errNoTranslation = errors.New("strand: iggytest: no 0.12.0 translation")
