package wire

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// V012 message batches. A batch is a 256-byte header (partition_id u64 ·
// base_offset u64 · base_timestamp u64 · origin_timestamp u64 ·
// batch_length u64 · batch_checksum u64 · message_count u32 · flags u8 ·
// reserved) followed by message_count frames. A frame is a 48-byte header
// (checksum u64 · id u128 · offset_delta u32 · timestamp_delta u32 ·
// user_headers_length u32 · payload_length u32 · reserved u64), the
// payload, then the user headers.
//
// Checksums are XXH3-64 with seed 0. A frame's covers its bytes from 8 to
// its end. The batch's is one streaming hash over partition_id,
// base_offset, base_timestamp, origin_timestamp, batch_length (u64 each),
// message_count (u32), then the eight checksum bytes of every frame in
// order; reserved bytes are not hashed. Flag bit 0 (idempotent-producer
// fields present) is never set by strand: the fields' layout is not
// published (design §7).
const (
	BatchHeaderSize = 256
	FrameHeaderSize = 48

	bOffPartition = 0
	bOffBase      = 8
	bOffBaseTS    = 16
	bOffOrigin    = 24
	bOffLength    = 32
	bOffChecksum  = 40
	bOffCount     = 48
	bOffFlags     = 52
)

// BatchHeader is a decoded batch header.
type BatchHeader struct {
	PartitionID     uint64
	BaseOffset      uint64
	BaseTimestamp   uint64
	OriginTimestamp uint64
	Length          uint64
	Checksum        uint64
	Count           uint32
	Flags           uint8
}

// Frame is one decoded message of a batch. Payload and Headers alias the
// batch.
type Frame struct {
	Checksum       uint64
	ID             [16]byte
	OffsetDelta    uint32
	TimestampDelta uint32
	Payload        []byte
	Headers        []byte
}

// FrameSize returns the encoded size of a frame with p payload and h header
// bytes.
func FrameSizeOf(p, h int) int { return FrameHeaderSize + p + h }

// BeginBatch appends a zeroed batch header to b and returns b and the
// batch's start.
func BeginBatch(b []byte) ([]byte, int) {
	start := len(b)
	return append(b, make([]byte, BatchHeaderSize)...), start
}

// AppendFrame appends one frame with its checksum.
func AppendFrame(b []byte, id *[16]byte, offsetDelta, tsDelta uint32, payload, headers []byte) []byte {
	start := len(b)
	b = appendU64(b, 0)
	b = append(b, id[:]...)
	b = appendU32(appendU32(b, offsetDelta), tsDelta)
	b = appendU32(appendU32(b, uint32(len(headers))), uint32(len(payload)))
	b = appendU64(b, 0)
	b = append(append(b, payload...), headers...)
	binary.LittleEndian.PutUint64(b[start:], xxh3.Hash(b[start+8:]))
	return b
}

// FinishBatch fills in the header of the batch that starts at start and
// runs to the end of b: count frames, the given origin timestamp, the
// length, and the checksum (partition, base offset and base timestamp stay
// as they are: zero from a producer).
func FinishBatch(b []byte, start int, origin uint64, count uint32) {
	h := b[start : start+BatchHeaderSize]
	le := binary.LittleEndian
	le.PutUint64(h[bOffOrigin:], origin)
	le.PutUint64(h[bOffLength:], uint64(len(b)-start))
	le.PutUint32(h[bOffCount:], count)
	Seal(b[start:])
}

// Seal recomputes the checksum of a well-formed batch (after a server
// stamps its partition, base offset or base timestamp). It walks the
// frames; a batch that does not parse is left unchanged.
func Seal(batch []byte) {
	if sum, err := batchChecksum(batch); err == nil {
		binary.LittleEndian.PutUint64(batch[bOffChecksum:], sum)
	}
}

// ParseBatchHeader decodes the header at the start of b and checks that
// the batch it announces fits in b.
func ParseBatchHeader(b []byte) (BatchHeader, error) {
	var h BatchHeader
	if len(b) < BatchHeaderSize {
		return h, NewReaderErr("batch header of %d bytes", len(b))
	}
	le := binary.LittleEndian
	h = BatchHeader{
		PartitionID: le.Uint64(b[bOffPartition:]), BaseOffset: le.Uint64(b[bOffBase:]),
		BaseTimestamp: le.Uint64(b[bOffBaseTS:]), OriginTimestamp: le.Uint64(b[bOffOrigin:]),
		Length: le.Uint64(b[bOffLength:]), Checksum: le.Uint64(b[bOffChecksum:]),
		Count: le.Uint32(b[bOffCount:]), Flags: b[bOffFlags],
	}
	if h.Length < BatchHeaderSize || h.Length > uint64(len(b)) {
		return h, NewReaderErr("batch length %d with %d bytes at hand", h.Length, len(b))
	}
	if uint64(h.Count)*FrameHeaderSize > h.Length-BatchHeaderSize {
		return h, NewReaderErr("batch of %d bytes claims %d frames", h.Length, h.Count)
	}
	return h, nil
}

// NextFrame decodes the frame at the start of b and returns it with its
// size.
func NextFrame(b []byte) (Frame, int, error) {
	var f Frame
	if len(b) < FrameHeaderSize {
		return f, 0, NewReaderErr("frame header of %d bytes", len(b))
	}
	le := binary.LittleEndian
	f.Checksum = le.Uint64(b)
	copy(f.ID[:], b[8:24])
	f.OffsetDelta = le.Uint32(b[24:])
	f.TimestampDelta = le.Uint32(b[28:])
	hl, pl := uint64(le.Uint32(b[32:])), uint64(le.Uint32(b[36:]))
	if le.Uint64(b[40:]) != 0 {
		return f, 0, NewReaderErr("frame reserved field %#x (%w)", le.Uint64(b[40:]), StatusInvalidReservedField)
	}
	if hl+pl > uint64(len(b)-FrameHeaderSize) {
		return f, 0, NewReaderErr("frame: %d payload and %d header bytes run past the batch (%d left)", pl, hl, len(b)-FrameHeaderSize)
	}
	pe := FrameHeaderSize + int(pl)
	he := pe + int(hl)
	f.Payload = b[FrameHeaderSize:pe:pe]
	f.Headers = b[pe:he:he]
	return f, he, nil
}

// Frames decodes every frame of a batch (with its header) into fn, in
// order, stopping at fn's first error. It checks that the frames fill the
// batch exactly and match its count.
func Frames(batch []byte, fn func(h *BatchHeader, f *Frame) error) (BatchHeader, error) {
	h, err := ParseBatchHeader(batch)
	if err != nil {
		return h, err
	}
	body := batch[BatchHeaderSize:h.Length]
	n := uint32(0)
	for len(body) > 0 {
		f, k, err := NextFrame(body)
		if err != nil {
			return h, err
		}
		if n == h.Count {
			return h, NewReaderErr("batch claims %d frames and holds more", h.Count)
		}
		n++
		if err := fn(&h, &f); err != nil {
			return h, err
		}
		body = body[k:]
	}
	if n != h.Count {
		return h, NewReaderErr("batch claims %d frames and holds %d", h.Count, n)
	}
	return h, nil
}

// batchChecksum computes the checksum a batch should carry.
func batchChecksum(batch []byte) (uint64, error) {
	h, err := ParseBatchHeader(batch)
	if err != nil {
		return 0, err
	}
	var fixed [44]byte
	copy(fixed[:40], batch[:40])
	copy(fixed[40:], batch[bOffCount:bOffCount+4])
	x := xxh3.New()
	_, _ = x.Write(fixed[:])
	body := batch[BatchHeaderSize:h.Length]
	for n := uint32(0); len(body) > 0; n++ {
		_, k, err := NextFrame(body)
		if err != nil {
			return 0, err
		}
		if n == h.Count {
			return 0, NewReaderErr("batch claims %d frames and holds more", h.Count)
		}
		_, _ = x.Write(body[:8])
		body = body[k:]
	}
	return x.Sum64(), nil
}

// VerifyBatch checks a batch as the server does at admission, in one pass
// over its frames: they parse and fill it, each frame checksum matches
// (else StatusInvalidMessageChecksum), the batch checksum matches (else
// StatusInvalidBatchChecksum), and no reserved flag is set. The returned
// error wraps the status to answer.
func VerifyBatch(batch []byte) error {
	h, err := ParseBatchHeader(batch)
	if err != nil {
		return errorsJoin(StatusInvalidFormat, err)
	}
	if h.Flags != 0 {
		return errorsJoin(StatusInvalidReservedField, NewReaderErr("batch flags %#x: idempotent-producer fields are not supported", h.Flags))
	}
	var fixed [44]byte
	copy(fixed[:40], batch[:40])
	copy(fixed[40:], batch[bOffCount:bOffCount+4])
	x := xxh3.New()
	_, _ = x.Write(fixed[:])
	body := batch[BatchHeaderSize:h.Length]
	n := uint32(0)
	for len(body) > 0 {
		f, k, err := NextFrame(body)
		if err != nil {
			return errorsJoin(StatusInvalidFormat, err)
		}
		if n == h.Count {
			return errorsJoin(StatusInvalidFormat, NewReaderErr("batch claims %d frames and holds more", h.Count))
		}
		n++
		if xxh3.Hash(body[8:k]) != f.Checksum {
			return errorsJoin(StatusInvalidMessageChecksum, NewReaderErr("frame %d: checksum %#x does not match its bytes", n-1, f.Checksum))
		}
		_, _ = x.Write(body[:8])
		body = body[k:]
	}
	if n != h.Count {
		return errorsJoin(StatusInvalidFormat, NewReaderErr("batch claims %d frames and holds %d", h.Count, n))
	}
	if sum := x.Sum64(); sum != h.Checksum {
		return errorsJoin(StatusInvalidBatchChecksum, NewReaderErr("batch checksum %#x, computed %#x", h.Checksum, sum))
	}
	return nil
}

// FinishStoredBatch fills in every header field of the batch that starts
// at start and runs to the end of b, as a server stores it, and seals it
// once (what FinishBatch then StampBatch do, with one checksum pass).
func FinishStoredBatch(b []byte, start int, partition, base, ts, origin uint64, count uint32) {
	h := b[start : start+BatchHeaderSize]
	le := binary.LittleEndian
	le.PutUint64(h[bOffPartition:], partition)
	le.PutUint64(h[bOffBase:], base)
	le.PutUint64(h[bOffBaseTS:], ts)
	le.PutUint64(h[bOffOrigin:], origin)
	le.PutUint64(h[bOffLength:], uint64(len(b)-start))
	le.PutUint32(h[bOffCount:], count)
	Seal(b[start:])
}

// StampBatch sets a stored batch's partition, base offset and base
// timestamp and reseals it (what the server does at append).
func StampBatch(batch []byte, partition, base, ts uint64) {
	le := binary.LittleEndian
	le.PutUint64(batch[bOffPartition:], partition)
	le.PutUint64(batch[bOffBase:], base)
	le.PutUint64(batch[bOffBaseTS:], ts)
	Seal(batch)
}
