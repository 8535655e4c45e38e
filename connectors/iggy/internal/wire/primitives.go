package wire

import (
	"errors"
	"fmt"
	"strconv"
)

// Protocol is one of the Iggy binary protocols this package defines.
type Protocol uint8

const (
	// Legacy is the protocol of Iggy server 0.7 and 0.8: [length][code]
	// request frames and [status][length] replies.
	Legacy Protocol = 1
	// V012 is binary protocol 0.12.0, spoken by Iggy server 0.10: 256-byte
	// frame headers, registered sessions and checksummed message batches.
	V012 Protocol = 2
)

// String names the protocol with the server release that speaks it.
func (p Protocol) String() string {
	switch p {
	case Legacy:
		return "Iggy server 0.8 (legacy protocol)"
	case V012:
		return "Iggy server 0.10 (binary protocol 0.12.0)"
	}
	return "protocol(" + strconv.Itoa(int(p)) + ")"
}

// Code is a command code. In the legacy protocol it is the second u32 of a
// request frame; in V012 reads carry it at header bytes 196..200 and writes
// are addressed by an operation byte (Operation).
type Code uint32

// Command codes, shared by both protocols unless noted.
const (
	CodePing                Code = 1
	CodeGetStats            Code = 10
	CodeGetClusterMetadata  Code = 12
	CodeBindSession         Code = 15 // V012 only
	CodeGetMe               Code = 20
	CodeGetClients          Code = 22
	CodeLoginUser           Code = 38 // legacy only
	CodeLogoutUser          Code = 39
	CodeLoginRegister       Code = 40 // V012 only (never on the wire: operation 1)
	CodeLoginWithToken      Code = 44 // legacy only
	CodeLoginRegisterToken  Code = 45 // V012 only (never on the wire: operation 1)
	CodePollMessages        Code = 100
	CodeSendMessages        Code = 101
	CodeGetPartitionRoute   Code = 105 // V012 only
	CodeGetConsumerOffset   Code = 120
	CodeStoreConsumerOffset Code = 121
	CodeDeleteConsumerOff   Code = 122
	CodeGetStream           Code = 200
	CodeGetStreams          Code = 201
	CodeCreateStream        Code = 202
	CodeDeleteStream        Code = 203
	CodeGetTopic            Code = 300
	CodeGetTopics           Code = 301
	CodeCreateTopic         Code = 302
	CodeDeleteTopic         Code = 303
	CodeCreatePartitions    Code = 402
	CodeDeletePartitions    Code = 403
	CodeCreateConsumerGroup Code = 602
	CodeDeleteConsumerGroup Code = 603
	CodeJoinConsumerGroup   Code = 604
	CodeLeaveConsumerGroup  Code = 605
)

// Status is an Iggy error code, carried in a reply's status field (or, in
// V012, a result section entry). 0 is success. The numbering is shared by
// both protocols.
type Status uint32

// Status codes used by strand and its broker.
const (
	StatusOK                     Status = 0
	StatusError                  Status = 1
	StatusInvalidCommand         Status = 3
	StatusInvalidFormat          Status = 4
	StatusFeatureUnavailable     Status = 5
	StatusInvalidIdentifier      Status = 6
	StatusResourceNotFound       Status = 20
	StatusStaleClient            Status = 30
	StatusUnauthenticated        Status = 40
	StatusUnauthorized           Status = 41
	StatusInvalidCredentials     Status = 42
	StatusTransientNotCommitted  Status = 57
	StatusTransientNotAccepted   Status = 58
	StatusRequestTooOld          Status = 85
	StatusHistoryUnavailable     Status = 87
	StatusStreamIDNotFound       Status = 1009
	StatusStreamNameExists       Status = 1012
	StatusTopicIDNotFound        Status = 2010
	StatusTopicNameExists        Status = 2013
	StatusPartitionNotFound      Status = 3007
	StatusConsumerOffsetNotFound Status = 3021
	StatusInvalidMessagesCount   Status = 4009
	StatusInvalidMessageChecksum Status = 4027
	StatusInvalidBatchChecksum   Status = 4039
	StatusUnsupportedOptionKey   Status = 4041
	StatusInvalidOptionValue     Status = 4042
	StatusInvalidReservedField   Status = 4101
)

// Identifier names a stream, topic, consumer or group: numerically (kind 1,
// a u32) or by name (kind 2, 1..255 bytes).
type Identifier struct {
	Kind uint8
	Num  uint32
	Str  string
}

// Identifier kinds.
const (
	IDNumeric = 1
	IDString  = 2
)

// NumericID returns the numeric identifier n.
func NumericID(n uint32) Identifier { return Identifier{Kind: IDNumeric, Num: n} }

// NamedID returns the identifier naming s; s must be 1..255 bytes.
func NamedID(s string) (Identifier, error) {
	if len(s) == 0 || len(s) > 255 {
		return Identifier{}, fmt.Errorf("iggy wire: a name must be 1..255 bytes, %q has %d", s, len(s))
	}
	return Identifier{Kind: IDString, Str: s}, nil
}

// String returns the name, or the number in decimal.
func (id Identifier) String() string {
	if id.Kind == IDString {
		return id.Str
	}
	return strconv.FormatUint(uint64(id.Num), 10)
}

// Append appends the identifier's encoding: kind u8, length u8, value.
func (id Identifier) Append(b []byte) []byte {
	if id.Kind == IDString {
		return append(append(b, IDString, byte(len(id.Str))), id.Str...)
	}
	return appendU32(append(b, IDNumeric, 4), id.Num)
}

// Identifier reads an identifier, refusing a bad kind or length.
func (r *Reader) Identifier() Identifier {
	kind, n := r.U8(), int(r.U8())
	v := r.take(n, "identifier")
	if r.err != nil {
		return Identifier{}
	}
	switch {
	case kind == IDNumeric && n == 4:
		return Identifier{Kind: IDNumeric, Num: uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16 | uint32(v[3])<<24}
	case kind == IDString && n > 0:
		return Identifier{Kind: IDString, Str: string(v)}
	}
	r.Fail("identifier of kind %d and length %d", kind, n)
	return Identifier{}
}

// Consumer kinds: a single consumer, a consumer group, and (V012 only)
// externally managed group offsets.
const (
	ConsumerSingle   = 1
	ConsumerGroup    = 2
	ConsumerExternal = 3
)

// Consumer is whose offsets a poll or offset command concerns.
type Consumer struct {
	Kind uint8
	ID   Identifier
}

// Append appends kind u8 then the identifier.
func (c Consumer) Append(b []byte) []byte { return c.ID.Append(append(b, c.Kind)) }

// Consumer reads a consumer. max is the highest kind the protocol knows.
func (r *Reader) Consumer(max uint8) Consumer {
	k := r.U8()
	id := r.Identifier()
	if r.err == nil && (k < 1 || k > max) {
		r.Fail("consumer kind %d", k)
	}
	return Consumer{Kind: k, ID: id}
}

// appendOptPartition appends flag u8 · partition u32 (always 5 bytes).
func appendOptPartition(b []byte, p *uint32) []byte {
	if p == nil {
		return appendU32(append(b, 0), 0)
	}
	return appendU32(append(b, 1), *p)
}

// OptPartition reads flag u8 · partition u32; ok is the flag.
func (r *Reader) OptPartition() (p uint32, ok bool) {
	f := r.U8()
	p = r.U32()
	return p, f != 0
}

// Polling strategy kinds.
const (
	PollOffset    = 1
	PollTimestamp = 2
	PollFirst     = 3
	PollLast      = 4
	PollNext      = 5
)

// Poll is a PollMessages request body; its layout is the same in both
// protocols: Consumer · stream Identifier · topic Identifier · optional
// partition (5 B) · strategy kind u8 · value u64 · count u32 · auto_commit u8.
type Poll struct {
	Consumer      Consumer
	Stream, Topic Identifier
	Partition     *uint32
	Strategy      uint8
	Value         uint64
	Count         uint32
	AutoCommit    bool
}

// PollTailSize is the size of the part of a Poll body that follows the
// topic identifier.
const PollTailSize = 5 + 9 + 4 + 1

// Append appends the body; ValueAt and CountAt locate the fields a reused
// request patches in place.
func (p *Poll) Append(b []byte) []byte {
	b = p.Consumer.Append(b)
	b = p.Stream.Append(b)
	b = p.Topic.Append(b)
	b = appendOptPartition(b, p.Partition)
	b = appendU64(append(b, p.Strategy), p.Value)
	b = appendU32(b, p.Count)
	if p.AutoCommit {
		return append(b, 1)
	}
	return append(b, 0)
}

// PollValueAt and PollCountAt are the positions of the strategy value and
// the count counted back from the end of a Poll body.
const (
	PollValueFromEnd = 8 + 4 + 1
	PollCountFromEnd = 4 + 1
)

// ParsePoll decodes a Poll body; maxKind is the protocol's highest
// consumer kind.
func ParsePoll(b []byte, maxKind uint8) (Poll, error) {
	r := NewReader(b)
	var p Poll
	p.Consumer = r.Consumer(maxKind)
	p.Stream, p.Topic = r.Identifier(), r.Identifier()
	if part, ok := r.OptPartition(); ok {
		p.Partition = &part
	}
	p.Strategy = r.U8()
	p.Value = r.U64()
	p.Count = r.U32()
	p.AutoCommit = r.U8() != 0
	r.Done("poll")
	if r.err == nil && (p.Strategy < PollOffset || p.Strategy > PollNext) {
		r.Fail("polling strategy %d", p.Strategy)
	}
	return p, r.err
}

// OffsetRef is the part shared by the consumer-offset commands: Consumer ·
// stream · topic · optional partition.
type OffsetRef struct {
	Consumer      Consumer
	Stream, Topic Identifier
	Partition     *uint32
}

// Append appends the reference.
func (o *OffsetRef) Append(b []byte) []byte {
	b = o.Consumer.Append(b)
	b = o.Stream.Append(b)
	b = o.Topic.Append(b)
	return appendOptPartition(b, o.Partition)
}

func (r *Reader) offsetRef(maxKind uint8) OffsetRef {
	var o OffsetRef
	o.Consumer = r.Consumer(maxKind)
	o.Stream, o.Topic = r.Identifier(), r.Identifier()
	if p, ok := r.OptPartition(); ok {
		o.Partition = &p
	}
	return o
}

// StoreOffset is a StoreConsumerOffset body. Legacy: OffsetRef · offset
// u64. V012 appends a mandatory ack u8 (0 leader-local, 1 quorum).
type StoreOffset struct {
	OffsetRef
	Offset uint64
	Ack    uint8
}

// Append appends the body in protocol p's layout.
func (s *StoreOffset) Append(b []byte, p Protocol) []byte {
	b = appendU64(s.OffsetRef.Append(b), s.Offset)
	if p == V012 {
		b = append(b, s.Ack)
	}
	return b
}

// ParseStoreOffset decodes a StoreConsumerOffset body of protocol p.
func ParseStoreOffset(b []byte, p Protocol) (StoreOffset, error) {
	r := NewReader(b)
	var s StoreOffset
	s.OffsetRef = r.offsetRef(maxConsumerKind(p))
	s.Offset = r.U64()
	if p == V012 {
		s.Ack = r.U8()
	}
	r.Done("store consumer offset")
	return s, r.err
}

// OffsetInfo is a GetConsumerOffset reply (same in both protocols):
// partition u32 · current_offset u64 · stored_offset u64. An empty reply
// means no offset is stored.
type OffsetInfo struct {
	Partition     uint32
	CurrentOffset uint64
	StoredOffset  uint64
}

// Append appends the reply.
func (o OffsetInfo) Append(b []byte) []byte {
	return appendU64(appendU64(appendU32(b, o.Partition), o.CurrentOffset), o.StoredOffset)
}

// ParseOffsetInfo decodes a GetConsumerOffset reply; ok is false for the
// empty reply.
func ParseOffsetInfo(b []byte) (o OffsetInfo, ok bool, err error) {
	if len(b) == 0 {
		return o, false, nil
	}
	r := NewReader(b)
	o.Partition, o.CurrentOffset, o.StoredOffset = r.U32(), r.U64(), r.U64()
	r.Done("consumer offset")
	return o, r.err == nil, r.err
}

// ParseOffsetRef decodes a GetConsumerOffset body (or a V012
// DeleteConsumerOffset body without its ack when withAck is false).
func ParseOffsetRef(b []byte, p Protocol, withAck bool) (OffsetRef, uint8, error) {
	r := NewReader(b)
	o := r.offsetRef(maxConsumerKind(p))
	var ack uint8
	if withAck {
		ack = r.U8()
	}
	r.Done("consumer offset reference")
	return o, ack, r.err
}

func maxConsumerKind(p Protocol) uint8 {
	if p == V012 {
		return ConsumerExternal
	}
	return ConsumerGroup
}

// errShort is the error of a decoder given fewer bytes than a fixed part.
var errShort = errors.New("short")
