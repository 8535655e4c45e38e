package inspect

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// This file reads the rows of a store opened read-only record by record,
// for stream/state: parked keys, held records and their open gaps,
// given-up gaps, outbox messages, pending dead letters and origins.

// ParkedKey is a key parked in a store with its records.
type ParkedKey struct {
	Source    string
	Partition uint32
	Key       []byte
	Meta      rows.ParkedMeta
	Records   []connector.Record
}

// ReadParked returns the parked keys of a store, in source partition and
// key order.
func ReadParked(ctx context.Context, r *state.ReadOnly) ([]ParkedKey, error) {
	var out []ParkedKey
	err := r.Scan(ctx, state.FamilyParked, nil, func(part uint32, rest, value []byte) error {
		src, kind, key, err := rows.ParseParkedKey(rest)
		if err != nil {
			return err
		}
		if n := len(out); n == 0 || out[n-1].Source != src || out[n-1].Partition != part || !bytes.Equal(out[n-1].Key, key) {
			out = append(out, ParkedKey{Source: src, Partition: part, Key: bytes.Clone(key)})
		}
		pk := &out[len(out)-1]
		switch kind {
		case rows.ParkedKindMeta:
			if pk.Meta, err = rows.DecodeParkedMeta(value); err != nil {
				return fmt.Errorf("parked key %q: %w", key, err)
			}
		case rows.ParkedKindRecord:
			rec, err := rows.DecodeParkedRecord(part, bytes.Clone(value))
			if err != nil {
				return err
			}
			pk.Records = append(pk.Records, rec)
		}
		return nil
	})
	return out, err
}

// HeldKey is a key the re-sequencer holds records of, behind an open gap:
// Next is the sequence number it waits for (0 when the store has no number
// for the key yet), Records the held records in sequence order.
type HeldKey struct {
	Source    string
	Partition uint32
	Key       []byte
	Next      uint64
	Records   []stream.HeldRecord
}

// ReadHeld returns the held keys of a store, in source partition and key
// order.
func ReadHeld(ctx context.Context, r *state.ReadOnly) ([]HeldKey, error) {
	var out []HeldKey
	err := r.Scan(ctx, state.FamilyHolds, nil, func(part uint32, rest, value []byte) error {
		rd := rows.Reader{B: rest}
		src := rd.String()
		key := rd.Bytes()
		if rd.Err != nil {
			return fmt.Errorf("%w: hold row %x: %w", stream.ErrCodec, rest, rd.Err)
		}
		if n := len(out); n == 0 || out[n-1].Source != src || out[n-1].Partition != part || !bytes.Equal(out[n-1].Key, key) {
			out = append(out, HeldKey{Source: src, Partition: part, Key: bytes.Clone(key)})
		}
		since, rec, err := rows.DecodeHold(part, bytes.Clone(value))
		if err != nil {
			return err
		}
		h := &out[len(out)-1]
		h.Records = append(h.Records, stream.HeldRecord{Record: rec, Since: time.Unix(0, since)})
		return nil
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	// The keys' next numbers: delta rows are newer than own rows (a fold
	// writes the own rows and deletes the deltas), later deltas newer than
	// earlier ones.
	type skey struct {
		src  string
		part uint32
		key  string
	}
	want := map[skey]*HeldKey{}
	for i := range out {
		want[skey{out[i].Source, out[i].Partition, string(out[i].Key)}] = &out[i]
	}
	fromDelta := map[skey]bool{}
	err = r.Scan(ctx, state.FamilySequences, nil, func(part uint32, rest, value []byte) error {
		rd := rows.Reader{B: rest}
		src := rd.String()
		switch rd.Byte() {
		case rows.SeqKindDelta:
			return rows.DecodeDelta(value, func(key []byte, next uint64) {
				k := skey{src, part, string(key)}
				if h := want[k]; h != nil {
					h.Next, fromDelta[k] = next, true
				}
			})
		case rows.SeqKindNext:
			k := skey{src, part, string(rd.Bytes())}
			h := want[k]
			if rd.Err != nil || h == nil || fromDelta[k] {
				return nil
			}
			vr := rows.Reader{B: value}
			if f := vr.Byte(); f != rows.SeqFormat {
				return fmt.Errorf("%w: sequence row format %d unknown", stream.ErrCodec, f)
			}
			h.Next = vr.Uvarint()
			if vr.Err != nil {
				return fmt.Errorf("%w: sequence row of key %q: %w", stream.ErrCodec, k.key, vr.Err)
			}
		}
		return nil
	})
	return out, err
}

// ReadGaps returns the gaps a store's re-sequencer gave up (skipped or
// dead-lettered past), in source partition, key and sequence order.
func ReadGaps(ctx context.Context, r *state.ReadOnly) ([]stream.GapNotice, error) {
	var out []stream.GapNotice
	err := r.Scan(ctx, state.FamilySequences, nil, func(part uint32, rest, v []byte) error {
		rd := rows.Reader{B: rest}
		src := rd.String()
		if rd.Byte() != rows.SeqKindGap {
			return nil
		}
		kb := rd.Bytes()
		from := rd.U64()
		if rd.Err != nil {
			return fmt.Errorf("%w: gap row %x: %w", stream.ErrCodec, rest, rd.Err)
		}
		g, err := rows.DecodeGap(src, part, kb, from, v)
		if err != nil {
			return err
		}
		out = append(out, g)
		return nil
	})
	return out, err
}

// OutboxMessage is a committed To/KeyBy message not yet published: the
// source partition whose commit wrote it, its place in that partition's
// outbox, its destination topic and the message.
type OutboxMessage struct {
	Source    string
	Partition uint32
	Seq       uint64
	Dest      string
	Message   connector.Message
}

// ReadOutbox returns the outbox messages of a store, in source partition
// and outbox order.
func ReadOutbox(ctx context.Context, r *state.ReadOnly) ([]OutboxMessage, error) {
	var out []OutboxMessage
	err := r.Scan(ctx, state.FamilyOutbox, nil, func(part uint32, rest, value []byte) error {
		src, seq, messages, err := rows.ParseOutboxKey(rest)
		if err != nil || !messages {
			return err
		}
		msgs, err := rows.DecodeOutbox(seq, bytes.Clone(value))
		if err != nil {
			return err
		}
		for _, m := range msgs {
			out = append(out, OutboxMessage{Source: src, Partition: part, Seq: m.Seq, Dest: m.Dest, Message: m.Msg})
		}
		return nil
	})
	return out, err
}

// ReadDeadLetters returns the committed dead letters of a store not yet
// published, in partition and key order.
func ReadDeadLetters(ctx context.Context, r *state.ReadOnly) ([]deadletter.Letter, error) {
	var out []deadletter.Letter
	err := r.Scan(ctx, state.FamilyDeadLetters, nil, func(_ uint32, rest, value []byte) error {
		var d deadletter.Letter
		if err := rows.DecodeLetter(bytes.Clone(value), &d); err != nil {
			return fmt.Errorf("dead-letter row %x: %w", rest, err)
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// ReadProcessed reports whether the store's source partition took in
// (applied, or dead-lettered, parked or held) the record whose
// strand-origin is origin: a replay's (its origin row is there) or an
// outbox message's (its seq is not above the highest of its origin stream).
func ReadProcessed(r *state.ReadOnly, source string, partition uint32, origin []byte) (bool, error) {
	if len(origin) != rows.OriginLen {
		return false, fmt.Errorf("%w: origin of %d bytes, want %d", stream.ErrCodec, len(origin), rows.OriginLen)
	}
	if rows.IsReplayOrigin(origin) {
		_, ok, err := r.Row(state.FamilyOrigins, partition, rows.OriginKey(source, origin))
		return ok, err
	}
	v, ok, err := r.Row(state.FamilyOrigins, partition, rows.OriginKey(source, origin[:8]))
	if err != nil || !ok {
		return false, err
	}
	if len(v) != 8 {
		return false, fmt.Errorf("%w: origin row of %d bytes", stream.ErrCodec, len(v))
	}
	return binary.BigEndian.Uint64(origin[8:]) <= binary.BigEndian.Uint64(v), nil
}
