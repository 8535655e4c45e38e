package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/rowenc"
	"github.com/strand-io/strand/internal/rowfmt"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// This file reads the engine's rows of a store opened read-only, record by
// record, for stream/state: parked keys, held records and their open gaps,
// given-up gaps, outbox messages and pending dead letters.

// StoredParkedKey is a key parked in a store with its records.
type StoredParkedKey struct {
	Source    string
	Partition uint32
	Key       []byte
	// Manual is set when the key waits for a release, not a retry; Next is
	// when its next try is due; Attempts how many tries failed; LastError
	// the last failure; FailedAt the offset of the record that failed.
	Manual    bool
	Attempts  int
	Next      time.Time
	LastError string
	FailedAt  uint64
	Records   []connector.Record
}

// ReadStoredParked returns the parked keys of a store, in source
// partition and key order.
func ReadStoredParked(ctx context.Context, r *state.ReadOnly) ([]StoredParkedKey, error) {
	var out []StoredParkedKey
	err := r.Scan(ctx, state.FamilyParked, nil, func(part uint32, rest, value []byte) error {
		rd := rowenc.Reader{B: rest}
		src := rd.String()
		kind := rd.Byte()
		key := rd.Bytes()
		if rd.Err != nil {
			return fmt.Errorf("%w: parked row %x: %w", stream.ErrCodec, rest, rd.Err)
		}
		if n := len(out); n == 0 || out[n-1].Source != src || out[n-1].Partition != part || !bytes.Equal(out[n-1].Key, key) {
			out = append(out, StoredParkedKey{Source: src, Partition: part, Key: bytes.Clone(key)})
		}
		pk := &out[len(out)-1]
		switch kind {
		case parkedMeta:
			vr := rowenc.Reader{B: value}
			format := vr.Byte()
			if format != parkedFormat && format != parkedMetaFormat {
				return fmt.Errorf("%w: parked key %q: format %d unknown", stream.ErrCodec, key, format)
			}
			pk.Manual = vr.Byte() == 1
			pk.Attempts = int(vr.Uvarint())
			pk.Next = time.Unix(0, int64(vr.U64()))
			pk.LastError = vr.String()
			if format == parkedMetaFormat {
				pk.FailedAt = vr.U64()
			}
			if vr.Err != nil {
				return fmt.Errorf("%w: parked key %q: %w", stream.ErrCodec, key, vr.Err)
			}
		case parkedRecord:
			rec, err := decodeParkedRecord(part, bytes.Clone(value))
			if err != nil {
				return err
			}
			pk.Records = append(pk.Records, rec)
		}
		return nil
	})
	return out, err
}

// StoredHeldKey is a key the re-sequencer holds records of, behind an open
// gap: Next is the sequence number it waits for (0 when the store has no
// number for the key yet), Records the held records in sequence order.
type StoredHeldKey struct {
	Source    string
	Partition uint32
	Key       []byte
	Next      uint64
	Records   []stream.HeldRecord
}

// ReadStoredHeld returns the held keys of a store, in source partition and
// key order.
func ReadStoredHeld(ctx context.Context, r *state.ReadOnly) ([]StoredHeldKey, error) {
	var out []StoredHeldKey
	err := r.Scan(ctx, state.FamilyHolds, nil, func(part uint32, rest, value []byte) error {
		rd := rowenc.Reader{B: rest}
		src := rd.String()
		key := rd.Bytes()
		if rd.Err != nil {
			return fmt.Errorf("%w: hold row %x: %w", stream.ErrCodec, rest, rd.Err)
		}
		if n := len(out); n == 0 || out[n-1].Source != src || out[n-1].Partition != part || !bytes.Equal(out[n-1].Key, key) {
			out = append(out, StoredHeldKey{Source: src, Partition: part, Key: bytes.Clone(key)})
		}
		since, rec, err := decodeHold(part, bytes.Clone(value))
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
	want := map[skey]*StoredHeldKey{}
	for i := range out {
		want[skey{out[i].Source, out[i].Partition, string(out[i].Key)}] = &out[i]
	}
	fromDelta := map[skey]bool{}
	err = r.Scan(ctx, state.FamilySequences, nil, func(part uint32, rest, value []byte) error {
		rd := rowenc.Reader{B: rest}
		src := rd.String()
		switch rd.Byte() {
		case seqDeltaRow:
			return decodeDelta(value, func(key []byte, next uint64) {
				k := skey{src, part, string(key)}
				if h := want[k]; h != nil {
					h.Next, fromDelta[k] = next, true
				}
			})
		case seqNextRow:
			k := skey{src, part, string(rd.Bytes())}
			h := want[k]
			if rd.Err != nil || h == nil || fromDelta[k] {
				return nil
			}
			vr := rowenc.Reader{B: value}
			if f := vr.Byte(); f != seqFormat {
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

// ReadStoredGaps returns the gaps a store's re-sequencer gave up (skipped
// or dead-lettered past), in source partition, key and sequence order.
func ReadStoredGaps(ctx context.Context, r *state.ReadOnly) ([]stream.GapNotice, error) {
	var out []stream.GapNotice
	err := r.Scan(ctx, state.FamilySequences, nil, func(part uint32, rest, v []byte) error {
		rd := rowenc.Reader{B: rest}
		src := rd.String()
		if rd.Byte() != seqGapRow {
			return nil
		}
		kb := rd.Bytes()
		from := rd.U64()
		if rd.Err != nil {
			return fmt.Errorf("%w: gap row %x: %w", stream.ErrCodec, rest, rd.Err)
		}
		g, err := decodeGap(src, part, kb, from, v)
		if err != nil {
			return err
		}
		out = append(out, g)
		return nil
	})
	return out, err
}

// decodeGap decodes the gap row of key kb from the number from.
func decodeGap(src string, part uint32, kb []byte, from uint64, v []byte) (stream.GapNotice, error) {
	vr := rowenc.Reader{B: v}
	if f := vr.Byte(); f != seqFormat {
		return stream.GapNotice{}, fmt.Errorf("%w: gap row format %d unknown", stream.ErrCodec, f)
	}
	g := stream.GapNotice{Source: src, Partition: part, Key: bytes.Clone(kb), From: from}
	g.To = vr.U64()
	g.Age = time.Duration(vr.U64())
	g.At = time.Unix(0, int64(vr.U64()))
	g.Cause = stream.GapCause(vr.Byte())
	g.Policy = stream.GapPolicy(vr.Byte())
	if vr.Err != nil {
		return stream.GapNotice{}, fmt.Errorf("%w: gap row: %w", stream.ErrCodec, vr.Err)
	}
	return g, nil
}

// StoredOutboxMessage is a committed To/KeyBy message not yet published:
// the source partition whose commit wrote it, its place in that
// partition's outbox, its destination topic and the message.
type StoredOutboxMessage struct {
	Source    string
	Partition uint32
	Seq       uint64
	Dest      string
	Message   connector.Message
}

// ReadStoredOutbox returns the outbox messages of a store, in source
// partition and outbox order.
func ReadStoredOutbox(ctx context.Context, r *state.ReadOnly) ([]StoredOutboxMessage, error) {
	var out []StoredOutboxMessage
	err := r.Scan(ctx, state.FamilyOutbox, nil, func(part uint32, rest, value []byte) error {
		rd := rowenc.Reader{B: rest}
		src := rd.String()
		kind := rd.Byte()
		if rd.Err != nil {
			return fmt.Errorf("%w: outbox row %x: %w", stream.ErrCodec, rest, rd.Err)
		}
		if kind != outboxRowMessage || len(rd.B) != 8 {
			return nil // the next-seq row
		}
		msgs, err := decodeOutboxRow(binary.BigEndian.Uint64(rd.B), bytes.Clone(value))
		if err != nil {
			return err
		}
		for _, m := range msgs {
			out = append(out, StoredOutboxMessage{Source: src, Partition: part, Seq: m.seq, Dest: m.dest, Message: m.msg})
		}
		return nil
	})
	return out, err
}

// ReadStoredDeadLetters returns the committed dead letters of a store not
// yet published, in partition and key order.
func ReadStoredDeadLetters(ctx context.Context, r *state.ReadOnly) ([]deadletter.Letter, error) {
	var out []deadletter.Letter
	err := r.Scan(ctx, state.FamilyDeadLetters, nil, func(_ uint32, rest, value []byte) error {
		var d deadletter.Letter
		if err := rowfmt.DecodeLetter(bytes.Clone(value), &d); err != nil {
			return fmt.Errorf("dead-letter row %x: %w", rest, err)
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// ReadStoredApplied reports whether the store's source partition took in
// (applied, or dead-lettered, parked or held) the record whose
// strand-origin is origin: a replay's (its origin row is there) or an
// outbox message's (its seq is not above the highest of its origin stream).
func ReadStoredApplied(r *state.ReadOnly, source string, partition uint32, origin []byte) (bool, error) {
	if len(origin) != originLen {
		return false, fmt.Errorf("%w: origin of %d bytes, want %d", stream.ErrCodec, len(origin), originLen)
	}
	key := rowenc.AppendString(nil, source)
	if isReplayOrigin(origin) {
		_, ok, err := r.Row(state.FamilyOrigins, partition, append(key, origin...))
		return ok, err
	}
	v, ok, err := r.Row(state.FamilyOrigins, partition, append(key, origin[:8]...))
	if err != nil || !ok {
		return false, err
	}
	if len(v) != 8 {
		return false, fmt.Errorf("%w: origin row of %d bytes", stream.ErrCodec, len(v))
	}
	return binary.BigEndian.Uint64(origin[8:]) <= binary.BigEndian.Uint64(v), nil
}
