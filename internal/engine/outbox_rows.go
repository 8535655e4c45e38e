package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/rowenc"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// Outbox rows (docs/design.md §11). What a batch's emitting handlers (To,
// KeyBy) publish is written in the batch's commit to state.FamilyOutbox,
// under the source partition, as runs of consecutive messages, a row per
// run (at most outboxRowMessages messages and about outboxRowBytes of
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
	// originLen is the length of a strand-origin header and a message id.
	originLen = 16
	// Bounds of one row's run of messages.
	outboxRowMessages = 4096
	outboxRowBytes    = 1 << 20
	// outboxFlagSeq marks a message with a producer seq (HasSeq).
	outboxFlagSeq = 1
)

func outboxPrefix(source string) []byte {
	return append(rowenc.AppendString(nil, source), outboxRowMessage)
}

func outboxNextRow(source string) []byte {
	return append(rowenc.AppendString(nil, source), outboxRowNext)
}

func outboxRow(source string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(outboxPrefix(source), seq)
}

// originStream is the first half of the origins of one source partition of
// one topology.
func originStream(topology, source string, partition uint32) [8]byte {
	var o [8]byte
	binary.BigEndian.PutUint32(o[0:], xxh32.Sum([]byte(topology+"\x00"+source), 0))
	binary.BigEndian.PutUint32(o[4:], partition)
	return o
}

// appendBytes appends b prefixed with its length as a uvarint (as
// rowenc.AppendString, without converting b to a string).
func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// outboxEncoder encodes the runs of one batch's outbox rows into one
// buffer: begin starts a row, add appends a message, end closes the row and
// returns its value.
type outboxEncoder struct {
	buf   []byte
	start int      // where the current row's value starts in buf
	count int      // messages in the current row
	dests []string // the current row's destinations, by index
}

func (e *outboxEncoder) begin(origin [8]byte, dests []string) {
	e.start, e.count, e.dests = len(e.buf), 0, dests
	e.buf = append(e.buf, outboxVersion2)
	e.buf = append(e.buf, origin[:]...)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(dests)))
	for _, d := range dests {
		e.buf = rowenc.AppendString(e.buf, d)
	}
}

func (e *outboxEncoder) add(dest int, h *connector.Headers, payload []byte) {
	e.count++
	e.buf = binary.AppendUvarint(e.buf, uint64(dest))
	e.buf = appendBytes(e.buf, h.Key)
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(h.Tag))
	var flags byte
	if h.HasSeq {
		flags |= outboxFlagSeq
	}
	e.buf = append(e.buf, byte(h.Ordering), byte(h.Algebra), flags)
	if h.HasSeq {
		e.buf = binary.BigEndian.AppendUint64(e.buf, h.Seq)
	}
	e.buf = appendBytes(e.buf, payload)
}

// end returns the value of the current row: the header written by begin,
// the message count, then the messages. The count goes between them, so
// the messages are moved up by its width.
func (e *outboxEncoder) end(headerLen int) []byte {
	var cnt [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(cnt[:], uint64(e.count))
	msgsAt := e.start + headerLen
	e.buf = append(e.buf, cnt[:n]...)
	copy(e.buf[msgsAt+n:], e.buf[msgsAt:len(e.buf)-n])
	copy(e.buf[msgsAt:], cnt[:n])
	return e.buf[e.start:len(e.buf):len(e.buf)]
}

// outboxMessage builds the message of seq with strand headers h, and the
// given origin stream, appending its header fields to fields and their
// values to vals (both may be shared by many messages).
func outboxMessage(origin [8]byte, seq uint64, h *connector.Headers, payload []byte, fields []connector.Field, vals []byte) (connector.Message, []connector.Field, []byte, error) {
	a := msgArena{fields: fields, vals: vals}
	m, err := a.message(origin, seq, h, payload)
	return m, a.fields, a.vals, err
}

// msgArena holds the header fields of many outbox messages and the values
// they do not share with their message: a batch's messages take a few
// allocations, not a few per message. A header's key value is the
// message's key (the same bytes), and messages of one type, ordering and
// algebra share their type and props values.
type msgArena struct {
	fields []connector.Field
	vals   []byte
	// The type and props values of the last message, and what they encode.
	typ, props []byte
	tag        planner.Tag
	ordering   planner.Ordering
	algebra    algebra.Kind
}

// message builds the message of seq with strand headers h and the given
// origin stream.
func (a *msgArena) message(origin [8]byte, seq uint64, h *connector.Headers, payload []byte) (connector.Message, error) {
	if err := h.Validate(); err != nil {
		return connector.Message{}, err
	}
	var id [originLen]byte
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

// outboxRowMsg is one message decoded from an outbox row.
type outboxRowMsg struct {
	seq  uint64
	dest string
	msg  connector.Message
}

// decodeOutboxRow decodes the outbox row whose key holds seq: its
// messages in order. value must not change afterwards: the messages alias
// it. Counting only (msgs nil) skips building them.
func decodeOutboxRow(seq uint64, value []byte) ([]outboxRowMsg, error) {
	if len(value) == 0 {
		return nil, fmt.Errorf("outbox row %d: empty", seq)
	}
	switch value[0] {
	case outboxVersion1:
		dest, m, err := decodeOutboxMessage(value)
		if err != nil {
			return nil, fmt.Errorf("outbox row %d: %w", seq, err)
		}
		return []outboxRowMsg{{seq: seq, dest: dest, msg: m}}, nil
	case outboxVersion2:
	default:
		return nil, fmt.Errorf("outbox row %d: version %d, want %d or %d", seq, value[0], outboxVersion1, outboxVersion2)
	}
	r := outboxReader{b: value[1:]}
	origin := [8]byte(r.take(8))
	dests, n := r.runHeader()
	if r.err != nil {
		return nil, fmt.Errorf("outbox row %d: %w", seq, r.err)
	}
	if n == 0 || n > uint64(len(r.b)) || seq+n < seq {
		return nil, fmt.Errorf("outbox row %d: %d messages in %d bytes", seq, n, len(r.b))
	}
	out := make([]outboxRowMsg, 0, n)
	arena := msgArena{fields: make([]connector.Field, 0, 5*n), vals: make([]byte, 0, (originLen+8)*int(n)+64)}
	for i := range n {
		d := r.uvarint()
		var h connector.Headers
		h.Key = r.bytes()
		h.Tag = planner.Tag(binary.BigEndian.Uint32(r.take(4)))
		t := r.take(3)
		h.Ordering, h.Algebra = planner.Ordering(t[0]), algebra.Kind(t[1])
		flags := t[2]
		if flags&outboxFlagSeq != 0 {
			h.Seq, h.HasSeq = binary.BigEndian.Uint64(r.take(8)), true
		}
		payload := r.bytes()
		switch {
		case r.err != nil:
			return nil, fmt.Errorf("outbox row %d: message %d: %w", seq, i, r.err)
		case d >= uint64(len(dests)):
			return nil, fmt.Errorf("outbox row %d: message %d: destination %d of %d", seq, i, d, len(dests))
		case flags&^outboxFlagSeq != 0:
			return nil, fmt.Errorf("outbox row %d: message %d: flags %#x", seq, i, flags)
		}
		m, err := arena.message(origin, seq+i, &h, payload)
		if err != nil {
			return nil, fmt.Errorf("outbox row %d: message %d: %w", seq, i, err)
		}
		out = append(out, outboxRowMsg{seq: seq + i, dest: dests[d], msg: m})
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("outbox row %d: %d bytes after the messages", seq, len(r.b))
	}
	return out, nil
}

// outboxReader decodes a row of version 2; its byte strings alias the
// row. The first problem sticks in err; reads after it return zeros (take
// returns a zeroed slice of the length asked).
type outboxReader struct {
	b   []byte
	err error
}

func (r *outboxReader) take(n int) []byte {
	if r.err == nil && len(r.b) < n {
		r.err = rowenc.ErrShort
	}
	if r.err != nil {
		return make([]byte, n)
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *outboxReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = rowenc.ErrShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *outboxReader) bytes() []byte {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = rowenc.ErrShort
	}
	if r.err != nil {
		return nil
	}
	return r.take(int(n))
}

// runHeader reads the destinations and the message count of a row of
// version 2, after its origin.
func (r *outboxReader) runHeader() (dests []string, n uint64) {
	nd := r.uvarint()
	if r.err == nil && nd > uint64(len(r.b)) {
		r.err = fmt.Errorf("%d destinations in %d bytes", nd, len(r.b))
	}
	if r.err != nil {
		return nil, 0
	}
	dests = make([]string, 0, nd)
	for range nd {
		dests = append(dests, string(r.bytes()))
	}
	return dests, r.uvarint()
}

// outboxRowCount returns how many messages the outbox row holds, without
// decoding them.
func outboxRowCount(seq uint64, value []byte) (int, error) {
	if len(value) > 0 && value[0] == outboxVersion1 {
		return 1, nil
	}
	if len(value) == 0 || value[0] != outboxVersion2 {
		_, err := decodeOutboxRow(seq, value) // names the problem
		return 0, err
	}
	r := outboxReader{b: value[1:]}
	r.take(8)
	_, n := r.runHeader()
	if r.err != nil {
		return 0, fmt.Errorf("outbox row %d: %w", seq, r.err)
	}
	return int(min(n, uint64(len(value)))), nil
}

// decodeOutboxMessage decodes a row of version 1.
func decodeOutboxMessage(b []byte) (dest string, m connector.Message, err error) {
	r := rowenc.Reader{B: b}
	if v := r.Byte(); r.Err == nil && v != outboxVersion1 {
		return "", m, fmt.Errorf("outbox row version %d, want %d", v, outboxVersion1)
	}
	dest = r.String()
	m.Key = r.Bytes()
	if id := r.Bytes(); r.Err == nil && len(id) != originLen {
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

// loadOutbox reads the partition's next outbox sequence number and the
// origins it applied.
func (t *Task) loadOutbox(ctx context.Context) error {
	t.outNext = 1
	if t.src.emits {
		v, ok, err := t.db.Row(state.FamilyOutbox, t.partition, outboxNextRow(t.src.name))
		if err != nil {
			return err
		}
		if ok {
			if len(v) != 8 {
				return fmt.Errorf("outbox sequence row of %d bytes", len(v))
			}
			t.outNext = binary.BigEndian.Uint64(v)
		}
		t.origin = originStream(t.prog.name, t.src.name, t.partition)
	}
	prefix := rowenc.AppendString(nil, t.src.name)
	err := t.db.Rows(ctx, state.FamilyOrigins, t.partition, func(key, value []byte) error {
		if bytes.HasPrefix(key, prefix) && len(key) == len(prefix)+originLen && isReplayOrigin(key[len(prefix):]) {
			if t.replayed == nil {
				t.replayed = map[[originLen]byte]struct{}{}
			}
			t.replayed[[originLen]byte(key[len(prefix):])] = struct{}{}
			return nil
		}
		if !bytes.HasPrefix(key, prefix) || len(key) != len(prefix)+8 || len(value) != 8 {
			return nil
		}
		if t.origins == nil {
			t.origins = map[[8]byte]uint64{}
		}
		t.origins[[8]byte(key[len(prefix):])] = binary.BigEndian.Uint64(value)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read origins: %w", err)
	}
	return nil
}

// duplicate reports whether r, read from the log (not a parked row), is an
// outbox message this partition has applied already, and otherwise notes
// its origin in the batch.
func (b *batch) duplicate(r *connector.Record) bool {
	o := r.Headers.Origin
	if len(o) != originLen {
		return false
	}
	if isReplayOrigin(o) {
		id := [originLen]byte(o)
		if _, ok := b.t.replayed[id]; ok {
			return true
		}
		if slices.Contains(b.replays, id) {
			return true
		}
		b.replays = append(b.replays, id)
		return false
	}
	s, seq := [8]byte(o[:8]), binary.BigEndian.Uint64(o[8:])
	last, ok := b.origins[s]
	if !ok {
		last, ok = b.t.origins[s]
	}
	if ok && seq <= last {
		return true
	}
	if b.origins == nil {
		b.origins = map[[8]byte]uint64{}
	}
	b.origins[s] = seq
	return false
}

// writeOutbox writes what the applied records of b publish as outbox rows,
// in record order, and the origins b saw; the Task takes both over in
// applyStaged. The rows and the messages handed to the publisher share a
// few allocations per batch: a batch can stage tens of thousands of
// messages.
func (t *Task) writeOutbox(b *batch, res *Result) {
	for s, seq := range b.origins {
		key := append(rowenc.AppendString(nil, t.src.name), s[:]...)
		b.tx.PutRow(state.FamilyOrigins, t.partition, key, binary.BigEndian.AppendUint64(nil, seq))
	}
	for _, id := range b.replays {
		key := append(rowenc.AppendString(nil, t.src.name), id[:]...)
		b.tx.PutRow(state.FamilyOrigins, t.partition, key, binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())))
	}
	if b.emits == nil {
		return
	}
	n, size, seqs := 0, 0, 0
	var dests []string
	var perDest []int // messages per destination, then where each one's go next
	for i := range b.records {
		if b.status[i] != statusApplied || b.replayed(i) {
			continue
		}
		for j := range b.emits[i] {
			em := &b.emits[i][j]
			n++
			size += 32 + len(em.key) + len(em.payload)
			if em.hasSeq {
				seqs++
			}
			d := slices.Index(dests, em.dest)
			if d < 0 {
				d = len(dests)
				dests = append(dests, em.dest)
				perDest = append(perDest, 0)
			}
			perDest[d]++
		}
	}
	if n == 0 {
		return
	}
	// The messages, laid out per destination, each destination's in seq
	// order (sendRows hands them to the sinks as they are).
	at := 0
	for d, c := range perDest {
		perDest[d] = at
		at += c
	}
	msgs := make([]connector.Message, n)
	rows := make([]outRow, 0, n)
	arena := msgArena{fields: make([]connector.Field, 0, n*4+seqs), vals: make([]byte, 0, n*originLen+seqs*8+64)}
	enc := outboxEncoder{buf: make([]byte, 0, size+(n/outboxRowMessages+1)*(64+len(dests)*64))}
	headerLen := 0
	var key []byte
	rowBytes := 0
	next := t.outNext
	endRow := func() {
		b.tx.AppendRow(state.FamilyOutbox, t.partition, key, enc.end(headerLen))
		rows[len(rows)-1].last = true
	}
	for i := range b.records {
		if b.status[i] != statusApplied || b.replayed(i) {
			continue
		}
		for j := range b.emits[i] {
			em := &b.emits[i][j]
			if key != nil && (enc.count == outboxRowMessages || rowBytes >= outboxRowBytes) {
				endRow()
				key = nil
			}
			if key == nil {
				key = outboxRow(t.src.name, next)
				before := len(enc.buf)
				enc.begin(t.origin, dests)
				headerLen, rowBytes = len(enc.buf)-before, 0
			}
			h := em.headers()
			m, err := arena.message(t.origin, next, &h, em.payload)
			if err != nil {
				// The emitting handler validated the envelope; a failure
				// here is a bug, and the batch must not commit.
				b.setFatal(fmt.Errorf("outbox message of offset %d: %w", b.records[i].Offset, err))
				return
			}
			d := slices.Index(dests, em.dest)
			enc.add(d, &h, em.payload)
			rowBytes += len(em.payload)
			mi := perDest[d]
			perDest[d]++
			msgs[mi] = m
			rows = append(rows, outRow{key: key, order: next, dest: em.dest, msgs: msgs, mi: mi, size: len(m.Payload)})
			next++
		}
	}
	endRow()
	res.outbox = rows
	res.Emitted = len(rows)
	b.tx.PutRow(state.FamilyOutbox, t.partition, outboxNextRow(t.src.name), binary.BigEndian.AppendUint64(nil, next))
	b.outNext = next
}

// applyOutbox takes over a committed batch's outbox sequence and origins.
func (t *Task) applyOutbox(b *batch) {
	if b.outNext != 0 {
		t.outNext = b.outNext
	}
	if len(b.origins) > 0 && t.origins == nil {
		t.origins = map[[8]byte]uint64{}
	}
	for s, seq := range b.origins {
		t.origins[s] = seq
	}
	if len(b.replays) > 0 && t.replayed == nil {
		t.replayed = map[[originLen]byte]struct{}{}
	}
	for _, id := range b.replays {
		t.replayed[id] = struct{}{}
	}
}
