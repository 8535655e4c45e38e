package iggy

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// sdkSendFrame returns the request frame the SDK writes for a SendMessages
// of msgs to partition part of t: it runs the SDK against a listener that
// records every frame and answers each with an empty OK reply.
func sdkSendFrame(t *testing.T, ref topicRef, part uint32, msgs []iggcon.IggyMessage) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	frames := make(chan []byte, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			var hdr [4]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			f := make([]byte, 4+binary.LittleEndian.Uint32(hdr[:]))
			copy(f, hdr[:])
			if _, err := io.ReadFull(c, f[4:]); err != nil {
				return
			}
			frames <- f
			if _, err := c.Write(make([]byte, 8)); err != nil {
				return
			}
		}
	}()
	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	// The SDK sends the messages as given; give it copies, it may rewrite
	// them (compression).
	cp := append([]iggcon.IggyMessage(nil), msgs...)
	if err := sdk.SendMessages(ref.sid, ref.tid, iggcon.PartitionId(part), cp); err != nil {
		t.Fatal(err)
	}
	_ = sdk.Close()
	<-done
	for {
		f := <-frames
		if binary.LittleEndian.Uint32(f[4:]) == uint32(wire.CodeSendMessages) {
			return f[wire.LegacyHeaderSize:] // the body
		}
	}
}

// TestEncodeSendMatchesSDK checks encodeSend byte for byte against the
// frame SDK v0.8.0 writes for the same batch: ids, origin timestamps,
// payloads of several sizes, with and without user headers, numeric and
// named identifiers.
func TestEncodeSendMatchesSDK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, names := range [][2]string{{"bank", "accounts"}, {"s", "a-much-longer-topic-name-for-the-identifier"}} {
		ref, err := newTopicRef(names[0], names[1])
		if err != nil {
			t.Fatal(err)
		}
		head, err := newSendHead(ref)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []iggcon.IggyMessage
		for i := range 37 {
			var id [16]byte
			binary.LittleEndian.PutUint64(id[:], rng.Uint64())
			binary.LittleEndian.PutUint64(id[8:], uint64(i))
			payload := make([]byte, 1+rng.IntN(300))
			for j := range payload {
				payload[j] = byte(rng.Uint32())
			}
			var h []byte
			if i%3 != 0 {
				h = appendTLV(nil, "k", []byte{byte(i), 2, 3})
			}
			msgs = append(msgs, iggcon.IggyMessage{
				Header: iggcon.MessageHeader{
					Id: id, OriginTimestamp: rng.Uint64(),
					UserHeaderLength: uint32(len(h)), PayloadLength: uint32(len(payload)),
				},
				Payload: payload, UserHeaders: h,
			})
		}
		for _, n := range []int{1, 2, len(msgs)} {
			part := uint32(n % 5)
			want := sdkSendFrame(t, ref, part, msgs[:n])
			// A reused buffer, too small first, then holding garbage.
			buf := encodeSend([]byte("garbage"), wire.Legacy, head, part, msgs[:n])
			if !bytes.Equal(buf, want) {
				t.Fatalf("%s, %d messages: frame differs from the SDK's (%d bytes, want %d)", ref, n, len(buf), len(want))
			}
			if len(buf) != sendBodySize(head, wire.Legacy, msgs[:n]) {
				t.Fatalf("sendBodySize %d, body %d", sendBodySize(head, wire.Legacy, msgs[:n]), len(buf))
			}
			// The 0.10 body: its size is announced exactly and its batch
			// verifies (checksums) and holds the same messages.
			b10 := encodeSend(nil, wire.V012, head, part, msgs[:n])
			if len(b10) != sendBodySize(head, wire.V012, msgs[:n]) {
				t.Fatalf("0.10 sendBodySize %d, body %d", sendBodySize(head, wire.V012, msgs[:n]), len(b10))
			}
			sb, err := wire.ParseSendBody(b10)
			if err != nil || int(sb.Count) != n {
				t.Fatal(sb, err)
			}
			if err := wire.VerifyBatch(sb.Batch); err != nil {
				t.Fatal(err)
			}
			i := 0
			if _, err := wire.Frames(sb.Batch, func(h *wire.BatchHeader, f *wire.Frame) error {
				m := msgs[i]
				if f.ID != [16]byte(m.Header.Id) || !bytes.Equal(f.Payload, m.Payload) || !bytes.Equal(f.Headers, m.UserHeaders) ||
					h.OriginTimestamp+uint64(f.TimestampDelta) != m.Header.OriginTimestamp && m.Header.OriginTimestamp-h.OriginTimestamp < 1<<32 {
					t.Fatalf("0.10 frame %d differs from its message", i)
				}
				i++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for i := range buf {
				buf[i] = 0xff
			}
			if again := encodeSend(buf, wire.Legacy, head, part, msgs[:n]); !bytes.Equal(again, want) {
				t.Fatalf("%s, %d messages: a reused buffer gives another frame", ref, n)
			}
		}
	}
}
