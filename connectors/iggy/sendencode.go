package iggy

import (
	"encoding/binary"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
)

// The SendMessages command as SDK v0.8.0 and servers 0.7/0.8 speak it
// (legacy framing). A Publisher's senders encode it themselves, into a
// buffer each reuses for every batch, and write it on the SDK's socket
// (conn.exchange): the SDK's SendMessages builds the payload in one fresh
// buffer and copies it into a second one with the frame header, two
// allocations of the batch's size per request.
//
// Request frame: length u32 (4 + payload) · code u32 (101) · payload:
// metadata_len u32 · stream Identifier · topic Identifier · Partitioning
// (kind u8 · len u8 · value) · messages_count u32 · an index of
// messages_count entries of 16 bytes (u32 0 · u32 end of message i,
// counted from the start of the messages · u64 0) · the messages, each a
// 64-byte header (checksum u64 · id u128 · offset u64 · timestamp u64 ·
// origin_timestamp u64 · user_headers_length u32 · payload_length u32 ·
// reserved u64), then the payload, then the user headers. The reply is a
// status and an empty payload.
const (
	sendMessagesCode = 101
	sendIndexSize    = 16
)

// sendHead is the part of a SendMessages payload that is the same for every
// batch of a topic: the stream and topic identifiers.
type sendHead []byte

func newSendHead(t topicRef) (sendHead, error) {
	b, err := t.appendIdentifiers(nil)
	return sendHead(b), err
}

// sendFrameSize returns the size of the request frame encodeSend writes for
// msgs.
func sendFrameSize(h sendHead, msgs []iggcon.IggyMessage) int {
	n := 8 + 4 + len(h) + 6 + 4 + len(msgs)*sendIndexSize
	for i := range msgs {
		n += msgHeaderSize + len(msgs[i].Payload) + len(msgs[i].UserHeaders)
	}
	return n
}

// encodeSend writes the SendMessages request frame of msgs for partition
// part into buf (reused: overwritten from its start, grown when too small)
// and returns it. Each message's lengths are taken from its Payload and
// UserHeaders slices, and its checksum, offset and timestamp are sent as
// zero (the server sets them), as the SDK does.
func encodeSend(buf []byte, h sendHead, part uint32, msgs []iggcon.IggyMessage) []byte {
	size := sendFrameSize(h, msgs)
	if cap(buf) < size {
		buf = make([]byte, 0, size+size/4) // room for the next, larger batches
	}
	b := buf[:0]
	b = binary.LittleEndian.AppendUint32(b, uint32(size-4))
	b = binary.LittleEndian.AppendUint32(b, sendMessagesCode)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h)+6+4))
	b = append(b, h...)
	b = append(b, byte(iggcon.PartitionIdKind), 4)
	b = binary.LittleEndian.AppendUint32(b, part)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(msgs)))
	end := uint32(0)
	for i := range msgs {
		end += uint32(msgHeaderSize + len(msgs[i].Payload) + len(msgs[i].UserHeaders))
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = binary.LittleEndian.AppendUint32(b, end)
		b = binary.LittleEndian.AppendUint64(b, 0)
	}
	for i := range msgs {
		m := &msgs[i]
		b = binary.LittleEndian.AppendUint64(b, 0) // checksum
		b = append(b, m.Header.Id[:]...)
		b = binary.LittleEndian.AppendUint64(b, 0) // offset
		b = binary.LittleEndian.AppendUint64(b, 0) // timestamp
		b = binary.LittleEndian.AppendUint64(b, m.Header.OriginTimestamp)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.UserHeaders)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Payload)))
		b = binary.LittleEndian.AppendUint64(b, 0) // reserved
		b = append(b, m.Payload...)
		b = append(b, m.UserHeaders...)
	}
	return b
}
