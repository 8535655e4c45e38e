package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/strand-io/strand/internal/rowenc"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream"
)

// Outbox rows (docs/design.md §11). What a batch's emitting handlers (To,
// KeyBy) publish is written in the batch's commit to state.FamilyOutbox,
// under the source partition, one row per message:
//
//	key:   AppendString(source) 0x00 seq(u64 BE)
//	value: version(1) AppendString(dest) AppendString(key) AppendString(id)
//	       uvarint(#headers) {AppendString(name) AppendString(value)} AppendString(payload)
//
// seq numbers the partition's outbox messages from 1 in commit order; the
// row AppendString(source) 0x01 holds the next one. The message's id and
// its strand-origin header are its origin: xxh32(topology "\x00" source)
// (u32 BE), partition (u32 BE), seq (u64 BE). The outbox publisher (outbox.go)
// sends rows in seq order and deletes them once the broker has them.
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
	outboxVersion    = 1
	// originLen is the length of a strand-origin header and a message id.
	originLen = 16
)

// outboxMessage is one decoded outbox row.
type outboxMessage struct {
	seq  uint64
	dest string
	msg  stream.Message
}

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

func encodeOutboxMessage(dst []byte, dest string, m stream.Message) []byte {
	dst = append(dst, outboxVersion)
	dst = rowenc.AppendString(dst, dest)
	dst = rowenc.AppendString(dst, string(m.Key))
	dst = rowenc.AppendString(dst, string(m.ID[:]))
	dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
	for _, f := range m.Headers {
		dst = rowenc.AppendString(dst, f.Name)
		dst = rowenc.AppendString(dst, string(f.Value))
	}
	return rowenc.AppendString(dst, string(m.Payload))
}

func decodeOutboxMessage(b []byte) (dest string, m stream.Message, err error) {
	r := rowenc.Reader{B: b}
	if v := r.Byte(); r.Err == nil && v != outboxVersion {
		return "", m, fmt.Errorf("outbox row version %d, want %d", v, outboxVersion)
	}
	dest = r.String()
	m.Key = bytes.Clone(r.Bytes())
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
		m.Headers = append(m.Headers, stream.Field{Name: name, Value: bytes.Clone(r.Bytes())})
	}
	m.Payload = bytes.Clone(r.Bytes())
	if r.Err == nil && len(r.B) != 0 {
		r.Err = fmt.Errorf("%d bytes after the payload", len(r.B))
	}
	if r.Err != nil {
		return "", stream.Message{}, fmt.Errorf("outbox row: %w", r.Err)
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
func (b *batch) duplicate(r *stream.Record) bool {
	o := r.Headers.Origin
	if len(o) != originLen {
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
// applyStaged.
func (t *Task) writeOutbox(b *batch, res *Result) {
	for s, seq := range b.origins {
		key := append(rowenc.AppendString(nil, t.src.name), s[:]...)
		b.tx.PutRow(state.FamilyOrigins, t.partition, key, binary.BigEndian.AppendUint64(nil, seq))
	}
	if b.emits == nil {
		return
	}
	next := t.outNext
	for i := range b.records {
		if b.status[i] != statusApplied {
			continue
		}
		for _, em := range b.emits[i] {
			var id [originLen]byte
			copy(id[:], t.origin[:])
			binary.BigEndian.PutUint64(id[8:], next)
			hs, err := em.env.Headers.AppendFields(nil)
			if err != nil {
				// The emitting handler validated the envelope; a failure
				// here is a bug, and the batch must not commit.
				b.setFatal(fmt.Errorf("outbox message of offset %d: %w", b.records[i].Offset, err))
				return
			}
			hs = append(hs, stream.Field{Name: stream.HeaderOrigin, Value: id[:]})
			m := stream.Message{Key: em.env.Headers.Key, ID: id, Headers: hs, Payload: em.env.Payload}
			key := outboxRow(t.src.name, next)
			b.tx.AppendRow(state.FamilyOutbox, t.partition, key, encodeOutboxMessage(make([]byte, 0, 64+len(m.Payload)+len(m.Key)), em.dest, m))
			res.outbox = append(res.outbox, outRow{key: key, order: next, dest: em.dest, msg: m})
			next++
			res.Emitted++
		}
	}
	if next != t.outNext {
		b.tx.PutRow(state.FamilyOutbox, t.partition, outboxNextRow(t.src.name), binary.BigEndian.AppendUint64(nil, next))
	}
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
}
