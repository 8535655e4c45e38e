package wire

import (
	"encoding/binary"
)

// Legacy framing (Iggy server 0.7/0.8).
//
// Request: length u32 (4 + body) · code u32 · body.
// Reply: status u32 (0 = OK, else an Iggy error code) · length u32 · body
// (empty with an error status).
const LegacyHeaderSize = 8

// PutLegacyRequestHeader writes the 8-byte request header for a body of n
// bytes into h.
func PutLegacyRequestHeader(h []byte, code Code, n int) {
	binary.LittleEndian.PutUint32(h[0:], uint32(4+n))
	binary.LittleEndian.PutUint32(h[4:], uint32(code))
}

// AppendLegacyRequest appends a whole request frame.
func AppendLegacyRequest(b []byte, code Code, body []byte) []byte {
	b = appendU32(appendU32(b, uint32(4+len(body))), uint32(code))
	return append(b, body...)
}

// ParseLegacyRequestHeader returns the code and body length of a request
// header; a length below 4 is malformed (the server answers
// InvalidCommand).
func ParseLegacyRequestHeader(h []byte) (code Code, n int, err error) {
	r := NewReader(h[:min(len(h), LegacyHeaderSize)])
	l, c := r.U32(), r.U32()
	if r.err == nil && l < 4 {
		r.Fail("legacy request length %d", l)
	}
	return Code(c), int(l) - 4, r.err
}

// AppendLegacyReply appends a reply frame.
func AppendLegacyReply(b []byte, st Status, body []byte) []byte {
	return append(appendU32(appendU32(b, uint32(st)), uint32(len(body))), body...)
}

// ParseLegacyReplyHeader returns the status and body length of a reply
// header. A legacy server sends no body with an error status; a header
// that claims one is malformed.
func ParseLegacyReplyHeader(h []byte) (Status, uint32, error) {
	r := NewReader(h[:min(len(h), LegacyHeaderSize)])
	st, n := Status(r.U32()), r.U32()
	if r.err == nil && st != 0 && n != 0 {
		r.Fail("error reply %d carries %d bytes", st, n)
	}
	return st, n, r.err
}

// Login is a login request: a user and password, or a personal access
// token when Token is set.
type Login struct {
	User, Password string
	Token          string
	// Version and Context are the legacy LoginUser's client version and
	// context strings (the 0.8 SDK sends "0.8.0" and "").
	Version, Context string
}

// AppendLegacy appends the legacy body: LoginUser (38) is Name user ·
// u8-length password · u32-length version · u32-length context;
// LoginWithPersonalAccessToken (44) is Name token. It returns the code.
func (l *Login) AppendLegacy(b []byte) ([]byte, Code) {
	if l.Token != "" {
		return appendName(b, l.Token), CodeLoginWithToken
	}
	b = appendName(b, l.User)
	b = append(append(b, byte(len(l.Password))), l.Password...)
	return appendStr32(appendStr32(b, l.Version), l.Context), CodeLoginUser
}

// ParseLegacyLogin decodes a LoginUser body.
func ParseLegacyLogin(b []byte) (Login, error) {
	r := NewReader(b)
	var l Login
	l.User = r.Name()
	l.Password = r.Str8()
	l.Version = r.Str32()
	l.Context = r.Str32()
	r.Done("login")
	return l, r.err
}

// ParseLegacyLoginReply decodes a login reply: the user id u32.
func ParseLegacyLoginReply(b []byte) (uint32, error) {
	r := NewReader(b)
	id := r.U32()
	r.Done("login reply")
	return id, r.err
}

// Legacy messages. A message is a 64-byte header (checksum u64 · id u128 ·
// offset u64 · timestamp u64 · origin_timestamp u64 · user_headers_length
// u32 · payload_length u32 · reserved u64), then the payload, then the user
// headers. A SendMessages body is metadata_length u32 · stream · topic ·
// Partitioning · messages_count u32 · an index of 16-byte entries (u32 0 ·
// u32 end of message i counted from the first message · u64 0) · the
// messages. A PollMessages reply is partition u32 · current_offset u64 ·
// count u32 · the messages.
const (
	LegacyMessageHeaderSize = 64
	LegacyIndexSize         = 16
	PollPrefixSize          = 16
)

// Message is one message as the connector and the broker see it.
type Message struct {
	Checksum        uint64
	ID              [16]byte
	Offset          uint64
	Timestamp       uint64 // server append time, µs
	OriginTimestamp uint64 // producer time, µs
	Payload         []byte
	Headers         []byte // encoded user headers
}

// Size returns the legacy encoded size of a message with p payload and h
// header bytes.
func LegacyMessageSize(p, h int) int { return LegacyMessageHeaderSize + p + h }

// AppendPartitioning appends Partitioning PartitionId(p): kind 2 · len 4 ·
// u32.
func AppendPartitioning(b []byte, p uint32) []byte { return appendU32(append(b, 2, 4), p) }

// PartitioningSize is the size of AppendPartitioning's output.
const PartitioningSize = 6

// LegacySendSize returns the size of a legacy SendMessages body whose
// identifiers take ids bytes, for n messages whose payloads and headers
// take data bytes in all.
func LegacySendSize(ids, n, data int) int {
	return 4 + ids + PartitioningSize + 4 + n*(LegacyIndexSize+LegacyMessageHeaderSize) + data
}

// AppendLegacySendHead appends everything of a legacy SendMessages body
// before its index: metadata_length · ids (stream then topic identifier) ·
// Partitioning(partition) · count.
func AppendLegacySendHead(b, ids []byte, partition uint32, count int) []byte {
	b = appendU32(b, uint32(len(ids)+PartitioningSize+4))
	b = AppendPartitioning(append(b, ids...), partition)
	return appendU32(b, uint32(count))
}

// AppendLegacyIndex appends one index entry: the end of a message counted
// from the first.
func AppendLegacyIndex(b []byte, end uint32) []byte {
	return appendU64(appendU32(appendU32(b, 0), end), 0)
}

// AppendLegacyMessage appends a message with checksum, offset and
// timestamp zero (the server sets them).
func AppendLegacyMessage(b []byte, id *[16]byte, origin uint64, payload, headers []byte) []byte {
	b = appendU64(b, 0)
	b = append(b, id[:]...)
	b = appendU64(appendU64(appendU64(b, 0), 0), origin)
	b = appendU32(appendU32(b, uint32(len(headers))), uint32(len(payload)))
	b = appendU64(b, 0)
	return append(append(b, payload...), headers...)
}

// AppendStoredLegacyMessage appends a message with every field as given
// (the broker's poll replies and golden tests).
func AppendStoredLegacyMessage(b []byte, m *Message) []byte {
	b = appendU64(b, m.Checksum)
	b = append(b, m.ID[:]...)
	b = appendU64(appendU64(appendU64(b, m.Offset), m.Timestamp), m.OriginTimestamp)
	b = appendU32(appendU32(b, uint32(len(m.Headers))), uint32(len(m.Payload)))
	b = appendU64(b, 0)
	return append(append(b, m.Payload...), m.Headers...)
}

// NextLegacyMessage decodes the message at the start of b and returns it
// with its encoded size. Payload and Headers alias b.
func NextLegacyMessage(b []byte) (Message, int, error) {
	var m Message
	r := NewReader(b)
	m.Checksum = r.U64()
	copy(m.ID[:], r.Bytes(16))
	m.Offset, m.Timestamp, m.OriginTimestamp = r.U64(), r.U64(), r.U64()
	hl, pl := r.U32(), r.U32()
	r.U64()
	if r.err != nil {
		return m, 0, r.err
	}
	if uint64(pl)+uint64(hl) > uint64(r.Len()) {
		r.Fail("message at offset %d: %d payload and %d header bytes run past the end (%d left)", m.Offset, pl, hl, r.Len())
		return m, 0, r.err
	}
	m.Payload = r.Bytes(int(pl))
	m.Headers = r.Bytes(int(hl))
	return m, r.Offset(), nil
}

// PollPrefix is the fixed start of a PollMessages reply.
type PollPrefix struct {
	Partition     uint32
	CurrentOffset uint64
	Count         uint32
}

// Append appends the 16-byte prefix.
func (p PollPrefix) Append(b []byte) []byte {
	return appendU32(appendU64(appendU32(b, p.Partition), p.CurrentOffset), p.Count)
}

// ParsePollPrefix decodes the 16-byte prefix of a poll reply.
func ParsePollPrefix(b []byte) (PollPrefix, error) {
	r := NewReader(b[:min(len(b), PollPrefixSize)])
	p := PollPrefix{Partition: r.U32(), CurrentOffset: r.U64(), Count: r.U32()}
	return p, r.err
}

// ParseLegacyPollReply decodes a whole legacy poll reply. An empty body
// gives no messages (as the server answers a consumer with nothing
// assigned).
func ParseLegacyPollReply(b []byte) (PollPrefix, []Message, error) {
	if len(b) == 0 {
		return PollPrefix{}, nil, nil
	}
	p, err := ParsePollPrefix(b)
	if err != nil {
		return p, nil, err
	}
	rest := b[PollPrefixSize:]
	if uint64(p.Count) > uint64(len(rest)/LegacyMessageHeaderSize) {
		return p, nil, NewReaderErr("poll reply of %d bytes claims %d messages", len(b), p.Count)
	}
	msgs := make([]Message, 0, p.Count)
	for len(rest) > 0 {
		m, n, err := NextLegacyMessage(rest)
		if err != nil {
			return p, nil, err
		}
		msgs = append(msgs, m)
		rest = rest[n:]
	}
	if len(msgs) != int(p.Count) {
		return p, nil, NewReaderErr("poll reply claims %d messages and holds %d", p.Count, len(msgs))
	}
	return p, msgs, nil
}

// NewReaderErr returns an error wrapping ErrMalformed.
func NewReaderErr(format string, args ...any) error {
	var r Reader
	r.Fail(format, args...)
	return r.err
}

// LegacySend is a decoded legacy SendMessages body.
type LegacySend struct {
	Stream, Topic Identifier
	Kind          uint8 // partitioning kind
	Value         []byte
	Messages      []Message
}

// ParseLegacySend decodes a legacy SendMessages body (used by tests and the
// fuzz target; the broker keeps its own validating parser, which answers
// the server's exact statuses).
func ParseLegacySend(b []byte) (LegacySend, error) {
	var s LegacySend
	r := NewReader(b)
	ml := int(r.U32())
	meta := NewReader(r.Bytes(ml))
	if r.err != nil {
		return s, r.err
	}
	s.Stream, s.Topic = meta.Identifier(), meta.Identifier()
	s.Kind = meta.U8()
	s.Value = meta.Bytes(int(meta.U8()))
	n := meta.U32()
	meta.Done("send metadata")
	if meta.err != nil {
		return s, meta.err
	}
	if uint64(n)*(LegacyIndexSize+LegacyMessageHeaderSize) > uint64(r.Len()) {
		return s, NewReaderErr("send of %d bytes claims %d messages", len(b), n)
	}
	index := r.Bytes(int(n) * LegacyIndexSize)
	msgs := r.Rest()
	prev := 0
	for i := range int(n) {
		end := int(binary.LittleEndian.Uint32(index[i*LegacyIndexSize+4:]))
		if end < prev || end > len(msgs) {
			return s, NewReaderErr("send index entry %d ends at %d", i, end)
		}
		m, k, err := NextLegacyMessage(msgs[prev:end])
		if err != nil {
			return s, err
		}
		if k != end-prev {
			return s, NewReaderErr("send message %d: %d bytes indexed, %d encoded", i, end-prev, k)
		}
		s.Messages = append(s.Messages, m)
		prev = end
	}
	if prev != len(msgs) {
		return s, NewReaderErr("send: %d bytes after the last indexed message", len(msgs)-prev)
	}
	return s, nil
}
