package wire

import (
	"bytes"
	"testing"
)

// Every decoder of the package has a fuzz target: whatever the input, it
// must return (a value or an error) and never panic, and what decodes must
// re-encode to the same bytes where the layout is canonical. Run one with
// go test -fuzz=FuzzName ./connectors/iggy/internal/wire; the default run
// executes the seeds.

func FuzzHeaders012(f *testing.F) {
	h := make([]byte, HeaderSize)
	(&RequestHeader{Size: 300, Client: goldenClient, Request: 1, Operation: OpSendMessages, Session: 1}).Put(h)
	f.Add(bytes.Clone(h))
	(&ReplyHeader{Size: 283, Client: goldenClient, Op: 1, Operation: OpRegister, Status: 42}).Put(h)
	f.Add(bytes.Clone(h))
	(&Eviction{Reason: EvictIncompatibleProtocol, MaxVersion: 0x2c00}).Put(h)
	f.Add(bytes.Clone(h))
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := ParseRequestHeader(b); err == nil {
			out := make([]byte, HeaderSize)
			q.Put(out)
			back, err := ParseRequestHeader(out)
			if err != nil || back != q {
				t.Fatalf("request header does not round-trip: %+v → %+v (%v)", q, back, err)
			}
		}
		if p, err := ParseReplyHeader(b); err == nil {
			out := make([]byte, HeaderSize)
			p.Put(out)
			if back, err := ParseReplyHeader(out); err != nil || back != p {
				t.Fatalf("reply header does not round-trip: %+v → %+v (%v)", p, back, err)
			}
		}
		if e, err := ParseEviction(b); err == nil {
			_ = e.Error()
		}
	})
}

func FuzzRegister(f *testing.F) {
	g := Register{Version: ProtocolVersion, SDKName: "strand", SDKVersion: "1", User: "iggy", Password: "iggy"}
	f.Add(g.Append(nil))
	g.Token, g.User, g.Password = "tok", "", ""
	f.Add(g.Append(nil))
	r := RegisterReply{Session: 1, ServerVersion: ProtocolVersion, ServerRelease: "0.10.0"}
	f.Add(r.Append(nil))
	f.Add(AppendResultError(nil, 42))
	f.Fuzz(func(t *testing.T, b []byte) {
		if g, err := ParseRegister(b); err == nil {
			if back, err := ParseRegister(g.Append(nil)); err != nil || back != g {
				t.Fatalf("register does not round-trip: %+v → %+v (%v)", g, back, err)
			}
		}
		_, _ = ParseRegisterVersion(b)
		if r, err := ParseRegisterReply(b); err == nil {
			if back, err := ParseRegisterReply(r.Append(nil)); err != nil || back != r {
				t.Fatalf("register reply does not round-trip: %+v → %+v (%v)", r, back, err)
			}
		}
		_, _, _ = ParseResult(b)
		_, _ = ParseLegacyLogin(b)
		_, _ = ParseLegacyLoginReply(b)
	})
}

func FuzzBatch(f *testing.F) {
	f.Add(unhexF(goldenSendBody)[0x1e:])
	f.Add(make([]byte, BatchHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if VerifyBatch(b) == nil {
			// A verified batch re-sealed keeps its checksum.
			c := bytes.Clone(b)
			Seal(c)
			if !bytes.Equal(c, b) {
				t.Fatal("a verified batch changed when resealed")
			}
		}
		_, _ = Frames(b, func(*BatchHeader, *Frame) error { return nil })
		_, _, _ = NextFrame(b)
	})
}

func FuzzSend(f *testing.F) {
	f.Add(unhexF(goldenSendBody), true)
	f.Add([]byte{1, 0, 0, 0, 0}, false)
	f.Fuzz(func(t *testing.T, b []byte, v012 bool) {
		if v012 {
			_, _ = ParseSendBody(b)
			_, _ = ParseConfirmations(b)
			return
		}
		if s, err := ParseLegacySend(b); err == nil {
			for _, m := range s.Messages {
				if len(m.Payload)+len(m.Headers) > len(b) {
					t.Fatal("message larger than its body")
				}
			}
		}
	})
}

func FuzzPollReply(f *testing.F) {
	send, _ := ParseSendBody(unhexF(goldenSendBody))
	f.Add(append(PollPrefix{Count: 2, CurrentOffset: 1}.Append(nil), send.Batch...))
	m := Message{Payload: []byte("x")}
	f.Add(AppendStoredLegacyMessage(PollPrefix{Count: 1}.Append(nil), &m))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, batches, err := ParsePollReply(b); err == nil && len(batches) > 0 {
			_ = VerifyBatch(batches)
		}
		if p, msgs, err := ParseLegacyPollReply(b); err == nil && len(msgs) != int(p.Count) {
			t.Fatalf("%d messages for count %d", len(msgs), p.Count)
		}
		_, _ = ParsePoll(b, ConsumerExternal)
	})
}

func FuzzAdmin(f *testing.F) {
	si := StreamInfo{ID: 1, TopicsCount: 1, Name: "s"}
	ti := TopicInfo{PartitionsCount: 1, Name: "t"}
	for _, p := range []Protocol{Legacy, V012} {
		f.Add(AppendTopic(AppendStream(nil, &si, p), &ti, p), p == V012)
		f.Add(AppendPartition(AppendTopic(nil, &ti, p), &PartitionInfo{}, p), p == V012)
		f.Add(CreateTopic{Stream: NumericID(1), Partitions: 2, Name: "t", Expiry: 5}.Append(nil, p), p == V012)
	}
	f.Fuzz(func(t *testing.T, b []byte, v012 bool) {
		p := Legacy
		if v012 {
			p = V012
		}
		_, _, _ = ParseStream(b, p)
		_, _, _ = ParseTopic(b, p)
		if c, err := ParseCreateTopic(b, p); err == nil && p == Legacy {
			if back := c.Append(nil, p); !bytes.Equal(back, b) && c.Compression != 0 {
				t.Fatalf("create topic does not round-trip: %x → %x", b, back)
			}
		}
		_, _ = ParseCreateStream(b, p)
		_, _ = ParseOptions(b)
		_, _, _ = ParseClusterMetadata(b)
		_, _ = ParsePartitionRoute(b)
		_, _ = ParsePartitionContext(b)
		_, _, _, _ = ParseTopicRef(b)
		_, _ = ParseStoreOffset(b, p)
		_, _, _ = ParseOffsetRef(b, p, v012)
		_, _, _ = ParseOffsetInfo(b)
		_, _, _ = ParseLegacyRequestHeader(b)
		_, _, _ = ParseLegacyReplyHeader(b)
	})
}

func unhexF(s string) []byte {
	var t testing.T
	return unhex(&t, s)
}
