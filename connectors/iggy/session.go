package iggy

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// Protocol selects the Iggy wire protocol a Client speaks (WithProtocol).
type Protocol uint8

const (
	// ProtocolAuto (the default) speaks binary protocol 0.12.0 (Iggy server
	// 0.10) and falls back to the legacy protocol when the server answers
	// the first login as a 0.8 server does (its reply starts with a
	// non-zero status where a 0.10 reply has 48 zero bytes). The protocol
	// found is kept for the client's later connections.
	ProtocolAuto Protocol = iota
	// Protocol08 speaks only Iggy server 0.8's legacy protocol.
	Protocol08
	// Protocol010 speaks only binary protocol 0.12.0, as Iggy server 0.10.
	Protocol010
)

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

// ParseProtocol parses "0.8", "0.10" or "auto" (as in the
// STRAND_IGGY_PROTOCOL variable of the examples and tests).
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "", "auto":
		return ProtocolAuto, nil
	case "0.8", "0.8.0", "legacy":
		return Protocol08, nil
	case "0.10", "0.10.0", "0.12.0":
		return Protocol010, nil
	}
	return 0, fmt.Errorf("strand: iggy: unknown protocol %q (want 0.8, 0.10 or auto)", s)
}

// ErrIncompatible means the server speaks another protocol version than the
// client was told to (or than any this package speaks); the message names
// both.
var ErrIncompatible = errors.New("strand: iggy: incompatible server protocol")

// sdkName and sdkVersion are what strand reports in a 0.10 login.
const (
	sdkName    = "strand-go"
	sdkVersion = "0.10.0"
)

// identity012 is what a connection keeps across reconnects in binary
// protocol 0.12.0: its client id and request counter, so that the server
// can recognise a retried request after a reconnect (request numbers never
// go back), and the bind secret of its sessions.
type identity012 struct {
	client  wire.ClientID
	request uint64
	secret  [32]byte
}

func newIdentity012() *identity012 {
	id := &identity012{}
	_, _ = rand.Read(id.client[:])
	id.client[0] |= 1 // never 0
	_, _ = rand.Read(id.secret[:])
	return id
}

type routeKey struct {
	stream, topic string
	partition     uint32
}

// session is one logged-in connection to a server in one protocol: it
// frames requests, reads and checks replies, and turns error statuses into
// the SDK's sentinels (ierror.FromCode), so errors.Is works as before. It
// carries one request at a time; conn serializes its use.
type session struct {
	nc      net.Conn
	br      *bufio.Reader // reads of nc: a reply's header and body usually come in one read
	proto   wire.Protocol
	id      *identity012 // V012 only
	session uint64       // V012 only
	hdr     [wire.HeaderSize]byte
	vec     net.Buffers

	routes   map[routeKey]wire.PartitionContext // V012 partition contexts
	noRoutes bool                               // the server does not know GetPartitionRoute
	lastSent uint64                             // base offset confirmed by the last V012 send
	pin      uint64                             // V012: request number to reuse for the next partition op (a retry)
}

// rd returns the buffered reader of the socket.
func (s *session) rd() io.Reader {
	if s.br == nil {
		s.br = bufio.NewReaderSize(s.nc, 64<<10)
	}
	return s.br
}

// errLegacyServer is a 0.10 login answered as a 0.8 server answers.
var errLegacyServer = errors.New("the server answered as an Iggy 0.8 server (legacy protocol)")

// evictionError is a 0.10 server's eviction of the session.
type evictionError struct{ e wire.Eviction }

func (e *evictionError) Error() string { return e.e.Error() }

func statusError(st wire.Status) error { return ierror.FromCode(ierror.Code(st)) }

// write sends a header and a body in one vectored write.
func (s *session) write(h, body []byte) error {
	s.vec = append(s.vec[:0], h, body)
	v := s.vec
	_, err := v.WriteTo(s.nc)
	clear(s.vec[:2])
	if err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	return nil
}

// do sends one request and returns its reply payload (a fresh buffer the
// caller owns). ctx is the partition context of a 0.10 partition
// operation, or nil.
func (s *session) do(code wire.Code, body []byte, ctx *wire.PartitionContext) ([]byte, error) {
	if s.proto == wire.Legacy {
		wire.PutLegacyRequestHeader(s.hdr[:], code, len(body))
		if err := s.write(s.hdr[:wire.LegacyHeaderSize], body); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(s.rd(), s.hdr[:wire.LegacyHeaderSize]); err != nil {
			return nil, fmt.Errorf("failed to read response for TCP request: %w", err)
		}
		st, n, err := wire.ParseLegacyReplyHeader(s.hdr[:])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if st != 0 {
			return nil, statusError(st)
		}
		b, err := readN(s.rd(), uint64(n))
		if err != nil {
			return nil, fmt.Errorf("failed to read response for TCP request: %w", err)
		}
		return b, nil
	}
	op := wire.OperationOf(code)
	q := wire.RequestHeader{Size: uint32(wire.HeaderSize + len(body)), Client: s.id.client, Operation: op, Session: s.session, Code: code}
	switch op {
	case wire.OpRegister:
		q.Session = 0
	case wire.OpNonReplicated:
		q.Request = s.id.request
	default:
		if op.Partition() && s.pin != 0 {
			q.Request = s.pin
			break
		}
		s.id.request++
		q.Request = s.id.request
	}
	if op != wire.OpNonReplicated && !op.Partition() {
		q.RequestChecksum = wire.BodyChecksum(body)
	}
	if ctx != nil {
		q.Context = *ctx
	}
	q.Put(s.hdr[:])
	if err := s.write(s.hdr[:], body); err != nil {
		return nil, err
	}
	rh, payload, err := s.read012(op == wire.OpRegister)
	if err != nil {
		return nil, err
	}
	if rh.Request != q.Request {
		return nil, fmt.Errorf("%w: reply to request %d while %d is outstanding", ErrProtocol, rh.Request, q.Request)
	}
	if rh.Status != 0 {
		return nil, statusError(rh.Status)
	}
	if op.Framed() {
		p, st, err := wire.ParseResult(payload)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if st != 0 {
			return nil, statusError(st)
		}
		return p, nil
	}
	return payload, nil
}

// read012 reads one 0.10 reply frame. With detect set (the login), a
// reply that starts like a legacy one gives errLegacyServer.
func (s *session) read012(detect bool) (wire.ReplyHeader, []byte, error) {
	h := s.hdr[:]
	if _, err := io.ReadFull(s.rd(), h[:8]); err != nil {
		return wire.ReplyHeader{}, nil, fmt.Errorf("failed to read response for TCP request: %w", err)
	}
	if binary.LittleEndian.Uint32(h) != 0 {
		if detect {
			return wire.ReplyHeader{}, nil, errLegacyServer
		}
		return wire.ReplyHeader{}, nil, fmt.Errorf("%w: a reply frame starting %x (a 0.10 frame starts with zeros)", ErrProtocol, h[:8])
	}
	if _, err := io.ReadFull(s.rd(), h[8:]); err != nil {
		return wire.ReplyHeader{}, nil, fmt.Errorf("failed to read response for TCP request: %w", err)
	}
	if wire.FrameCommand(h) == wire.CommandEviction {
		e, _ := wire.ParseEviction(h)
		return wire.ReplyHeader{}, nil, &evictionError{e}
	}
	rh, err := wire.ParseReplyHeader(h)
	if err != nil {
		return rh, nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	b, err := readN(s.rd(), uint64(rh.Size-wire.HeaderSize))
	if err != nil {
		return rh, nil, fmt.Errorf("failed to read response for TCP request: %w", err)
	}
	return rh, b, nil
}

// login authenticates the fresh connection.
func (s *session) login(cfg *config) error {
	if s.proto == wire.Legacy {
		l := wire.Login{User: cfg.user, Password: cfg.password, Token: cfg.token, Version: "0.8.0"}
		body, code := l.AppendLegacy(nil)
		_, err := s.do(code, body, nil)
		return err
	}
	g := wire.Register{Version: wire.ProtocolVersion, SDKName: sdkName, SDKVersion: sdkVersion,
		BindSecret: s.id.secret, User: cfg.user, Password: cfg.password, Token: cfg.token}
	reply, err := s.do(wire.CodeLoginRegister, g.Append(nil), nil)
	if err != nil {
		return err
	}
	// do stripped a framed reply's result section; an unframed (0.9 docs)
	// reply is decoded as it is.
	rep, err := wire.ParseRegisterReply(append(wire.AppendResultOK(nil), reply...))
	if err != nil {
		if rep, err = wire.ParseRegisterReply(reply); err != nil {
			return fmt.Errorf("%w: login reply: %w", ErrProtocol, err)
		}
	}
	if rep.Session == 0 {
		return fmt.Errorf("%w: login reply with session 0", ErrProtocol)
	}
	s.session = rep.Session
	return nil
}

// Admin calls. Each returns the SDK's contract types, so that callers and
// errors read as they did with the SDK's client.

func (t topicRef) ids() []byte { return t.wt.Append(t.ws.Append(nil)) }

func (s *session) getTopic(t topicRef) (*iggcon.TopicDetails, error) {
	b, err := s.do(wire.CodeGetTopic, t.ids(), nil)
	if err != nil {
		return nil, err
	}
	ti, ok, err := wire.ParseTopic(b, s.proto)
	if err != nil {
		return nil, fmt.Errorf("%w: get topic: %w", ErrProtocol, err)
	}
	if !ok {
		return nil, ierror.ErrTopicIdNotFound
	}
	d := &iggcon.TopicDetails{Topic: iggcon.Topic{Id: ti.ID, CreatedAt: ti.CreatedAt, Name: ti.Name, PartitionsCount: ti.PartitionsCount,
		MessagesCount: ti.Messages, MaxTopicSize: ti.MaxSize, MessageExpiry: iggcon.Duration(ti.Expiry)}}
	for _, p := range ti.Partitions {
		d.Partitions = append(d.Partitions, iggcon.PartitionContract{Id: p.ID, CreatedAt: p.CreatedAt,
			SegmentsCount: p.Segments, CurrentOffset: p.CurrentOffset, SizeBytes: p.SizeBytes, MessagesCount: p.Messages})
		if s.proto == wire.V012 && p.Context.Incarnation != 0 {
			if s.routes == nil {
				s.routes = map[routeKey]wire.PartitionContext{}
			}
			s.routes[routeKey{t.stream, t.topic, p.ID}] = p.Context
		}
	}
	return d, nil
}

func (s *session) streamExists(t topicRef) (bool, error) {
	b, err := s.do(wire.CodeGetStream, t.ws.Append(nil), nil)
	if err != nil {
		return false, err
	}
	return len(b) > 0, nil
}

func (s *session) createStream(name string) error {
	_, err := s.do(wire.CodeCreateStream, wire.CreateStream{Name: name}.Append(nil, s.proto), nil)
	return err
}

func (s *session) deleteStream(id wire.Identifier) error {
	_, err := s.do(wire.CodeDeleteStream, id.Append(nil), nil)
	return err
}

func (s *session) createTopic(t topicRef, partitions uint32, expiry, maxSize uint64) error {
	ct := wire.CreateTopic{Stream: t.ws, Partitions: partitions, Name: t.topic, Expiry: expiry, MaxSize: maxSize}
	_, err := s.do(wire.CodeCreateTopic, ct.Append(nil, s.proto), nil)
	return err
}

func (s *session) getConsumerOffset(c wire.Consumer, t topicRef, partition uint32) (*iggcon.ConsumerOffsetInfo, error) {
	ref := wire.OffsetRef{Consumer: c, Stream: t.ws, Topic: t.wt, Partition: &partition}
	b, err := s.do(wire.CodeGetConsumerOffset, ref.Append(nil), nil)
	if err != nil {
		return nil, err
	}
	o, ok, err := wire.ParseOffsetInfo(b)
	if err != nil {
		return nil, fmt.Errorf("%w: consumer offset: %w", ErrProtocol, err)
	}
	if !ok {
		return nil, nil
	}
	return &iggcon.ConsumerOffsetInfo{PartitionId: o.Partition, CurrentOffset: o.CurrentOffset, StoredOffset: o.StoredOffset}, nil
}

func (s *session) storeConsumerOffset(c wire.Consumer, t topicRef, partition uint32, offset uint64) error {
	so := wire.StoreOffset{OffsetRef: wire.OffsetRef{Consumer: c, Stream: t.ws, Topic: t.wt, Partition: &partition}, Offset: offset, Ack: 1}
	var ctx *wire.PartitionContext
	if s.proto == wire.V012 {
		pc, err := s.route(t, partition)
		if err != nil {
			return err
		}
		ctx = &pc
	}
	_, err := s.do(wire.CodeStoreConsumerOffset, so.Append(nil, s.proto), ctx)
	return err
}

// clientAddresses lists the addresses of the server's clients (legacy
// GetClients layout). A 0.10 server's layout is not published; it is not
// asked (a 0.10 retry is recognised by its request number instead).
func (s *session) clientAddresses() ([]string, bool, error) {
	if s.proto != wire.Legacy {
		return nil, false, nil
	}
	b, err := s.do(wire.CodeGetClients, nil, nil)
	if err != nil {
		return nil, true, err
	}
	var out []string
	r := wire.NewReader(b)
	for r.Len() > 0 && r.Err() == nil {
		r.U32() // client id
		r.U32() // user id
		r.U8()  // transport
		out = append(out, r.Str32())
		r.U32() // consumer groups count
	}
	if r.Err() != nil {
		return nil, true, fmt.Errorf("%w: clients: %w", ErrProtocol, r.Err())
	}
	return out, true, nil
}

// leader returns the address ("ip:port") of the cluster's healthy leader
// when GetClusterMetadata lists more than one node, else "". A server that
// answers with an error status (a server without clustering) gives "".
func (s *session) leader() (string, error) {
	b, err := s.do(wire.CodeGetClusterMetadata, nil, nil)
	if err != nil {
		if classify(err) == classServer {
			return "", nil
		}
		return "", err
	}
	_, nodes, err := wire.ParseClusterMetadata(b)
	if err != nil {
		return "", fmt.Errorf("%w: cluster metadata: %w", ErrProtocol, err)
	}
	if len(nodes) <= 1 {
		return "", nil
	}
	for _, n := range nodes {
		if n.Role == 0 && n.Status == 0 && n.TCP != 0 {
			return net.JoinHostPort(n.IP, strconv.Itoa(int(n.TCP))), nil
		}
	}
	return "", nil
}

// route returns the partition context of a 0.10 partition, asking the
// server (GetPartitionRoute) the first time. A server that does not know
// the lookup gets a zero context.
func (s *session) route(t topicRef, partition uint32) (wire.PartitionContext, error) {
	k := routeKey{t.stream, t.topic, partition}
	if pc, ok := s.routes[k]; ok || s.noRoutes {
		return pc, nil
	}
	b, err := s.do(wire.CodeGetPartitionRoute, wire.PartitionRoute{Stream: t.ws, Topic: t.wt, Partition: partition}.Append(nil), nil)
	if errors.Is(err, ierror.ErrInvalidCommand) {
		s.noRoutes = true
		return wire.PartitionContext{}, nil
	}
	if err != nil {
		return wire.PartitionContext{}, err
	}
	pc, err := wire.ParsePartitionContext(b[:min(len(b), wire.PartitionContextSize)])
	if err != nil {
		return pc, fmt.Errorf("%w: partition route: %w", ErrProtocol, err)
	}
	if s.routes == nil {
		s.routes = map[routeKey]wire.PartitionContext{}
	}
	s.routes[k] = pc
	return pc, nil
}

// forget drops a cached partition context (after HistoryUnavailable).
func (s *session) forget(t topicRef, partition uint32) {
	delete(s.routes, routeKey{t.stream, t.topic, partition})
}

// send sends a SendMessages body built by encodeSend for protocol
// s.proto. In 0.10 it records the confirmed base offset (lastSent) and
// reports whether the server recognised the request as a retry of one it
// had committed (an empty confirmation list).
func (s *session) send(t topicRef, partition uint32, body []byte) (dup bool, err error) {
	if s.proto == wire.Legacy {
		_, err := s.do(wire.CodeSendMessages, body, nil)
		return false, err
	}
	pc, err := s.route(t, partition)
	if err != nil {
		return false, err
	}
	b, err := s.do(wire.CodeSendMessages, body, &pc)
	if errors.Is(err, ierror.FromCode(ierror.Code(wire.StatusHistoryUnavailable))) {
		s.forget(t, partition)
	}
	if err != nil {
		return false, err
	}
	cs, err := wire.ParseConfirmations(b)
	if err != nil {
		return false, fmt.Errorf("%w: send confirmations: %w", ErrProtocol, err)
	}
	if len(cs) == 0 {
		return true, nil
	}
	s.lastSent = cs[0].BaseOffset
	return false, nil
}

// poll polls count messages of a partition from offset with the default
// consumer, decoded into the SDK's message type (for the slow paths: the
// ownership log and tail scans; readers decode replies themselves).
func (s *session) poll(t topicRef, partition uint32, offset uint64, count uint32) (*iggcon.PolledMessage, error) {
	return s.pollWith(t, partition, wire.PollOffset, offset, count)
}

// pollWith polls count messages of a partition with a polling strategy
// (wire.PollOffset, wire.PollFirst...) and its value, as poll does.
func (s *session) pollWith(t topicRef, partition uint32, strategy uint8, value uint64, count uint32) (*iggcon.PolledMessage, error) {
	p := wire.Poll{Consumer: wire.Consumer{Kind: wire.ConsumerSingle, ID: wire.NumericID(0)}, Stream: t.ws, Topic: t.wt,
		Partition: &partition, Strategy: strategy, Value: value, Count: count}
	b, err := s.do(wire.CodePollMessages, p.Append(nil), nil)
	if err != nil {
		return nil, err
	}
	out := &iggcon.PolledMessage{PartitionId: partition}
	add := func(m wire.Message) {
		out.Messages = append(out.Messages, iggcon.IggyMessage{
			Header: iggcon.MessageHeader{Checksum: m.Checksum, Id: m.ID, Offset: m.Offset, Timestamp: m.Timestamp,
				OriginTimestamp: m.OriginTimestamp, UserHeaderLength: uint32(len(m.Headers)), PayloadLength: uint32(len(m.Payload))},
			Payload: m.Payload, UserHeaders: m.Headers,
		})
	}
	if s.proto == wire.Legacy {
		pre, msgs, err := wire.ParseLegacyPollReply(b)
		if err != nil {
			return nil, fmt.Errorf("%w: poll reply: %w", ErrProtocol, err)
		}
		out.CurrentOffset, out.MessageCount = pre.CurrentOffset, pre.Count
		for _, m := range msgs {
			add(m)
		}
		return out, nil
	}
	pre, _, batches, err := wire.ParsePollReply(b)
	if err != nil {
		return nil, fmt.Errorf("%w: poll reply: %w", ErrProtocol, err)
	}
	out.CurrentOffset, out.MessageCount = pre.CurrentOffset, pre.Count
	err = eachFrame(batches, func(h *wire.BatchHeader, f *wire.Frame) error {
		add(wire.Message{Checksum: f.Checksum, ID: f.ID, Offset: h.BaseOffset + uint64(f.OffsetDelta), Timestamp: h.BaseTimestamp,
			OriginTimestamp: h.OriginTimestamp + uint64(f.TimestampDelta), Payload: f.Payload, Headers: f.Headers})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: poll reply: %w", ErrProtocol, err)
	}
	return out, nil
}

// eachFrame calls fn for every frame of the batches of a 0.10 poll reply.
func eachFrame(batches []byte, fn func(h *wire.BatchHeader, f *wire.Frame) error) error {
	for len(batches) > 0 {
		h, err := wire.Frames(batches, fn)
		if err != nil {
			return err
		}
		batches = batches[h.Length:]
	}
	return nil
}

// wireConsumer converts an SDK consumer.
func wireConsumer(c iggcon.Consumer) (wire.Consumer, error) {
	b, err := c.MarshalBinary()
	if err != nil {
		return wire.Consumer{}, err
	}
	r := wire.NewReader(b)
	wc := r.Consumer(wire.ConsumerGroup)
	return wc, r.Err()
}
