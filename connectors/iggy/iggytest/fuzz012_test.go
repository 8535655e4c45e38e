package iggytest

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// frame012 encodes one 0.10 request frame.
func frame012(op wire.Operation, code wire.Code, session, request uint64, body []byte) []byte {
	h := make([]byte, wire.HeaderSize)
	(&wire.RequestHeader{Size: uint32(wire.HeaderSize + len(body)), Client: wire.ClientID{1}, Operation: op, Session: session,
		Request: request, Code: code}).Put(h)
	return append(h, body...)
}

// checkReplies012 verifies that out is a well-formed sequence of 0.10
// reply frames, possibly ended by one eviction.
func checkReplies012(t *testing.T, out []byte) {
	for len(out) > 0 {
		if len(out) < wire.HeaderSize {
			t.Fatalf("truncated frame header: %d bytes", len(out))
		}
		if wire.FrameCommand(out) == wire.CommandEviction {
			if len(out) != wire.HeaderSize {
				t.Fatalf("%d bytes after an eviction", len(out)-wire.HeaderSize)
			}
			return
		}
		h, err := wire.ParseReplyHeader(out)
		if err != nil {
			t.Fatal(err)
		}
		if h.Status != 0 && h.Size != wire.HeaderSize {
			t.Fatalf("error reply %d with a body", h.Status)
		}
		if int(h.Size) > len(out) {
			t.Fatalf("reply of %d bytes truncated to %d", h.Size, len(out))
		}
		out = out[h.Size:]
	}
}

// FuzzConnection012 feeds arbitrary bytes to a connection in binary
// protocol 0.12.0 (after a Ping, logged in as root with session 1): the
// broker must answer with well-formed frames, evict, or close, never panic
// or hang.
func FuzzConnection012(f *testing.F) {
	g := wire.Register{Version: wire.ProtocolVersion, User: "iggy", Password: "iggy"}
	ping := frame012(wire.OpNonReplicated, wire.CodePing, 0, 0, nil)
	part := uint32(1)
	poll := wire.Poll{Consumer: wire.Consumer{Kind: 1, ID: wire.NumericID(0)}, Stream: wire.Identifier{Kind: 2, Str: "s"},
		Topic: wire.Identifier{Kind: 2, Str: "t"}, Partition: &part, Strategy: wire.PollFirst, Count: 10}
	ids := wire.Identifier{Kind: 2, Str: "t"}.Append(wire.Identifier{Kind: 2, Str: "s"}.Append(nil))
	send := wire.AppendSendHead(nil, ids, 1, 1)
	send, start := wire.BeginBatch(send)
	send = wire.AppendFrame(send, &[16]byte{9}, 0, 0, []byte("x"), nil)
	wire.FinishBatch(send, start, 1, 1)
	f.Add([]byte{})
	f.Add(frame012(wire.OpNonReplicated, wire.CodePing, 0, 0, nil))
	f.Add(frame012(wire.OpNonReplicated, wire.CodePollMessages, 1, 0, poll.Append(nil)))
	f.Add(frame012(wire.OpSendMessages, 0, 1, 1, send))
	f.Add(frame012(wire.OpCreateTopic, 0, 1, 2, wire.CreateTopic{Stream: wire.NumericID(0), Partitions: 1, Name: "u"}.Append(nil, wire.V012)))
	f.Add(frame012(wire.OpNonReplicated, wire.CodeGetTopic, 1, 0, ids))
	f.Add(frame012(wire.OpRegister, 0, 0, 0, []byte{0, 0x2c, 0, 0}))
	f.Add(frame012(wire.OpRegister, 0, 0, 0, g.Append(nil)))
	f.Fuzz(func(t *testing.T, data []byte) {
		srv := fuzzServer(t)
		mc := &memConn{in: bytes.NewReader(append(bytes.Clone(ping), data...))}
		c := srv.newConn(mc)
		c.br = bufio.NewReader(mc)
		if !c.speaks012() {
			t.Fatal("a 0.10 frame was not detected")
		}
		c.sess.userID.Store(0)
		c.v012.session = 1
		for range 1000 {
			if err := c.serveOne012(); err != nil {
				break
			}
		}
		srv.removeSession(c.sess)
		checkReplies012(t, mc.out.Bytes())
	})
}
