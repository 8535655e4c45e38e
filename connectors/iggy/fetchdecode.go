package iggy

import (
	"encoding/binary"
	"fmt"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

// The PollMessages command. strand sends it itself so that a reply is
// decoded straight into records: the SDK's decoder grows a slice of
// messages one append at a time and allocates a header struct per message,
// about half of the connector's polling CPU on a busy log.
//
// The request body is the same in both protocols (wire.Poll). The legacy
// reply is partition_id u32 · current_offset u64 · count u32 · messages with
// 64-byte headers; the 0.10 reply has the same prefix, then batches
// (package wire).
const (
	fetchPrefixSize = wire.PollPrefixSize
	msgHeaderSize   = wire.LegacyMessageHeaderSize
)

// pollRequest is an encoded PollMessages request body whose offset and
// count are patched in place before each send. It is owned by one Reader
// and reused: it never leaves the connector.
type pollRequest struct {
	body []byte
}

// newPollRequest encodes the parts of a PollMessages request that do not
// change between polls of one partition: the Offset strategy, auto-commit
// off, an explicit partition.
func newPollRequest(consumer iggcon.Consumer, t topicRef, partition uint32) (*pollRequest, error) {
	wc, err := wireConsumer(consumer)
	if err != nil {
		return nil, strerr.Errorf("strand: iggy: encode consumer: %w", err)
	}
	p := wire.Poll{Consumer: wc, Stream: t.ws, Topic: t.wt, Partition: &partition, Strategy: wire.PollOffset}
	return &pollRequest{body: p.Append(nil)}, nil
}

// at returns the body asking for count messages from offset.
func (q *pollRequest) at(offset uint64, count uint32) []byte {
	n := len(q.body)
	binary.LittleEndian.PutUint64(q.body[n-wire.PollValueFromEnd:], offset)
	binary.LittleEndian.PutUint32(q.body[n-wire.PollCountFromEnd:], count)
	return q.body
}

// fetchInfo is the fixed prefix of a PollMessages reply.
type fetchInfo struct {
	partition     uint32
	currentOffset uint64
	count         uint32 // messages the broker says it sent
}

// fetchDecoder turns PollMessages reply payloads of one partition into
// records.
type fetchDecoder struct {
	t         topicRef // for HeaderErr messages
	partition uint32
	// foreign: the topic's producers write no strand headers; deliver each
	// record's raw message instead of parsing strand headers (foreign.go).
	foreign bool
	// proto is the protocol of the replies (set by the reader before each
	// decode; 0 means legacy).
	proto wire.Protocol
}

// decode decodes reply, the payload of a PollMessages reply, into records,
// delivering only the contiguous run of offsets that starts at want (a
// hole inside the batch is reported by the next poll). The records'
// payloads and keys alias reply, which the caller must never reuse: reply
// is the one arena of this poll, and the records and their bytes belong to
// whoever receives them.
//
// An empty reply, or one that holds no message, gives no records and no
// error. A reply that contradicts itself (a message running past its end,
// trailing bytes, a count that is not the number of messages) gives an
// error wrapping ErrProtocol; a first offset after want gives ErrOffsetGap.
// decode never panics, whatever reply holds. Strand headers are parsed
// without allocating unless they are malformed (then HeaderErr is set, as
// by the SDK path). A foreign decoder parses no strand headers: it gives
// every record its raw message (Record.Raw), in two more allocations per
// reply, and sets HeaderErr only for a malformed user-header block.
func (d *fetchDecoder) decode(reply []byte, want uint64) ([]connector.Record, fetchInfo, error) {
	return d.decodeAppend(nil, reply, want)
}

// decodeAppend is decode appending the records to dst (a reader that
// lingers joins several replies into one batch); it returns dst unchanged,
// with the error, when the reply gives no record.
func (d *fetchDecoder) decodeAppend(dst []connector.Record, reply []byte, want uint64) ([]connector.Record, fetchInfo, error) {
	var info fetchInfo
	if len(reply) == 0 {
		return dst, info, nil
	}
	if d.proto == wire.V012 {
		return d.decodeAppend012(dst, reply, want)
	}
	if len(reply) < fetchPrefixSize {
		return dst, info, fmt.Errorf("%w: a poll reply of %d bytes is shorter than its %d-byte prefix", ErrProtocol, len(reply), fetchPrefixSize)
	}
	info.partition = binary.LittleEndian.Uint32(reply[0:])
	info.currentOffset = binary.LittleEndian.Uint64(reply[4:])
	info.count = binary.LittleEndian.Uint32(reply[12:])
	// Each message takes at least its header, so the count cannot exceed
	// this; a lying count must not make us allocate.
	most := (len(reply) - fetchPrefixSize) / msgHeaderSize
	if uint64(info.count) > uint64(most) {
		return dst, info, fmt.Errorf("%w: a poll reply of %d bytes claims %d messages", ErrProtocol, len(reply), info.count)
	}
	if info.count == 0 {
		if len(reply) != fetchPrefixSize {
			return dst, info, fmt.Errorf("%w: a poll reply of 0 messages has %d bytes after its prefix", ErrProtocol, len(reply)-fetchPrefixSize)
		}
		return dst, info, nil
	}

	recs := dst
	base := len(dst) // recs[base:] are this reply's
	hint := 0        // records this reply may still give, once one is delivered
	var fa foreignArena
	decoded := 0
	next := want     // offset the next delivered record must have
	open := true     // still delivering: no hole met yet
	var gapAt uint64 // first offset after the skipped earlier ones, when it is not want
	for pos := fetchPrefixSize; pos < len(reply); {
		if len(reply)-pos < msgHeaderSize {
			return dst, info, fmt.Errorf("%w: poll reply message %d: header truncated at byte %d of %d", ErrProtocol, decoded, pos, len(reply))
		}
		h := reply[pos : pos+msgHeaderSize]
		off := binary.LittleEndian.Uint64(h[24:])
		ts := binary.LittleEndian.Uint64(h[32:])
		uhl := uint64(binary.LittleEndian.Uint32(h[48:]))
		pl := uint64(binary.LittleEndian.Uint32(h[52:]))
		pos += msgHeaderSize
		if pl+uhl > uint64(len(reply)-pos) {
			return dst, info, fmt.Errorf("%w: poll reply message %d (offset %d): %d payload and %d header bytes run past the reply's end (%d bytes left)",
				ErrProtocol, decoded, off, pl, uhl, len(reply)-pos)
		}
		pe := pos + int(pl)
		he := pe + int(uhl)
		payload := reply[pos:pe:pe]
		uh := reply[pe:he:he]
		pos = he
		decoded++
		if !open {
			continue
		}
		if len(recs) == base { // no record delivered yet
			if off < want { // never expected with the Offset strategy
				continue
			}
			if off != want {
				open = false
				gapAt = off
				continue
			}
			hint = int(info.count) - decoded + 1
			if cap(recs)-len(recs) < hint {
				recs = append(make([]connector.Record, 0, len(recs)+hint), recs...)
			}
		} else if off != next {
			open = false
			continue
		}
		recs = append(recs, connector.Record{Partition: d.partition, Offset: off, Timestamp: ts, Payload: payload})
		rec := &recs[len(recs)-1]
		var err error
		if d.foreign {
			err = fa.raw(rec, h[8:24], uh, hint)
		} else if rec.Headers, err = parseStrandHeaders(uh); err != nil {
			rec.Headers = connector.Headers{}
		}
		if err != nil {
			rec.HeaderErr = strerr.Errorf("strand: iggy: %s partition %d offset %d: %w", d.t, d.partition, off, err)
		}
		next++
	}
	return pollOutcome(dst, recs, base, info, decoded, open, want, gapAt)
}

// decodeAppend012 is decodeAppend for a binary protocol 0.12.0 reply: the
// same prefix, then batches whose frames give offsets as base_offset +
// offset_delta and origin timestamps as origin_timestamp +
// timestamp_delta; a record's timestamp is its batch's base_timestamp.
// Frame checksums are not re-verified (the server verified them at
// admission; TCP and TLS protect the transfer).
func (d *fetchDecoder) decodeAppend012(dst []connector.Record, reply []byte, want uint64) ([]connector.Record, fetchInfo, error) {
	var info fetchInfo
	pre, _, batches, err := wire.ParsePollReply(reply)
	if err != nil {
		return dst, info, fmt.Errorf("%w: poll reply: %w", ErrProtocol, err)
	}
	info = fetchInfo{partition: pre.Partition, currentOffset: pre.CurrentOffset, count: pre.Count}
	if uint64(info.count) > uint64(len(batches)/wire.FrameHeaderSize) {
		return dst, info, fmt.Errorf("%w: a poll reply of %d bytes claims %d messages", ErrProtocol, len(reply), info.count)
	}
	if info.count == 0 {
		return dst, info, nil
	}
	recs := dst
	base := len(dst)
	hint := 0
	var fa foreignArena
	decoded := 0
	next := want
	open := true
	var gapAt uint64
	err = eachFrame(batches, func(h *wire.BatchHeader, f *wire.Frame) error {
		off := h.BaseOffset + uint64(f.OffsetDelta)
		decoded++
		if !open {
			return nil
		}
		if len(recs) == base {
			if off < want {
				return nil
			}
			if off != want {
				open, gapAt = false, off
				return nil
			}
			hint = int(info.count) - decoded + 1
			if cap(recs)-len(recs) < hint {
				recs = append(make([]connector.Record, 0, len(recs)+hint), recs...)
			}
		} else if off != next {
			open = false
			return nil
		}
		recs = append(recs, connector.Record{Partition: d.partition, Offset: off, Timestamp: h.BaseTimestamp, Payload: f.Payload})
		rec := &recs[len(recs)-1]
		var err error
		if d.foreign {
			err = fa.raw(rec, f.ID[:], f.Headers, hint)
		} else if rec.Headers, err = parseStrandHeaders(f.Headers); err != nil {
			rec.Headers = connector.Headers{}
		}
		if err != nil {
			rec.HeaderErr = strerr.Errorf("strand: iggy: %s partition %d offset %d: %w", d.t, d.partition, off, err)
		}
		next++
		return nil
	})
	if err != nil {
		return dst, info, fmt.Errorf("%w: poll reply: %w", ErrProtocol, err)
	}
	return pollOutcome(dst, recs, base, info, decoded, open, want, gapAt)
}

// pollOutcome ends a decode of either protocol's poll reply: the records
// appended past base, or why none were (a count that does not match, a gap
// left by retention, or only offsets before want).
func pollOutcome(dst, recs []connector.Record, base int, info fetchInfo, decoded int, open bool, want, gapAt uint64) ([]connector.Record, fetchInfo, error) {
	if decoded != int(info.count) {
		return dst, info, fmt.Errorf("%w: a poll reply claims %d messages and holds %d", ErrProtocol, info.count, decoded)
	}
	switch {
	case len(recs) > base:
		return recs, info, nil
	case !open:
		return dst, info, fmt.Errorf("%w: the next offset is %d but the log continues at %d; messages %d..%d are gone (removed by retention?). Re-open the partition at %d to skip them",
			ErrOffsetGap, want, gapAt, want, gapAt-1, gapAt)
	default:
		return dst, info, fmt.Errorf("%w: the broker returned only earlier offsets than %d", ErrProtocol, want)
	}
}
