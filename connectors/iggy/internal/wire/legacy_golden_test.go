package wire

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"

	binaryserialization "github.com/apache/iggy/foreign/go/binary_serialization"
	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
)

// captureServer answers the official Go SDK v0.8.0 with minimal legacy
// replies and records every request frame it receives, so that the legacy
// encoders can be compared byte for byte with the SDK's.
type captureServer struct {
	ln     net.Listener
	mu     sync.Mutex
	frames map[Code][]byte
	wg     sync.WaitGroup
}

func newCaptureServer(t *testing.T) *captureServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &captureServer{ln: ln, frames: map[Code][]byte{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *captureServer) serve(c net.Conn) {
	for {
		var h [LegacyHeaderSize]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		code, n, err := ParseLegacyRequestHeader(h[:])
		if err != nil {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		s.mu.Lock()
		s.frames[code] = append(h[:], body...)
		s.mu.Unlock()
		var reply []byte
		switch code {
		case CodeGetClusterMetadata:
			reply = AppendLegacyReply(nil, StatusFeatureUnavailable, nil)
		case CodeLoginUser, CodeLoginWithToken:
			reply = AppendLegacyReply(nil, 0, appendU32(nil, 0))
		case CodeCreateStream, CodeGetStream:
			reply = AppendLegacyReply(nil, 0, AppendStream(nil, &StreamInfo{Name: "orders"}, Legacy))
		case CodeCreateTopic, CodeGetTopic:
			reply = AppendLegacyReply(nil, 0, AppendTopic(nil, &TopicInfo{Name: "events"}, Legacy))
		case CodePollMessages:
			reply = AppendLegacyReply(nil, 0, PollPrefix{}.Append(nil))
		default:
			reply = AppendLegacyReply(nil, 0, nil)
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

func (s *captureServer) frame(t *testing.T, code Code) []byte {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.frames[code]
	if !ok {
		t.Fatalf("the SDK sent no frame with code %d", code)
	}
	return f
}

func TestGoldenLegacyRequestsMatchSDK(t *testing.T) {
	srv := newCaptureServer(t)
	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(srv.ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	sid, _ := iggcon.NewIdentifier("orders")
	tid, _ := iggcon.NewIdentifier("events")
	stream, topic := mustName(t, "orders"), mustName(t, "events")
	check := func(code Code, body []byte) {
		t.Helper()
		want := srv.frame(t, code)
		if got := AppendLegacyRequest(nil, code, body); !bytes.Equal(got, want) {
			t.Fatalf("code %d\n got %x\n sdk %x", code, got, want)
		}
	}

	_, _ = sdk.LoginUser("iggy", "secret")
	login := Login{User: "iggy", Password: "secret", Version: "0.8.0"}
	lb, code := login.AppendLegacy(nil)
	check(code, lb)
	back, err := ParseLegacyLogin(lb)
	if err != nil || back != login {
		t.Fatal(back, err)
	}
	_, _ = sdk.LoginWithPersonalAccessToken("tok")
	lb, code = (&Login{Token: "tok"}).AppendLegacy(nil)
	check(code, lb)

	_, _ = sdk.CreateStream("orders")
	check(CodeCreateStream, CreateStream{Name: "orders"}.Append(nil, Legacy))
	_, _ = sdk.CreateTopic(sid, "events", 3, iggcon.CompressionAlgorithmNone, iggcon.Duration(5_000_000), 1<<30, nil)
	check(CodeCreateTopic, CreateTopic{Stream: stream, Partitions: 3, Name: "events", Expiry: 5_000_000, MaxSize: 1 << 30}.Append(nil, Legacy))
	_, _ = sdk.GetStream(sid)
	check(CodeGetStream, stream.Append(nil))
	_, _ = sdk.GetTopic(sid, tid)
	check(CodeGetTopic, topic.Append(stream.Append(nil)))
	_ = sdk.DeleteStream(sid)
	check(CodeDeleteStream, stream.Append(nil))

	part := uint32(2)
	cons := iggcon.NewSingleConsumer(iggcon.Identifier{})
	cid, _ := iggcon.NewIdentifier("strand.bookmark.x")
	cons = iggcon.NewSingleConsumer(cid)
	_ = sdk.StoreConsumerOffset(cons, sid, tid, 42, &part)
	ref := OffsetRef{Consumer: Consumer{ConsumerSingle, mustName(t, "strand.bookmark.x")}, Stream: stream, Topic: topic, Partition: &part}
	check(CodeStoreConsumerOffset, (&StoreOffset{OffsetRef: ref, Offset: 42}).Append(nil, Legacy))
	_, _ = sdk.GetConsumerOffset(cons, sid, tid, &part)
	check(CodeGetConsumerOffset, ref.Append(nil))

	_, _ = sdk.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.OffsetPollingStrategy(7), 100, false, &part)
	check(CodePollMessages, (&Poll{Consumer: Consumer{ConsumerSingle, NumericID(0)}, Stream: stream, Topic: topic, Partition: &part,
		Strategy: PollOffset, Value: 7, Count: 100}).Append(nil))

	var id [16]byte
	id[0], id[15] = 1, 2
	msg, err := iggcon.NewIggyMessage([]byte("hello"), iggcon.WithID(id))
	if err != nil {
		t.Fatal(err)
	}
	msg.Header.OriginTimestamp = 1767225600000000
	msg.UserHeaders = goldenHeaders("abc")
	msg.Header.UserHeaderLength = uint32(len(msg.UserHeaders))
	_ = sdk.SendMessages(sid, tid, iggcon.PartitionId(2), []iggcon.IggyMessage{msg})
	ids := topic.Append(stream.Append(nil))
	sb := AppendLegacySendHead(nil, ids, 2, 1)
	sb = AppendLegacyIndex(sb, uint32(LegacyMessageSize(5, len(msg.UserHeaders))))
	sb = AppendLegacyMessage(sb, &id, msg.Header.OriginTimestamp, msg.Payload, msg.UserHeaders)
	if len(sb) != LegacySendSize(len(ids), 1, 5+len(msg.UserHeaders)) {
		t.Fatalf("LegacySendSize disagrees with the encoder: %d", len(sb))
	}
	check(CodeSendMessages, sb)
	s, err := ParseLegacySend(sb)
	if err != nil || len(s.Messages) != 1 || string(s.Messages[0].Payload) != "hello" || s.Messages[0].ID != id {
		t.Fatal(s, err)
	}
}

func TestGoldenLegacyRepliesMatchSDK(t *testing.T) {
	si := StreamInfo{ID: 1, CreatedAt: 2, TopicsCount: 1, SizeBytes: 3, Messages: 4, Name: "orders"}
	ti := TopicInfo{ID: 0, CreatedAt: 5, PartitionsCount: 2, Expiry: 6, Compression: 1, MaxSize: 7, Replication: 1, SizeBytes: 8, Messages: 9, Name: "events"}
	b := AppendTopic(AppendStream(nil, &si, Legacy), &ti, Legacy)
	sd, err := binaryserialization.DeserializeStream(b)
	if err != nil || sd.Id != 1 || sd.Name != "orders" || len(sd.Topics) != 1 || sd.Topics[0].Name != "events" || sd.Topics[0].MaxTopicSize != 7 {
		t.Fatalf("SDK reads our stream as %+v (%v)", sd, err)
	}
	if got, ok, err := ParseStream(b, Legacy); err != nil || !ok || got.Topics[0].MaxSize != 7 || got.Messages != 4 {
		t.Fatal(got, err)
	}
	tb := AppendTopic(nil, &ti, Legacy)
	for i := range 2 {
		tb = AppendPartition(tb, &PartitionInfo{ID: uint32(i), CreatedAt: 1, Segments: 1, CurrentOffset: uint64(10 + i), SizeBytes: 2, Messages: 3}, Legacy)
	}
	td, err := binaryserialization.DeserializeTopic(tb)
	if err != nil || td.PartitionsCount != 2 || len(td.Partitions) != 2 || td.Partitions[1].CurrentOffset != 11 {
		t.Fatalf("SDK reads our topic as %+v (%v)", td, err)
	}
	if got, ok, err := ParseTopic(tb, Legacy); err != nil || !ok || got.Partitions[1].CurrentOffset != 11 {
		t.Fatal(got, err)
	}
	ob := OffsetInfo{Partition: 2, CurrentOffset: 9, StoredOffset: 4}.Append(nil)
	if o := binaryserialization.DeserializeOffset(ob); o.PartitionId != 2 || o.StoredOffset != 4 || o.CurrentOffset != 9 {
		t.Fatalf("SDK reads our offset as %+v", o)
	}
	if o, ok, err := ParseOffsetInfo(ob); err != nil || !ok || o.StoredOffset != 4 {
		t.Fatal(o, err)
	}
	if _, ok, err := ParseOffsetInfo(nil); ok || err != nil {
		t.Fatal("empty offset reply")
	}
	m := Message{Checksum: 1, Offset: 3, Timestamp: 4, OriginTimestamp: 5, Payload: []byte("hi"), Headers: goldenHeaders("x")}
	m.ID[0] = 9
	pb := AppendStoredLegacyMessage(PollPrefix{Partition: 1, CurrentOffset: 3, Count: 1}.Append(nil), &m)
	pm, err := binaryserialization.DeserializeFetchMessagesResponse(pb, iggcon.MESSAGE_COMPRESSION_NONE)
	if err != nil || len(pm.Messages) != 1 || string(pm.Messages[0].Payload) != "hi" || pm.Messages[0].Header.Offset != 3 {
		t.Fatalf("SDK reads our poll reply as %+v (%v)", pm, err)
	}
	pre, msgs, err := ParseLegacyPollReply(pb)
	if err != nil || pre.Count != 1 || len(msgs) != 1 || string(msgs[0].Headers) != string(m.Headers) || msgs[0].OriginTimestamp != 5 {
		t.Fatal(pre, msgs, err)
	}
	if st, n, err := ParseLegacyReplyHeader(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 2010), 0)); err != nil || st != StatusTopicIDNotFound || n != 0 {
		t.Fatal(st, n, err)
	}
	if _, _, err := ParseLegacyReplyHeader(AppendLegacyReply(nil, 1, []byte{1})); err == nil {
		t.Fatal("an error reply with a body was accepted")
	}
}
