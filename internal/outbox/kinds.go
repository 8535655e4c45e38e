package outbox

import (
	"github.com/strand-io/strand/internal/executor"

	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// pendingDeadLetter is one committed dead-letter row of the processor's source.
type pendingDeadLetter struct {
	key    []byte
	letter deadletter.Letter
}

var errStopRows = errors.New("stop")

// deadLetterRows reads the committed dead-letter rows of the processor's
// source in partition pt, in offset order: at most limit rows and about
// outboxRoundBytes of payload (limit 0: all).
func (p *env) deadLetterRows(ctx context.Context, pt uint32, limit int) ([]pendingDeadLetter, error) {
	prefix := rows.DeadLettersPrefix(p.name)
	var out []pendingDeadLetter
	size := 0
	err := p.db.Rows(ctx, state.FamilyDeadLetters, pt, func(key, value []byte) error {
		if !rows.IsDeadLetterKey(prefix, key) {
			if len(out) > 0 {
				return errStopRows // past this source's rows
			}
			return nil
		}
		var d deadletter.Letter
		if err := rows.DecodeLetter(value, &d); err != nil {
			return strerr.Errorf("strand: source %q partition %d: dead-letter row %x: %w", p.name, pt, key, err)
		}
		out = append(out, pendingDeadLetter{key: bytes.Clone(key), letter: d})
		size += len(d.Payload)
		if limit > 0 && (len(out) >= limit || size >= outboxRoundBytes) {
			return errStopRows
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopRows) {
		return nil, err
	}
	return out, nil
}

// deadLetterMessage is d.Message() made acceptable to any broker strand
// publishes to: header values of 1..255 bytes (an empty one, such as the
// error text of a dead letter without error, is left out; a longer one is
// cut at a UTF-8 boundary) and a non-empty payload (see
// deadletter.HeaderEmptyPayload).
func deadLetterMessage(d deadletter.Letter) connector.Message {
	m := d.Message()
	hs := m.Headers[:0]
	for _, f := range m.Headers {
		if len(f.Value) == 0 {
			continue
		}
		if len(f.Value) > connector.MaxKeyLen {
			v := f.Value[:connector.MaxKeyLen]
			for !utf8.Valid(v) && len(v) > connector.MaxKeyLen-utf8.UTFMax {
				v = v[:len(v)-1] // drop a cut rune
			}
			if !utf8.Valid(v) {
				v = f.Value[:connector.MaxKeyLen] // not text: cut anywhere
			}
			f.Value = v
		}
		hs = append(hs, f)
	}
	m.Headers = hs
	if len(m.Payload) == 0 {
		m.Headers = append(m.Headers, connector.Field{Name: deadletter.HeaderEmptyPayload, Value: []byte("1")})
		m.Payload = []byte{0}
	}
	return m
}

// deadLetterKind is the outbox of a processor's dead letters: the rows of
// state.FamilyDeadLetters of its source, published to the dead-letter sink.
type deadLetterKind struct{ p *env }

func (deadLetterKind) what() string           { return "dead letters" }
func (deadLetterKind) family() state.Family   { return state.FamilyDeadLetters }
func (deadLetterKind) op() stream.PartitionOp { return stream.OpDeadLetters }

func (k deadLetterKind) rows(ctx context.Context, pt uint32, limit int, _ bool) ([]outRow, error) {
	pending, err := k.p.deadLetterRows(ctx, pt, limit)
	if err != nil {
		return nil, err
	}
	out := make([]outRow, len(pending))
	for i := range pending {
		r := &pending[i]
		out[i] = outRow{key: r.key, order: r.letter.Offset, dest: "dead-letter sink", sink: k.p.opts.sink,
			msgs: oneMessage(deadLetterMessage(r.letter)), size: len(r.letter.Payload), last: true, letter: &r.letter}
	}
	return out, nil
}

func letters(rows []outRow) []deadletter.Letter {
	out := make([]deadletter.Letter, len(rows))
	for i := range rows {
		out[i] = *rows[i].letter
	}
	return out
}

func (k deadLetterKind) beforeSend(pt uint32, rows []outRow) error {
	if h := k.p.opts.hooks.BeforeDeadLetterSend; h != nil {
		if err := h(pt, letters(rows)); err != nil {
			return fmt.Errorf("BeforeDeadLetterSend: %w", err)
		}
	}
	return nil
}

func (k deadLetterKind) afterSend(pt uint32, rows []outRow) error {
	if h := k.p.opts.hooks.AfterDeadLetterSend; h != nil {
		if err := h(pt, letters(rows)); err != nil {
			return fmt.Errorf("AfterDeadLetterSend: %w", err)
		}
	}
	return nil
}

func (k deadLetterKind) afterDelete(pt uint32, rows []outRow) error {
	if h := k.p.opts.hooks.AfterDeadLetterDelete; h != nil {
		if err := h(pt, letters(rows)); err != nil {
			return fmt.Errorf("AfterDeadLetterDelete: %w", err)
		}
	}
	return nil
}

func (deadLetterKind) count(ps *stream.PartitionStats, n int, failed bool) {
	if failed {
		ps.PublishErrors++
		return
	}
	ps.Published += uint64(n)
}

// messageKind is the outbox of a processor's emitting handlers (To,
// KeyBy): the rows of state.FamilyOutbox of its source (internal/rows/outbox.go),
// runs of messages each published to the sink of its destination topic.
type messageKind struct {
	p  *env
	ob *outbox // the outbox publishing these rows (flow control)

	mu    sync.Mutex
	parts map[uint32]*msgPart
}

// msgPart is the state of one partition's message outbox; guarded by
// messageKind.mu.
type msgPart struct {
	// next is the seq of the first message this run has not published
	// (0: none published yet); rowFrom the first seq of the first row
	// that may still be in the store. Rows are deleted in seq order, so a
	// scan starts at rowFrom and never walks over the tombstones before.
	next, rowFrom uint64
	// mem holds the messages committed during this run, as the commits
	// handed them over (push), contiguous in seq: when its first message
	// is next, a round is taken from memory instead of read back from the
	// store. The store stays the truth: a queue that would grow past
	// memRows is dropped, and rows are read back until the queue's start
	// is reached again. pushed is the seq after the last message pushed.
	mem    memQueue
	pushed uint64
}

// memRows bounds the messages a partition's outbox keeps in memory.
const memRows = 1 << 16

// memQueue is the messages of one partition's outbox that commits handed
// over, contiguous in seq: the commits' own slices, not copies.
type memQueue struct {
	chunks [][]outRow
	rows   int
}

// first returns the seq of the first message, if any.
func (q *memQueue) first() (uint64, bool) {
	if q.rows == 0 {
		return 0, false
	}
	return q.chunks[0][0].order, true
}

// dropBelow drops the messages ordered below seq.
func (q *memQueue) dropBelow(seq uint64) {
	for len(q.chunks) > 0 {
		c := q.chunks[0]
		if c[len(c)-1].order < seq {
			q.rows -= len(c)
			q.chunks[0] = nil
			q.chunks = q.chunks[1:]
			continue
		}
		if n := int(min(seq-min(seq, c[0].order), uint64(len(c)))); n > 0 {
			q.rows -= n
			q.chunks[0] = c[n:]
		}
		break
	}
	if len(q.chunks) == 0 {
		q.chunks = nil // let the backing array go
	}
}

// take copies the first messages of the queue for a round: at most limit
// (0: all) and about outboxRoundBytes of payload, cut after the last
// message of a row when the bounds cut a row.
func (q *memQueue) take(limit int) []outRow {
	n := q.rows
	if limit > 0 {
		n = min(n, limit)
	}
	if c := q.chunks[0]; n <= len(c) || limit > 0 && len(c) >= limit/2 {
		// The first commit's messages make the round (most often the
		// only ones waiting): no copy.
		size := 0
		for i := range c {
			if i == n || limit > 0 && size >= outboxRoundBytes {
				return wholeRows(c[:i:i])
			}
			size += c[i].size
		}
		return c[:len(c):len(c)]
	}
	out := make([]outRow, 0, n)
	size := 0
	for _, c := range q.chunks {
		for i := range c {
			if len(out) == n || limit > 0 && size >= outboxRoundBytes {
				return wholeRows(out)
			}
			out = append(out, c[i])
			size += c[i].size
		}
	}
	return out
}

// wholeRows cuts a round after its last message that ends a row, if any:
// a row is deleted once all of its messages are published, and a round
// that ends rows deletes them.
func wholeRows(rows []outRow) []outRow {
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].last {
			return rows[:i+1]
		}
	}
	return rows
}

func newMessageKind(p *env) *messageKind {
	return &messageKind{p: p, parts: map[uint32]*msgPart{}}
}

// part returns the state of partition pt; k.mu is held.
func (k *messageKind) part(pt uint32) *msgPart {
	mp := k.parts[pt]
	if mp == nil {
		mp = &msgPart{}
		k.parts[pt] = mp
	}
	return mp
}

// push hands the messages a commit of partition pt wrote to its publisher,
// which owns them from now on, and wakes it. The pipeline calls it after
// each commit that wrote outbox rows, in commit order, then waits in its
// flow (Outbox.Await) while too many messages of pt wait.
func (k *messageKind) push(pt uint32, committed []executor.OutboxRow) {
	rows := make([]outRow, len(committed))
	for i, r := range committed {
		rows[i] = outRow{key: r.Key, order: r.Seq, dest: r.Dest, msgs: r.Msgs, mi: r.Index, size: r.Size, last: r.Last}
	}
	k.add(pt, rows)
	if k.ob != nil && len(rows) > 0 {
		k.ob.notify(pt)
	}
}

// add queues the messages of a commit of partition pt in memory.
func (k *messageKind) add(pt uint32, rows []outRow) {
	if len(rows) == 0 {
		return
	}
	for i := range rows {
		rows[i].sink = k.p.opts.outboxSinks[rows[i].dest]
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	mp := k.part(pt)
	q := &mp.mem
	if mp.pushed != rows[0].order || q.rows+len(rows) > memRows {
		*q = memQueue{} // not contiguous, or too many: read them back instead
	}
	mp.pushed = rows[len(rows)-1].order + 1
	if len(rows) > memRows {
		return
	}
	q.chunks = append(q.chunks, rows)
	q.rows += len(rows)
}

func (*messageKind) what() string           { return "outbox messages" }
func (*messageKind) family() state.Family   { return state.FamilyOutbox }
func (*messageKind) op() stream.PartitionOp { return stream.OpOutbox }

func (k *messageKind) rows(ctx context.Context, pt uint32, limit int, final bool) ([]outRow, error) {
	p := k.p
	prefix := rows.OutboxPrefix(p.name)
	k.mu.Lock()
	mp := k.part(pt)
	next, rowFrom := mp.next, mp.rowFrom
	q := &mp.mem
	q.dropBelow(next) // what was published
	first, inMem := q.first()
	switch {
	case inMem && first == next:
		out := q.take(limit)
		k.mu.Unlock()
		return out, nil
	case !inMem && mp.pushed != 0 && next >= mp.pushed && !final:
		// Every message committed since the first push was published:
		// nothing waits (the commit of any later one pushes and wakes).
		k.mu.Unlock()
		return nil, nil
	}
	k.mu.Unlock()
	var out []outRow
	size := 0
	from := binary.BigEndian.AppendUint64(slices.Clip(prefix), rowFrom)
	err := p.db.RowsFrom(ctx, state.FamilyOutbox, pt, from, func(key, value []byte) error {
		if !rows.IsDeadLetterKey(prefix, key) {
			if len(out) > 0 && !bytes.HasPrefix(key, prefix[:len(prefix)-1]) {
				return errStopRows // past this source's rows
			}
			return nil
		}
		seq := binary.BigEndian.Uint64(key[len(prefix):])
		if inMem && seq >= first {
			return errStopRows // memory has the rest
		}
		if n, err := rows.OutboxCount(seq, value); err == nil && seq+uint64(n) <= next {
			return nil // published this run, its delete not committed
		}
		key = bytes.Clone(key)
		msgs, err := rows.DecodeOutbox(seq, bytes.Clone(value))
		if err != nil {
			return strerr.Errorf("strand: source %q partition %d: %w", p.name, pt, err)
		}
		rowMsgs := make([]connector.Message, len(msgs))
		for i := range msgs {
			rowMsgs[i] = msgs[i].Msg
		}
		for i := range msgs {
			m := &msgs[i]
			if m.Seq < next {
				continue
			}
			sink := p.opts.outboxSinks[m.Dest]
			if sink == nil {
				return fatalError{&stream.PartitionError{Source: p.name, Partition: pt, Offset: m.Seq, Op: stream.OpOutbox,
					Err: fmt.Errorf("outbox message %d is for topic %q, which the topology does not publish to", m.Seq, m.Dest)}}
			}
			out = append(out, outRow{key: key, order: m.Seq, dest: m.Dest, sink: sink, msgs: rowMsgs, mi: i,
				size: len(m.Msg.Payload), last: i == len(msgs)-1})
			size += len(m.Msg.Payload)
			if limit > 0 && (len(out) >= limit || size >= outboxRoundBytes) {
				return errStopRows
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopRows) {
		return nil, err
	}
	if len(out) == 0 && inMem {
		// Nothing waits below memory's first message (at the start of a
		// run, when the store held no row of an earlier one): go on from
		// memory. Rows start where commits do, as memory's chunks do.
		k.mu.Lock()
		defer k.mu.Unlock()
		if mp.next == next {
			mp.next, mp.rowFrom = first, max(mp.rowFrom, first)
		}
		q.dropBelow(mp.next)
		if f, ok := q.first(); ok && f == mp.next {
			return q.take(limit), nil
		}
		return nil, nil
	}
	if errors.Is(err, errStopRows) {
		out = wholeRows(out)
	}
	return out, nil
}

func (k *messageKind) beforeSend(pt uint32, rows []outRow) error {
	if h := k.p.opts.hooks.BeforeOutboxSend; h != nil {
		if err := h(pt, outMessages(rows)); err != nil {
			return fmt.Errorf("BeforeOutboxSend: %w", err)
		}
	}
	return nil
}

func (k *messageKind) afterSend(pt uint32, rows []outRow) error {
	if h := k.p.opts.hooks.AfterOutboxSend; h != nil {
		if err := h(pt, outMessages(rows)); err != nil {
			return fmt.Errorf("AfterOutboxSend: %w", err)
		}
	}
	return nil
}

func (k *messageKind) afterDelete(pt uint32, rows []outRow) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	mp := k.part(pt)
	mp.next = max(mp.next, rows[len(rows)-1].order+1)
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].last {
			mp.rowFrom = max(mp.rowFrom, rows[i].order+1)
			break
		}
	}
	mp.mem.dropBelow(mp.next)
	return nil
}

func (*messageKind) count(ps *stream.PartitionStats, n int, failed bool) {
	if failed {
		ps.OutboxErrors++
		return
	}
	ps.OutboxPublished += uint64(n)
}

func outMessages(rows []outRow) []connector.Message {
	out := make([]connector.Message, len(rows))
	for i := range rows {
		out[i] = *rows[i].msg()
	}
	return out
}

// CountMessages returns how many outbox messages of source wait in
// partition pt of db.
func CountMessages(ctx context.Context, db *state.DB, source string, pt uint32) (int, error) {
	prefix := rows.OutboxPrefix(source)
	n := 0
	err := db.Rows(ctx, state.FamilyOutbox, pt, func(key, value []byte) error {
		if bytes.HasPrefix(key, prefix) && len(key) == len(prefix)+8 {
			c, err := rows.OutboxCount(binary.BigEndian.Uint64(key[len(prefix):]), value)
			if err != nil {
				c = 1 // the publisher reports it
			}
			n += c
		}
		return nil
	})
	return n, err
}
