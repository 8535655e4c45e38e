package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/zeebo/xxh3"
)

// Binary protocol 0.12.0 (Iggy server 0.10) framing. Every frame is a
// 256-byte header and a body; size (u32 at 48) counts both. Command byte
// (60): 5 Request, 8 Reply, 13 Eviction.
const (
	HeaderSize   = 256
	MaxFrameSize = 64 << 20

	CommandRequest  = 5
	CommandReply    = 8
	CommandEviction = 13

	// ProtocolVersion is 0.12.0 packed as major<<20 | minor<<10 | patch.
	ProtocolVersion uint32 = 0<<20 | 12<<10 | 0
)

// VersionString renders a packed protocol version.
func VersionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v>>20, (v>>10)&0x3ff, v&0x3ff)
}

// Operation addresses a V012 request.
type Operation uint8

// Operations strand uses. Reads, Ping and lookups are NonReplicated and
// carry their command code at header bytes 196..200.
const (
	OpRegister            Operation = 1
	OpNonReplicated       Operation = 2
	OpLogout              Operation = 3
	OpCreateTopicInternal Operation = 64 // a reply to CreateTopic may carry it
	OpCreatePartsInternal Operation = 65 // a reply to CreatePartitions may carry it
	OpCreateStream        Operation = 128
	OpDeleteStream        Operation = 130
	OpCreateTopic         Operation = 132
	OpDeleteTopic         Operation = 134
	OpCreatePartitions    Operation = 136
	OpDeletePartitions    Operation = 137
	OpCreateGroup         Operation = 139
	OpDeleteGroup         Operation = 140
	OpJoinGroup           Operation = 148
	OpLeaveGroup          Operation = 149
	OpSendMessages        Operation = 160
	OpStoreOffset         Operation = 161
	OpDeleteOffset        Operation = 162
)

// Framed reports whether replies to op start with a result section.
func (op Operation) Framed() bool {
	return op == OpRegister || op >= 64 && op < OpSendMessages || op == OpStoreOffset || op == OpDeleteOffset
}

// Partition reports whether op is a partition operation (it carries a
// partition context).
func (op Operation) Partition() bool { return op >= OpSendMessages && op <= OpDeleteOffset }

// OperationOf returns the operation that carries code, or OpNonReplicated.
func OperationOf(code Code) Operation {
	switch code {
	case CodeLoginRegister, CodeLoginRegisterToken:
		return OpRegister
	case CodeLogoutUser:
		return OpLogout
	case CodeCreateStream:
		return OpCreateStream
	case CodeDeleteStream:
		return OpDeleteStream
	case CodeCreateTopic:
		return OpCreateTopic
	case CodeDeleteTopic:
		return OpDeleteTopic
	case CodeCreatePartitions:
		return OpCreatePartitions
	case CodeDeletePartitions:
		return OpDeletePartitions
	case CodeCreateConsumerGroup:
		return OpCreateGroup
	case CodeDeleteConsumerGroup:
		return OpDeleteGroup
	case CodeJoinConsumerGroup:
		return OpJoinGroup
	case CodeLeaveConsumerGroup:
		return OpLeaveGroup
	case CodeSendMessages:
		return OpSendMessages
	case CodeStoreConsumerOffset:
		return OpStoreOffset
	case CodeDeleteConsumerOff:
		return OpDeleteOffset
	}
	return OpNonReplicated
}

// CodeOf returns the command code of a replicated operation (the inverse
// of OperationOf), or 0.
func CodeOf(op Operation) Code {
	switch op {
	case OpRegister:
		return CodeLoginRegister
	case OpLogout:
		return CodeLogoutUser
	case OpCreateStream:
		return CodeCreateStream
	case OpDeleteStream:
		return CodeDeleteStream
	case OpCreateTopic, OpCreateTopicInternal:
		return CodeCreateTopic
	case OpDeleteTopic:
		return CodeDeleteTopic
	case OpCreatePartitions, OpCreatePartsInternal:
		return CodeCreatePartitions
	case OpDeletePartitions:
		return CodeDeletePartitions
	case OpCreateGroup:
		return CodeCreateConsumerGroup
	case OpDeleteGroup:
		return CodeDeleteConsumerGroup
	case OpJoinGroup:
		return CodeJoinConsumerGroup
	case OpLeaveGroup:
		return CodeLeaveConsumerGroup
	case OpSendMessages:
		return CodeSendMessages
	case OpStoreOffset:
		return CodeStoreConsumerOffset
	case OpDeleteOffset:
		return CodeDeleteConsumerOff
	}
	return 0
}

// Offsets of the header fields.
const (
	offSize      = 48
	offCommand   = 60
	offClient    = 128
	offReqSum    = 144
	offTimestamp = 160
	offRequest   = 168
	offOperation = 176
	offSession   = 184
	offUserID    = 192
	offCode      = 196
	// The partition context of 0.10 is stamped at 200/208/216: the
	// published sources name the three u64 fields but not their offsets;
	// 200..224 is the first free room after the command code (design §7).
	offIncarnation = 200
	offOwnerGen    = 208
	offMinMetaOp   = 216

	offRepReqSum    = 128
	offRepContext   = 144
	offRepClient    = 160
	offRepOp        = 176
	offRepCommit    = 184
	offRepTimestamp = 192
	offRepRequest   = 200
	offRepOperation = 208
	offRepStatus    = 216

	offEvClient = 128
	offEvMax    = 144
	offEvMin    = 148
	offEvReason = 255
)

// ClientID is a V012 client id (u128, little-endian bytes).
type ClientID [16]byte

// RequestHeader is the header of a client request.
type RequestHeader struct {
	Size            uint32 // HeaderSize + body length
	Client          ClientID
	RequestChecksum uint64 // XXH3-64 of the body, 0 = unstamped
	Timestamp       uint64
	Request         uint64
	Operation       Operation
	Session         uint64
	Code            Code // NonReplicated only
	Context         PartitionContext
}

// Put writes the header into h[:HeaderSize], zeroing every other byte.
func (q *RequestHeader) Put(h []byte) {
	h = h[:HeaderSize]
	clear(h)
	le := binary.LittleEndian
	le.PutUint32(h[offSize:], q.Size)
	h[offCommand] = CommandRequest
	copy(h[offClient:], q.Client[:])
	le.PutUint64(h[offReqSum:], q.RequestChecksum)
	le.PutUint64(h[offTimestamp:], q.Timestamp)
	le.PutUint64(h[offRequest:], q.Request)
	h[offOperation] = byte(q.Operation)
	le.PutUint64(h[offSession:], q.Session)
	if q.Operation == OpNonReplicated {
		le.PutUint32(h[offCode:], uint32(q.Code))
	}
	le.PutUint64(h[offIncarnation:], q.Context.Incarnation)
	le.PutUint64(h[offOwnerGen:], q.Context.OwnerGeneration)
	le.PutUint64(h[offMinMetaOp:], q.Context.MetadataOp)
}

// ParseRequestHeader decodes and validates a request header as the server
// does: command 5, a size within [256, MaxFrameSize], a non-zero client
// and operation, session and request 0 on Register and non-zero on every
// replicated operation.
func ParseRequestHeader(h []byte) (RequestHeader, error) {
	var q RequestHeader
	if len(h) < HeaderSize {
		return q, NewReaderErr("request header of %d bytes", len(h))
	}
	le := binary.LittleEndian
	q.Size = le.Uint32(h[offSize:])
	copy(q.Client[:], h[offClient:offClient+16])
	q.RequestChecksum = le.Uint64(h[offReqSum:])
	q.Timestamp = le.Uint64(h[offTimestamp:])
	q.Request = le.Uint64(h[offRequest:])
	q.Operation = Operation(h[offOperation])
	q.Session = le.Uint64(h[offSession:])
	if q.Operation == OpNonReplicated {
		q.Code = Code(le.Uint32(h[offCode:]))
	} else {
		q.Code = CodeOf(q.Operation)
	}
	q.Context = PartitionContext{le.Uint64(h[offIncarnation:]), le.Uint64(h[offOwnerGen:]), le.Uint64(h[offMinMetaOp:])}
	switch {
	case h[offCommand] != CommandRequest:
		return q, NewReaderErr("request command %d, want %d", h[offCommand], CommandRequest)
	case q.Size < HeaderSize || q.Size > MaxFrameSize:
		return q, NewReaderErr("request size %d outside [%d, %d]", q.Size, HeaderSize, MaxFrameSize)
	case q.Client == ClientID{}:
		return q, NewReaderErr("request from client 0")
	case q.Operation == 0:
		return q, NewReaderErr("request operation 0")
	case q.Operation == OpRegister && (q.Session != 0 || q.Request != 0):
		return q, NewReaderErr("register with session %d request %d", q.Session, q.Request)
	case q.Operation != OpRegister && q.Operation != OpNonReplicated && (q.Session == 0 || q.Request == 0):
		return q, NewReaderErr("operation %d with session %d request %d", q.Operation, q.Session, q.Request)
	case q.Operation != OpNonReplicated && q.Operation != OpRegister && CodeOf(q.Operation) == 0:
		return q, NewReaderErr("unknown operation %d", q.Operation)
	}
	return q, nil
}

// ReplyHeader is the header of a server reply.
type ReplyHeader struct {
	Size            uint32
	RequestChecksum uint64
	Context         [16]byte
	Client          ClientID
	Op              uint64 // the session, for direct replies
	Commit          uint64 // metadata commit the reply reflects
	Timestamp       uint64
	Request         uint64
	Operation       Operation
	Status          Status
}

// Put writes the header into h[:HeaderSize].
func (p *ReplyHeader) Put(h []byte) {
	h = h[:HeaderSize]
	clear(h)
	le := binary.LittleEndian
	le.PutUint32(h[offSize:], p.Size)
	h[offCommand] = CommandReply
	le.PutUint64(h[offRepReqSum:], p.RequestChecksum)
	copy(h[offRepContext:], p.Context[:])
	copy(h[offRepClient:], p.Client[:])
	le.PutUint64(h[offRepOp:], p.Op)
	le.PutUint64(h[offRepCommit:], p.Commit)
	le.PutUint64(h[offRepTimestamp:], p.Timestamp)
	le.PutUint64(h[offRepRequest:], p.Request)
	h[offRepOperation] = byte(p.Operation)
	le.PutUint32(h[offRepStatus:], uint32(p.Status))
}

// ParseReplyHeader decodes a reply header (command 8).
func ParseReplyHeader(h []byte) (ReplyHeader, error) {
	var p ReplyHeader
	if len(h) < HeaderSize {
		return p, NewReaderErr("reply header of %d bytes", len(h))
	}
	le := binary.LittleEndian
	p.Size = le.Uint32(h[offSize:])
	p.RequestChecksum = le.Uint64(h[offRepReqSum:])
	copy(p.Context[:], h[offRepContext:offRepContext+16])
	copy(p.Client[:], h[offRepClient:offRepClient+16])
	p.Op = le.Uint64(h[offRepOp:])
	p.Commit = le.Uint64(h[offRepCommit:])
	p.Timestamp = le.Uint64(h[offRepTimestamp:])
	p.Request = le.Uint64(h[offRepRequest:])
	p.Operation = Operation(h[offRepOperation])
	p.Status = Status(le.Uint32(h[offRepStatus:]))
	switch {
	case h[offCommand] != CommandReply:
		return p, NewReaderErr("reply command %d, want %d", h[offCommand], CommandReply)
	case p.Size < HeaderSize || p.Size > MaxFrameSize:
		return p, NewReaderErr("reply size %d outside [%d, %d]", p.Size, HeaderSize, MaxFrameSize)
	}
	return p, nil
}

// Eviction reasons.
const (
	EvictNoSession             = 1
	EvictInvalidRequestBody    = 5
	EvictInvalidCredentials    = 9
	EvictInvalidToken          = 10
	EvictUserInactive          = 11
	EvictStaleClient           = 13
	EvictIncompatibleProtocol  = 14
	EvictMalformedLogin        = 15
	evictReasonMax             = 15
	evictIncompatibleName      = "incompatible protocol"
	evictUnknownNameForReasons = "unknown"
)

var evictionNames = [...]string{
	1: "no session", 2: "client release too low", 3: "client release too high",
	4: "invalid request operation", 5: "invalid request body", 6: "invalid request body size",
	7: "session too low", 8: "session release mismatch", 9: "invalid credentials",
	10: "invalid token", 11: "user inactive", 12: "session error", 13: "stale client",
	14: evictIncompatibleName, 15: "malformed login",
}

// Eviction is the terminal frame a server sends instead of a reply.
type Eviction struct {
	Client     ClientID
	MaxVersion uint32 // server's newest protocol, reason 14 only
	MinVersion uint32 // server's oldest protocol, reason 14 only
	Reason     uint8
}

// Put writes the eviction frame (header only) into h[:HeaderSize].
func (e *Eviction) Put(h []byte) {
	h = h[:HeaderSize]
	clear(h)
	binary.LittleEndian.PutUint32(h[offSize:], HeaderSize)
	h[offCommand] = CommandEviction
	copy(h[offEvClient:], e.Client[:])
	binary.LittleEndian.PutUint32(h[offEvMax:], e.MaxVersion)
	binary.LittleEndian.PutUint32(h[offEvMin:], e.MinVersion)
	h[offEvReason] = e.Reason
}

// ParseEviction decodes an eviction frame.
func ParseEviction(h []byte) (Eviction, error) {
	var e Eviction
	if len(h) < HeaderSize || h[offCommand] != CommandEviction {
		return e, NewReaderErr("not an eviction frame")
	}
	copy(e.Client[:], h[offEvClient:offEvClient+16])
	e.MaxVersion = binary.LittleEndian.Uint32(h[offEvMax:])
	e.MinVersion = binary.LittleEndian.Uint32(h[offEvMin:])
	e.Reason = h[offEvReason]
	return e, nil
}

// Error describes the eviction.
func (e Eviction) Error() string {
	name := evictUnknownNameForReasons
	if int(e.Reason) < len(evictionNames) && evictionNames[e.Reason] != "" {
		name = evictionNames[e.Reason]
	}
	if e.Reason == EvictIncompatibleProtocol {
		return fmt.Sprintf("iggy: the server refused the session (reason %d, %s): it accepts binary protocol %s..%s, the client speaks %s",
			e.Reason, name, VersionString(e.MinVersion), VersionString(e.MaxVersion), VersionString(ProtocolVersion))
	}
	return fmt.Sprintf("iggy: the server refused the session (reason %d, %s)", e.Reason, name)
}

// FrameSize returns the size field of a V012 frame header prefix (at least
// 52 bytes).
func FrameSize(h []byte) uint32 { return binary.LittleEndian.Uint32(h[offSize:]) }

// FrameCommand returns the command byte of a V012 frame header.
func FrameCommand(h []byte) byte { return h[offCommand] }

// BodyChecksum returns XXH3-64 of a body, as stamped at request_checksum.
func BodyChecksum(body []byte) uint64 { return xxh3.Hash(body) }

// AppendResultOK appends the result section of a successful framed reply
// (count 0).
func AppendResultOK(b []byte) []byte { return appendU32(b, 0) }

// AppendResultError appends a result section with one rejected entry.
func AppendResultError(b []byte, st Status) []byte {
	return appendU32(appendU32(appendU32(b, 1), 0), uint32(st))
}

// ParseResult splits a framed reply body into its result and payload: a
// committed rejection gives its status and no payload.
func ParseResult(b []byte) (payload []byte, st Status, err error) {
	r := NewReader(b)
	n := r.U32()
	switch {
	case r.err != nil:
		return nil, 0, r.err
	case n == 0:
		return r.Rest(), 0, nil
	case uint64(n)*8 > uint64(r.Len()):
		return nil, 0, NewReaderErr("result section of %d entries in %d bytes", n, r.Len())
	}
	r.U32()
	st = Status(r.U32())
	if st == 0 {
		return nil, 0, NewReaderErr("result entry with status 0")
	}
	return nil, st, nil
}

// Register is a LoginRegister body (code 40 with a password, 45 with a
// token; operation 1): protocol_version u32 · sdk_name u8-len · sdk_version
// u8-len · bind_secret 32 B · (username u8-len · password u8-len | token
// u8-len) · context u32-len.
type Register struct {
	Version    uint32
	SDKName    string
	SDKVersion string
	BindSecret [32]byte
	User       string
	Password   string
	Token      string
	Context    string
}

// Append appends the body.
func (g *Register) Append(b []byte) []byte {
	b = appendU32(b, g.Version)
	b = append(append(b, byte(len(g.SDKName))), g.SDKName...)
	b = append(append(b, byte(len(g.SDKVersion))), g.SDKVersion...)
	b = append(b, g.BindSecret[:]...)
	if g.Token != "" {
		b = appendName(b, g.Token)
	} else {
		b = appendName(b, g.User)
		b = append(append(b, byte(len(g.Password))), g.Password...)
	}
	return appendStr32(b, g.Context)
}

// ParseRegisterVersion reads only the protocol version prefix, which a
// server checks before anything else.
func ParseRegisterVersion(b []byte) (uint32, error) {
	r := NewReader(b)
	v := r.U32()
	return v, r.err
}

// ParseRegister decodes a LoginRegister body: as a user/password body when
// it parses exactly as one, else as a token body.
func ParseRegister(b []byte) (Register, error) {
	var g Register
	r := NewReader(b)
	g.Version = r.U32()
	g.SDKName = r.Str8()
	g.SDKVersion = r.Str8()
	copy(g.BindSecret[:], r.Bytes(32))
	if r.err != nil {
		return g, r.err
	}
	rest := r.Rest()
	pr := NewReader(rest)
	g.User = pr.Name()
	g.Password = pr.Str8()
	g.Context = pr.Str32()
	pr.Done("login")
	if pr.err == nil {
		return g, nil
	}
	g.User, g.Password = "", ""
	tr := NewReader(rest)
	g.Token = tr.Name()
	g.Context = tr.Str32()
	tr.Done("token login")
	return g, tr.err
}

// RegisterReply is a LoginRegister success body (after its result
// section): user_id u32 · session u64 · server_protocol_version u32 ·
// server_version u8-len.
type RegisterReply struct {
	UserID        uint32
	Session       uint64
	ServerVersion uint32
	ServerRelease string
}

// Append appends the framed body (result section count 0 first, the form
// of the later docs and dev SDKs).
func (g *RegisterReply) Append(b []byte) []byte {
	b = AppendResultOK(b)
	b = appendU64(appendU32(b, g.UserID), g.Session)
	b = appendU32(b, g.ServerVersion)
	return append(append(b, byte(len(g.ServerRelease))), g.ServerRelease...)
}

// ParseRegisterReply decodes a LoginRegister reply body framed (count 0
// first) or unframed (the 0.9 docs' form), telling them apart by length.
func ParseRegisterReply(b []byte) (RegisterReply, error) {
	var g RegisterReply
	switch {
	case len(b) >= 12 && binary.LittleEndian.Uint32(b) != 0 && uint64(len(b)) == 4+8*uint64(binary.LittleEndian.Uint32(b)):
		_, st, err := ParseResult(b)
		if err != nil {
			return g, err
		}
		return g, st
	case len(b) >= 21 && len(b) == 21+int(b[20]) && binary.LittleEndian.Uint32(b) == 0:
		b = b[4:]
	case len(b) >= 17 && len(b) == 17+int(b[16]):
	default:
		return g, NewReaderErr("login reply of %d bytes", len(b))
	}
	r := NewReader(b)
	g.UserID, g.Session = r.U32(), r.U64()
	g.ServerVersion = r.U32()
	g.ServerRelease = r.Str8()
	r.Done("login reply")
	return g, r.err
}

// Confirmation is one entry of a SendMessages reply: where a batch was
// appended.
type Confirmation struct {
	Stream, Topic, Partition uint32
	BaseOffset               uint64
}

// ConfirmationSize is the encoded size of a Confirmation.
const ConfirmationSize = 20

// AppendConfirmations appends a send reply: count u32 · entries.
func AppendConfirmations(b []byte, cs []Confirmation) []byte {
	b = appendU32(b, uint32(len(cs)))
	for _, c := range cs {
		b = appendU64(appendU32(appendU32(appendU32(b, c.Stream), c.Topic), c.Partition), c.BaseOffset)
	}
	return b
}

// ParseConfirmations decodes a send reply. The empty body (a recognised
// duplicate) gives no confirmation and no error.
func ParseConfirmations(b []byte) ([]Confirmation, error) {
	if len(b) == 0 {
		return nil, nil
	}
	r := NewReader(b)
	n := r.U32()
	if r.err == nil && uint64(n)*ConfirmationSize != uint64(r.Len()) {
		return nil, NewReaderErr("send reply claims %d confirmations in %d bytes", n, r.Len())
	}
	cs := make([]Confirmation, n)
	for i := range cs {
		cs[i] = Confirmation{Stream: r.U32(), Topic: r.U32(), Partition: r.U32(), BaseOffset: r.U64()}
	}
	return cs, r.err
}

// SendHead is the metadata part of a V012 SendMessages body:
// metadata_length u32 · stream · topic · Partitioning · messages_count u32.
// The batch follows.
func AppendSendHead(b, ids []byte, partition uint32, count int) []byte {
	return AppendLegacySendHead(b, ids, partition, count) // same bytes up to the batch
}

// SendBody is a decoded V012 SendMessages body.
type SendBody struct {
	Stream, Topic Identifier
	Kind          uint8
	Value         []byte
	Count         uint32
	Batch         []byte
}

// ParseSendBody splits a V012 SendMessages body; the batch is returned
// unverified (VerifyBatch checks it).
func ParseSendBody(b []byte) (SendBody, error) {
	var s SendBody
	r := NewReader(b)
	meta := NewReader(r.Bytes(int(r.U32())))
	if r.err != nil {
		return s, r.err
	}
	s.Stream, s.Topic = meta.Identifier(), meta.Identifier()
	s.Kind = meta.U8()
	s.Value = meta.Bytes(int(meta.U8()))
	s.Count = meta.U32()
	meta.Done("send metadata")
	s.Batch = r.Rest()
	return s, meta.err
}

// ParsePollReply splits a V012 poll reply into its prefix, the partition
// context when the reply carries one, and the batches. The 0.9 form has a
// 16-byte prefix, crate 0.11.1-edge.2/3 a 24-byte context after it; the
// form is told apart by whether a batch header follows the 16 bytes.
func ParsePollReply(b []byte) (PollPrefix, *PartitionContext, []byte, error) {
	if len(b) == 0 {
		return PollPrefix{}, nil, nil, nil
	}
	p, err := ParsePollPrefix(b)
	if err != nil {
		return p, nil, nil, err
	}
	rest := b[PollPrefixSize:]
	if p.Count == 0 {
		switch len(rest) {
		case 0:
			return p, nil, nil, nil
		case PartitionContextSize:
			c, err := ParsePartitionContext(rest)
			return p, &c, nil, err
		}
		return p, nil, nil, NewReaderErr("poll reply of 0 messages has %d bytes after its prefix", len(rest))
	}
	if looksLikeBatch(rest) {
		return p, nil, rest, nil
	}
	if len(rest) < PartitionContextSize {
		return p, nil, nil, NewReaderErr("poll reply of %d messages has %d bytes after its prefix", p.Count, len(rest))
	}
	c, _ := ParsePartitionContext(rest[:PartitionContextSize])
	return p, &c, rest[PartitionContextSize:], nil
}

func looksLikeBatch(b []byte) bool {
	if len(b) < BatchHeaderSize {
		return false
	}
	l := binary.LittleEndian.Uint64(b[32:])
	return l >= BatchHeaderSize && l <= uint64(len(b)) && binary.LittleEndian.Uint32(b[48:]) >= 1
}

// Node is one node of a GetClusterMetadata reply.
type Node struct {
	Name, IP            string
	TCP, QUIC, HTTP, WS uint16
	Role, Status        uint8 // role 0 leader, 1 follower; status 0 healthy
}

// AppendClusterMetadata appends a GetClusterMetadata reply: name_len u32 +
// name · count u32 · nodes (name_len u32 + name · ip_len u32 + ip · tcp,
// quic, http, ws u16 · role u8 · status u8).
func AppendClusterMetadata(b []byte, name string, nodes []Node) []byte {
	b = appendU32(appendStr32(b, name), uint32(len(nodes)))
	for _, n := range nodes {
		b = appendStr32(appendStr32(b, n.Name), n.IP)
		b = appendU16(appendU16(appendU16(appendU16(b, n.TCP), n.QUIC), n.HTTP), n.WS)
		b = append(b, n.Role, n.Status)
	}
	return b
}

// ParseClusterMetadata decodes a GetClusterMetadata reply.
func ParseClusterMetadata(b []byte) (string, []Node, error) {
	r := NewReader(b)
	name := r.Str32()
	n := r.U32()
	if r.err == nil && uint64(n)*18 > uint64(r.Len()) {
		return name, nil, NewReaderErr("cluster of %d nodes in %d bytes", n, r.Len())
	}
	nodes := make([]Node, 0, n)
	for range n {
		var nd Node
		nd.Name, nd.IP = r.Str32(), r.Str32()
		nd.TCP, nd.QUIC, nd.HTTP, nd.WS = r.U16(), r.U16(), r.U16(), r.U16()
		nd.Role, nd.Status = r.U8(), r.U8()
		nodes = append(nodes, nd)
	}
	r.Done("cluster metadata")
	return name, nodes, r.err
}

// PartitionRoute is a GetPartitionRoute (105) body: stream · topic ·
// partition u32. The reply is the 24-byte PartitionContext (the form of
// the dev SDKs; crate 0.11.1-edge.2 described a 25-byte route instead).
type PartitionRoute struct {
	Stream, Topic Identifier
	Partition     uint32
}

// Append appends the body.
func (p PartitionRoute) Append(b []byte) []byte {
	return appendU32(p.Topic.Append(p.Stream.Append(b)), p.Partition)
}

// ParsePartitionRoute decodes a GetPartitionRoute body.
func ParsePartitionRoute(b []byte) (PartitionRoute, error) {
	r := NewReader(b)
	p := PartitionRoute{Stream: r.Identifier(), Topic: r.Identifier(), Partition: r.U32()}
	r.Done("partition route")
	return p, r.err
}
