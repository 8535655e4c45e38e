package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/strand-io/strand/internal/rowenc"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// pendingDeadLetter is one committed dead-letter row of the processor's source.
type pendingDeadLetter struct {
	key    []byte
	letter stream.DeadLetter
}

var errStopRows = errors.New("stop")

// deadLetterRows reads the committed dead-letter rows of the processor's
// source in partition pt, in offset order: at most limit rows and about
// outboxRoundBytes of payload (limit 0: all).
func (p *Processor) deadLetterRows(ctx context.Context, pt uint32, limit int) ([]pendingDeadLetter, error) {
	prefix := rowenc.AppendString(nil, p.name)
	var out []pendingDeadLetter
	size := 0
	err := p.db.Rows(ctx, state.FamilyDeadLetters, pt, func(key, value []byte) error {
		if !bytes.HasPrefix(key, prefix) || len(key) != len(prefix)+8 {
			if len(out) > 0 {
				return errStopRows // past this source's rows
			}
			return nil
		}
		var d stream.DeadLetter
		if err := d.UnmarshalBinary(value); err != nil {
			return fmt.Errorf("stream: source %q partition %d: dead-letter row %x: %w", p.name, pt, key, err)
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
// stream.HeaderDLQEmptyPayload).
func deadLetterMessage(d stream.DeadLetter) stream.Message {
	m := d.Message()
	hs := m.Headers[:0]
	for _, f := range m.Headers {
		if len(f.Value) == 0 {
			continue
		}
		if len(f.Value) > stream.MaxKeyLen {
			v := f.Value[:stream.MaxKeyLen]
			for !utf8.Valid(v) && len(v) > stream.MaxKeyLen-utf8.UTFMax {
				v = v[:len(v)-1] // drop a cut rune
			}
			if !utf8.Valid(v) {
				v = f.Value[:stream.MaxKeyLen] // not text: cut anywhere
			}
			f.Value = v
		}
		hs = append(hs, f)
	}
	m.Headers = hs
	if len(m.Payload) == 0 {
		m.Headers = append(m.Headers, stream.Field{Name: stream.HeaderDLQEmptyPayload, Value: []byte("1")})
		m.Payload = []byte{0}
	}
	return m
}

// deadLetterKind is the outbox of a processor's dead letters: the rows of
// state.FamilyDeadLetters of its source, published to the dead-letter sink.
type deadLetterKind struct{ p *Processor }

func (deadLetterKind) what() string           { return "dead letters" }
func (deadLetterKind) family() state.Family   { return state.FamilyDeadLetters }
func (deadLetterKind) op() stream.PartitionOp { return stream.OpDeadLetters }

func (k deadLetterKind) rows(ctx context.Context, pt uint32, limit int) ([]outRow, error) {
	pending, err := k.p.deadLetterRows(ctx, pt, limit)
	if err != nil {
		return nil, err
	}
	out := make([]outRow, len(pending))
	for i, r := range pending {
		out[i] = outRow{key: r.key, order: r.letter.Offset, dest: "dead-letter sink", sink: k.p.opts.sink,
			msg: deadLetterMessage(r.letter), letter: r.letter}
	}
	return out, nil
}

func letters(rows []outRow) []stream.DeadLetter {
	out := make([]stream.DeadLetter, len(rows))
	for i := range rows {
		out[i] = rows[i].letter
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
// KeyBy): the rows of state.FamilyOutbox of its source (outbox_rows.go),
// each published to the sink of its destination topic.
type messageKind struct {
	p *Processor
	// from[pt] is the seq of the partition's first row that may still be
	// there: rows are deleted in seq order, so a scan starts there and
	// never walks over the tombstones of the rows before.
	mu   sync.Mutex
	from map[uint32]uint64
	// mem[pt] holds rows committed during this run, as the commits
	// handed them over (push), contiguous in seq: when its first row is
	// from[pt], a round is taken from memory instead of read back from
	// the store. The store stays the truth: a queue that would grow past
	// memRows is dropped, and rows are read back until the queue's start
	// is reached again.
	mem map[uint32][]outRow
}

// memRows bounds the rows a partition's outbox keeps in memory.
const memRows = 1 << 16

func newMessageKind(p *Processor) *messageKind {
	return &messageKind{p: p, from: map[uint32]uint64{}, mem: map[uint32][]outRow{}}
}

// push hands the rows a commit of partition pt wrote to its publisher.
func (k *messageKind) push(pt uint32, rows []outRow) {
	if len(rows) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	q := k.mem[pt]
	switch {
	case len(q) > 0 && q[len(q)-1].order+1 != rows[0].order, len(q)+len(rows) > memRows:
		q = nil // not contiguous, or too many: read them back instead
	}
	if len(q) == 0 && len(rows) > memRows {
		k.mem[pt] = nil
		return
	}
	for _, r := range rows {
		r.sink = k.p.opts.outboxSinks[r.dest]
		q = append(q, r)
	}
	k.mem[pt] = q
}

func (*messageKind) what() string           { return "outbox messages" }
func (*messageKind) family() state.Family   { return state.FamilyOutbox }
func (*messageKind) op() stream.PartitionOp { return stream.OpOutbox }

func (k *messageKind) rows(ctx context.Context, pt uint32, limit int) ([]outRow, error) {
	p := k.p
	prefix := outboxPrefix(p.name)
	k.mu.Lock()
	if q := k.mem[pt]; len(q) > 0 && q[0].order <= k.from[pt] {
		// Drop what was deleted; the rest is in memory from from[pt] on.
		for len(q) > 0 && q[0].order < k.from[pt] {
			q = q[1:]
		}
		k.mem[pt] = q
		if len(q) > 0 && q[0].order == k.from[pt] {
			n, size := 0, 0
			for n < len(q) && (limit <= 0 || n < limit && size < outboxRoundBytes) {
				size += len(q[n].msg.Payload)
				n++
			}
			out := slices.Clone(q[:n])
			k.mu.Unlock()
			return out, nil
		}
	}
	from := binary.BigEndian.AppendUint64(slices.Clip(prefix), k.from[pt])
	k.mu.Unlock()
	var out []outRow
	size := 0
	err := p.db.RowsFrom(ctx, state.FamilyOutbox, pt, from, func(key, value []byte) error {
		if !bytes.HasPrefix(key, prefix) || len(key) != len(prefix)+8 {
			if len(out) > 0 && !bytes.HasPrefix(key, prefix[:len(prefix)-1]) {
				return errStopRows // past this source's rows
			}
			return nil
		}
		seq := binary.BigEndian.Uint64(key[len(prefix):])
		dest, m, err := decodeOutboxMessage(value)
		if err != nil {
			return fmt.Errorf("stream: source %q partition %d: outbox row %d: %w", p.name, pt, seq, err)
		}
		sink := p.opts.outboxSinks[dest]
		if sink == nil {
			return fatalError{&PartitionError{Source: p.name, Partition: pt, Offset: seq, Op: stream.OpOutbox,
				Err: fmt.Errorf("outbox message %d is for topic %q, which the topology does not publish to", seq, dest)}}
		}
		out = append(out, outRow{key: bytes.Clone(key), order: seq, dest: dest, sink: sink, msg: m})
		size += len(m.Payload)
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
	k.from[pt] = max(k.from[pt], rows[len(rows)-1].order+1)
	q := k.mem[pt]
	for len(q) > 0 && q[0].order < k.from[pt] {
		q = q[1:]
	}
	if len(q) == 0 {
		q = nil // let the backing array go
	}
	k.mem[pt] = q
	k.mu.Unlock()
	return nil
}

func (*messageKind) count(ps *stream.PartitionStats, n int, failed bool) {
	if failed {
		ps.OutboxErrors++
		return
	}
	ps.OutboxPublished += uint64(n)
}

func outMessages(rows []outRow) []stream.Message {
	out := make([]stream.Message, len(rows))
	for i := range rows {
		out[i] = rows[i].msg
	}
	return out
}

// countOutbox returns how many outbox rows of the processor's source wait
// in partition pt.
func (p *Processor) countOutbox(ctx context.Context, pt uint32) (int, error) {
	prefix := outboxPrefix(p.name)
	n := 0
	err := p.db.Rows(ctx, state.FamilyOutbox, pt, func(key, _ []byte) error {
		if bytes.HasPrefix(key, prefix) && len(key) == len(prefix)+8 {
			n++
		}
		return nil
	})
	return n, err
}
