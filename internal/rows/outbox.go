package rows

import (
	"encoding/binary"
	"fmt"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// Outbox rows (docs/design.md §11). What a batch's emitting handlers (To,
// KeyBy) publish is written in the batch's commit to state.FamilyOutbox,
// under the source partition, as runs of consecutive messages, a row per
// run (at most OutboxRowMessages messages and about OutboxRowBytes of
// payload; a batch writes one row or a few):
//
//	key:   AppendString(source) 0x00 seq(u64 BE)
//	value: version(2) origin(8) uvarint(#dests) {AppendString(dest)}
//	       uvarint(#messages) #messages × {uvarint(dest index) AppendString(key)
//	       tag(u32 BE) ordering(1) algebra(1) flags(1) [seq(u64 BE) if flags&1]
//	       AppendString(payload)}
//
// seq is the first message's; message i of the row has seq+i. seq numbers
// the partition's outbox messages from 1 in commit order; the row
// AppendString(source) 0x01 holds the next one. A message's strand headers
// are its key, tag, ordering, algebra and (flags&1) producer seq, written as
// connector.Headers.AppendFields writes them; its id and its strand-origin
// header are its origin: the row's origin stream, xxh32(topology "\x00"
// source) (u32 BE) and partition (u32 BE), then its seq (u64 BE). Stores
// written before runs hold rows of version 1, one message each (its seq is
// the key's), which are still read:
//
//	value: version(1) AppendString(dest) AppendString(key) AppendString(id)
//	       uvarint(#headers) {AppendString(name) AppendString(value)} AppendString(payload)
//
// The outbox publisher (outbox.go) sends messages in seq order and deletes
// a row once the broker has all of its messages. A run per row rather
// than a message per row keeps the store's work per message (write-ahead
// log entries, memtable entries, tombstones, flushes) to a fraction.
//
// A topology that reads a topic carrying origins keeps, per partition and
// per origin stream (the first 8 bytes of the origin), the highest seq it
// applied, in state.FamilyOrigins:
//
//	key:   AppendString(source) origin[0:8]
//	value: seq(u64 BE)
//
// and drops a record whose seq is not above it: a message published twice
// (a crash between publishing and deleting its row, or a send of a dead
// process landing late) is applied once. This relies on the publisher
// sending one origin's messages to one destination partition in seq order,
// which it does.

const (
	outboxRowMessage = 0x00
	outboxRowNext    = 0x01
	outboxVersion1   = 1 // one message per row (read only)
	outboxVersion2   = 2 // a run of messages per row
	// OriginLen is the length of a strand-origin header and a message id.
	OriginLen = 16
	// Bounds of one row's run of messages.
	OutboxRowMessages = 4096
	OutboxRowBytes    = 1 << 20
	// outboxFlagSeq marks a message with a producer seq (HasSeq).
	outboxFlagSeq = 1
)

// OutboxPrefix is the start of the keys of a source partition's outbox
// rows (after the partition).
func OutboxPrefix(source string) []byte {
	return append(AppendString(nil, source), outboxRowMessage)
}

// OutboxNextKey is the key of the row holding a source partition's next
// outbox seq.
func OutboxNextKey(source string) []byte {
	return append(AppendString(nil, source), outboxRowNext)
}

// OutboxKey is the key of the outbox row whose first message has seq.
func OutboxKey(source string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(OutboxPrefix(source), seq)
}

// OriginStream is the first half of the origins of one source partition of
// one topology.
func OriginStream(topology, source string, partition uint32) [8]byte {
	var o [8]byte
	binary.BigEndian.PutUint32(o[0:], xxh32.Sum([]byte(topology+"\x00"+source), 0))
	binary.BigEndian.PutUint32(o[4:], partition)
	return o
}

// OutboxEncoder encodes the runs of one batch's outbox rows into one
// buffer: Begin starts a row, Add appends a message, End closes the row and
// returns its value. The zero value is ready to use.
type OutboxEncoder struct {
	buf       []byte
	start     int      // where the current row's value starts in buf
	headerLen int      // the length of the current row's header
	count     int      // messages in the current row
	dests     []string // the current row's destinations, by index
}

// NewOutboxEncoder returns an encoder whose buffer holds size bytes before
// it grows.
func NewOutboxEncoder(size int) *OutboxEncoder {
	return &OutboxEncoder{buf: make([]byte, 0, size)}
}

// Count returns how many messages the current row holds.
func (e *OutboxEncoder) Count() int { return e.count }

// Begin starts a row of messages of the origin stream origin, sent to
// dests (Add names a destination by its index in dests).
func (e *OutboxEncoder) Begin(origin [8]byte, dests []string) {
	e.start, e.count, e.dests = len(e.buf), 0, dests
	e.buf = append(e.buf, outboxVersion2)
	e.buf = append(e.buf, origin[:]...)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(dests)))
	for _, d := range dests {
		e.buf = AppendString(e.buf, d)
	}
	e.headerLen = len(e.buf) - e.start
}

// Add appends a message for dests[dest] with strand headers h.
func (e *OutboxEncoder) Add(dest int, h *connector.Headers, payload []byte) {
	e.count++
	e.buf = binary.AppendUvarint(e.buf, uint64(dest))
	e.buf = AppendBytes(e.buf, h.Key)
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(h.Tag))
	var flags byte
	if h.HasSeq {
		flags |= outboxFlagSeq
	}
	e.buf = append(e.buf, byte(h.Ordering), byte(h.Algebra), flags)
	if h.HasSeq {
		e.buf = binary.BigEndian.AppendUint64(e.buf, h.Seq)
	}
	e.buf = AppendBytes(e.buf, payload)
}

// End returns the value of the current row: the header written by Begin,
// the message count, then the messages. The count goes between them, so
// the messages are moved up by its width.
func (e *OutboxEncoder) End() []byte {
	var cnt [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(cnt[:], uint64(e.count))
	msgsAt := e.start + e.headerLen
	e.buf = append(e.buf, cnt[:n]...)
	copy(e.buf[msgsAt+n:], e.buf[msgsAt:len(e.buf)-n])
	copy(e.buf[msgsAt:], cnt[:n])
	return e.buf[e.start:len(e.buf):len(e.buf)]
}

// OutboxMessage builds the message of seq with strand headers h, and the
// given origin stream, appending its header fields to fields and their
// values to vals (both may be shared by many messages).
func OutboxMessage(origin [8]byte, seq uint64, h *connector.Headers, payload []byte, fields []connector.Field, vals []byte) (connector.Message, []connector.Field, []byte, error) {
	a := MsgArena{fields: fields, vals: vals}
	m, err := a.Message(origin, seq, h, payload)
	return m, a.fields, a.vals, err
}

// MsgArena holds the header fields of many outbox messages and the values
// they do not share with their message: a batch's messages take a few
// allocations, not a few per message. A header's key value is the
// message's key (the same bytes), and messages of one type, ordering and
// algebra share their type and props values.
type MsgArena struct {
	fields []connector.Field
	vals   []byte
	// The type and props values of the last message, and what they encode.
	typ, props []byte
	tag        planner.Tag
	ordering   planner.Ordering
	algebra    algebra.Kind
}

// NewMsgArena returns an arena with room for the given number of header
// fields and bytes of header values.
func NewMsgArena(fields, vals int) *MsgArena {
	return &MsgArena{fields: make([]connector.Field, 0, fields), vals: make([]byte, 0, vals)}
}

// Message builds the message of seq with strand headers h and the given
// origin stream.
func (a *MsgArena) Message(origin [8]byte, seq uint64, h *connector.Headers, payload []byte) (connector.Message, error) {
	if err := h.Validate(); err != nil {
		return connector.Message{}, err
	}
	var id [OriginLen]byte
	copy(id[:], origin[:])
	binary.BigEndian.PutUint64(id[8:], seq)
	if a.typ == nil || a.tag != h.Tag || a.ordering != h.Ordering || a.algebra != h.Algebra {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(h.Tag))
		a.typ = sub(&a.vals, b[:])
		a.props = sub(&a.vals, []byte{connector.PropsVersion, byte(h.Ordering), byte(h.Algebra)})
		a.tag, a.ordering, a.algebra = h.Tag, h.Ordering, h.Algebra
	}
	// As connector.Headers.AppendFields: key, type, props, seq; then the
	// origin.
	key := h.Key[:len(h.Key):len(h.Key)]
	fstart := len(a.fields)
	a.fields = append(a.fields,
		connector.Field{Name: connector.HeaderKey, Value: key},
		connector.Field{Name: connector.HeaderType, Value: a.typ},
		connector.Field{Name: connector.HeaderProps, Value: a.props},
	)
	if h.HasSeq {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], h.Seq)
		a.fields = append(a.fields, connector.Field{Name: connector.HeaderSeq, Value: sub(&a.vals, b[:])})
	}
	a.fields = append(a.fields, connector.Field{Name: connector.HeaderOrigin, Value: sub(&a.vals, id[:])})
	end := len(a.fields)
	return connector.Message{Key: key, ID: id, Headers: a.fields[fstart:end:end], Payload: payload}, nil
}

// sub appends b to *vals and returns the appended bytes (capacity capped,
// so that later appends never write into them).
func sub(vals *[]byte, b []byte) []byte {
	start := len(*vals)
	*vals = append(*vals, b...)
	return (*vals)[start:len(*vals):len(*vals)]
}

// OutboxMsg is one message decoded from an outbox row.
type OutboxMsg struct {
	Seq  uint64
	Dest string
	Msg  connector.Message
}

// DecodeOutbox decodes the outbox row whose key holds seq: its
// messages in order. value must not change afterwards: the messages alias
// it.
func DecodeOutbox(seq uint64, value []byte) ([]OutboxMsg, error) {
	if len(value) == 0 {
		return nil, fmt.Errorf("outbox row %d: empty", seq)
	}
	switch value[0] {
	case outboxVersion1:
		dest, m, err := decodeOutboxMessage(value)
		if err != nil {
			return nil, fmt.Errorf("outbox row %d: %w", seq, err)
		}
		return []OutboxMsg{{Seq: seq, Dest: dest, Msg: m}}, nil
	case outboxVersion2:
	default:
		return nil, fmt.Errorf("outbox row %d: version %d, want %d or %d", seq, value[0], outboxVersion1, outboxVersion2)
	}
	r := Reader{B: value[1:]}
	origin := [8]byte(r.Take(8))
	dests, n := outboxRunHeader(&r)
	if r.Err != nil {
		return nil, fmt.Errorf("outbox row %d: %w", seq, r.Err)
	}
	if n == 0 || n > uint64(len(r.B)) || seq+n < seq {
		return nil, fmt.Errorf("outbox row %d: %d messages in %d bytes", seq, n, len(r.B))
	}
	out := make([]OutboxMsg, 0, n)
	arena := NewMsgArena(5*int(n), (OriginLen+8)*int(n)+64)
	for i := range n {
		d := r.Uvarint()
		var h connector.Headers
		h.Key = r.View()
		h.Tag = planner.Tag(binary.BigEndian.Uint32(r.Take(4)))
		t := r.Take(3)
		h.Ordering, h.Algebra = planner.Ordering(t[0]), algebra.Kind(t[1])
		flags := t[2]
		if flags&outboxFlagSeq != 0 {
			h.Seq, h.HasSeq = binary.BigEndian.Uint64(r.Take(8)), true
		}
		payload := r.View()
		switch {
		case r.Err != nil:
			return nil, fmt.Errorf("outbox row %d: message %d: %w", seq, i, r.Err)
		case d >= uint64(len(dests)):
			return nil, fmt.Errorf("outbox row %d: message %d: destination %d of %d", seq, i, d, len(dests))
		case flags&^outboxFlagSeq != 0:
			return nil, fmt.Errorf("outbox row %d: message %d: flags %#x", seq, i, flags)
		}
		m, err := arena.Message(origin, seq+i, &h, payload)
		if err != nil {
			return nil, fmt.Errorf("outbox row %d: message %d: %w", seq, i, err)
		}
		out = append(out, OutboxMsg{Seq: seq + i, Dest: dests[d], Msg: m})
	}
	if len(r.B) != 0 {
		return nil, fmt.Errorf("outbox row %d: %d bytes after the messages", seq, len(r.B))
	}
	return out, nil
}

// outboxRunHeader reads the destinations and the message count of a row of
// version 2, after its origin.
func outboxRunHeader(r *Reader) (dests []string, n uint64) {
	nd := r.Uvarint()
	if r.Err == nil && nd > uint64(len(r.B)) {
		r.Err = fmt.Errorf("%d destinations in %d bytes", nd, len(r.B))
	}
	if r.Err != nil {
		return nil, 0
	}
	dests = make([]string, 0, nd)
	for range nd {
		dests = append(dests, string(r.View()))
	}
	return dests, r.Uvarint()
}

// OutboxCount returns how many messages the outbox row holds, without
// decoding them.
func OutboxCount(seq uint64, value []byte) (int, error) {
	if len(value) > 0 && value[0] == outboxVersion1 {
		return 1, nil
	}
	if len(value) == 0 || value[0] != outboxVersion2 {
		_, err := DecodeOutbox(seq, value) // names the problem
		return 0, err
	}
	r := Reader{B: value[1:]}
	r.Take(8)
	_, n := outboxRunHeader(&r)
	if r.Err != nil {
		return 0, fmt.Errorf("outbox row %d: %w", seq, r.Err)
	}
	return int(min(n, uint64(len(value)))), nil
}

// decodeOutboxMessage decodes a row of version 1.
func decodeOutboxMessage(b []byte) (dest string, m connector.Message, err error) {
	r := Reader{B: b}
	if v := r.Byte(); r.Err == nil && v != outboxVersion1 {
		return "", m, fmt.Errorf("outbox row version %d, want %d", v, outboxVersion1)
	}
	dest = r.String()
	m.Key = r.Bytes()
	if id := r.Bytes(); r.Err == nil && len(id) != OriginLen {
		return "", m, fmt.Errorf("outbox row with a message id of %d bytes", len(id))
	} else {
		copy(m.ID[:], id)
	}
	n := r.Uvarint()
	if n > 1<<16 {
		return "", m, fmt.Errorf("outbox row with %d headers", n)
	}
	for range n {
		name := r.String()
		m.Headers = append(m.Headers, connector.Field{Name: name, Value: r.Bytes()})
	}
	m.Payload = r.Bytes()
	if r.Err == nil && len(r.B) != 0 {
		r.Err = fmt.Errorf("%d bytes after the payload", len(r.B))
	}
	if r.Err != nil {
		return "", connector.Message{}, fmt.Errorf("outbox row: %w", r.Err)
	}
	return dest, m, nil
}

// OriginsPrefix is the start of the keys of a source partition's
// state.FamilyOrigins rows (after the partition): the highest seq applied
// per origin stream, and the replay origins applied.
func OriginsPrefix(source string) []byte { return AppendString(nil, source) }

// OriginKey is the state.FamilyOrigins key of an origin stream (8 bytes) or
// of a replay origin (OriginLen bytes) of source.
func OriginKey(source string, origin []byte) []byte {
	return append(AppendString(nil, source), origin...)
}

// ParseOutboxKey splits the key of a state.FamilyOutbox row (after the
// partition): its source and, for a row of messages, its first message's
// seq (messages false: the next-seq row).
func ParseOutboxKey(key []byte) (source string, seq uint64, messages bool, err error) {
	r := Reader{B: key}
	source = r.String()
	kind := r.Byte()
	if r.Err != nil {
		return "", 0, false, fmt.Errorf("outbox row key %x: %w", key, r.Err)
	}
	if kind != outboxRowMessage || len(r.B) != 8 {
		return source, 0, false, nil
	}
	return source, binary.BigEndian.Uint64(r.B), true, nil
}
