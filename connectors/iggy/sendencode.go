package iggy

import (
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// The SendMessages body, encoded by the connector itself into a buffer each
// Publisher sender reuses for every batch (the layouts are package wire's).
//
// Legacy (0.8): metadata_len u32 · stream · topic · Partitioning · count ·
// an index of 16-byte entries · the messages with 64-byte headers. The
// reply is empty.
//
// Binary protocol 0.12.0 (0.10): the same metadata, then one batch (256-byte
// header, 48-byte frame headers) sealed with XXH3 checksums. The reply
// confirms where the batch landed.

// sendHead is the part of a SendMessages body that is the same for every
// batch of a topic: the stream and topic identifiers.
type sendHead []byte

func newSendHead(t topicRef) (sendHead, error) {
	b, err := t.appendIdentifiers(nil)
	return sendHead(b), err
}

// sendBodySize returns the size of the body encodeSend writes for msgs.
func sendBodySize(h sendHead, proto wire.Protocol, msgs []iggcon.IggyMessage) int {
	data := 0
	for i := range msgs {
		data += len(msgs[i].Payload) + len(msgs[i].UserHeaders)
	}
	if proto == wire.V012 {
		return 4 + len(h) + wire.PartitioningSize + 4 + wire.BatchHeaderSize + len(msgs)*wire.FrameHeaderSize + data
	}
	return wire.LegacySendSize(len(h), len(msgs), data)
}

// encodeSend writes the SendMessages body of msgs for partition part in
// protocol proto into buf (reused: overwritten from its start, grown when
// too small) and returns it. Each message's lengths are taken from its
// Payload and UserHeaders slices; its id and origin timestamp are sent,
// offsets and server timestamps are left to the server.
func encodeSend(buf []byte, proto wire.Protocol, h sendHead, part uint32, msgs []iggcon.IggyMessage) []byte {
	size := sendBodySize(h, proto, msgs)
	if cap(buf) < size {
		buf = make([]byte, 0, size+size/4) // room for the next, larger batches
	}
	b := wire.AppendLegacySendHead(buf[:0], h, part, len(msgs))
	if proto == wire.V012 {
		origin := ^uint64(0)
		for i := range msgs {
			origin = min(origin, msgs[i].Header.OriginTimestamp)
		}
		var start int
		b, start = wire.BeginBatch(b)
		for i := range msgs {
			m := &msgs[i]
			delta := min(m.Header.OriginTimestamp-origin, 1<<32-1)
			b = wire.AppendFrame(b, (*[16]byte)(&m.Header.Id), uint32(i), uint32(delta), m.Payload, m.UserHeaders)
		}
		wire.FinishBatch(b, start, origin, uint32(len(msgs)))
		return b
	}
	end := uint32(0)
	for i := range msgs {
		end += uint32(wire.LegacyMessageSize(len(msgs[i].Payload), len(msgs[i].UserHeaders)))
		b = wire.AppendLegacyIndex(b, end)
	}
	for i := range msgs {
		m := &msgs[i]
		b = wire.AppendLegacyMessage(b, (*[16]byte)(&m.Header.Id), m.Header.OriginTimestamp, m.Payload, m.UserHeaders)
	}
	return b
}
