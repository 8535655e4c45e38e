package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// The golden frames below are the worked example of the 0.10 protocol
// reference (binary protocol 0.12.0): stream "orders", topic "events",
// partition 0, client 0x00112233445566778899aabbccddeeff, session 1. The
// batch and frame checksums are the reference's, computed independently.

var goldenClient = ClientID{0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	s = strings.Join(strings.Fields(s), "")
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustName(t *testing.T, s string) Identifier {
	t.Helper()
	id, err := NamedID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// headerBytes returns a 256-byte header with the given (offset, bytes)
// patches, all else zero: the reference lists only non-zero bytes.
func headerBytes(patches map[int][]byte) []byte {
	h := make([]byte, HeaderSize)
	for off, b := range patches {
		copy(h[off:], b)
	}
	return h
}

func u64le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func u32le(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func TestGolden012LoginRegister(t *testing.T) {
	g := Register{Version: ProtocolVersion, SDKName: "go-sdk", SDKVersion: "0.10.0", User: "iggy", Password: "iggy"}
	for i := range g.BindSecret {
		g.BindSecret[i] = 0x5a
	}
	body := g.Append(nil)
	want := unhex(t, `00300000 06676f2d73646b 06302e31302e30`+strings.Repeat("5a", 32)+`0469676779 0469676779 00000000`)
	if !bytes.Equal(body, want) {
		t.Fatalf("login body\n got %x\nwant %x", body, want)
	}
	if got := BodyChecksum(body); got != 0x37ab836f077c9204 {
		t.Fatalf("request checksum %#x, reference 0x37ab836f077c9204", got)
	}
	frame := make([]byte, HeaderSize, HeaderSize+len(body))
	(&RequestHeader{Size: uint32(HeaderSize + len(body)), Client: goldenClient, Operation: OpRegister}).Put(frame)
	frame = append(frame, body...)
	wantHdr := headerBytes(map[int][]byte{0x30: {0x40, 0x01}, 0x3c: {5}, 0x80: goldenClient[:], 0xb0: {1}})
	if len(frame) != 320 || !bytes.Equal(frame[:HeaderSize], wantHdr) {
		t.Fatalf("login header (%d bytes)\n got %x\nwant %x", len(frame), frame[:HeaderSize], wantHdr)
	}
	q, err := ParseRequestHeader(frame)
	if err != nil || q.Operation != OpRegister || q.Code != CodeLoginRegister || q.Client != goldenClient {
		t.Fatalf("parse header: %+v %v", q, err)
	}
	back, err := ParseRegister(body)
	if err != nil || back != g {
		t.Fatalf("parse body: %+v %v", back, err)
	}
	g.User, g.Password, g.Token = "", "", "tok"
	back, err = ParseRegister(g.Append(nil))
	if err != nil || back.Token != "tok" || back.User != "" {
		t.Fatalf("token body: %+v %v", back, err)
	}
}

func TestGolden012LoginReply(t *testing.T) {
	body := unhex(t, `00000000 00000000 0100000000000000 00300000 06302e31302e30`)
	rep := RegisterReply{UserID: 0, Session: 1, ServerVersion: ProtocolVersion, ServerRelease: "0.10.0"}
	if got := rep.Append(nil); !bytes.Equal(got, body) {
		t.Fatalf("reply body\n got %x\nwant %x", got, body)
	}
	frame := make([]byte, HeaderSize)
	(&ReplyHeader{Size: 283, Client: goldenClient, Op: 1, Commit: 1, Operation: OpRegister}).Put(frame)
	wantHdr := headerBytes(map[int][]byte{0x30: {0x1b, 0x01}, 0x3c: {8}, 0xa0: goldenClient[:], 0xb0: {1}, 0xb8: {1}, 0xd0: {1}})
	if !bytes.Equal(frame, wantHdr) {
		t.Fatalf("reply header\n got %x\nwant %x", frame, wantHdr)
	}
	h, err := ParseReplyHeader(frame)
	if err != nil || h.Op != 1 || h.Commit != 1 || h.Operation != OpRegister || h.Size != 283 {
		t.Fatalf("parse header %+v %v", h, err)
	}
	for _, b := range [][]byte{body, body[4:]} { // framed and the 0.9 docs' unframed form
		got, err := ParseRegisterReply(b)
		if err != nil || got != rep {
			t.Fatalf("parse %x: %+v %v", b, got, err)
		}
	}
	if _, err := ParseRegisterReply(AppendResultError(nil, StatusInvalidCredentials)); err != StatusInvalidCredentials {
		t.Fatalf("rejection parsed as %v", err)
	}
}

// goldenSendBody is the reference's 428-byte SendMessages body.
var goldenSendBody = `
1a000000 02066f7264657273 02066576656e7473 020400000000 02000000
0000000000000000 0000000000000000 0000000000000000 0040204648470600
8e01000000000000 39dcf2833cbf41cc 02000000` + `00` /* flags */ + `
` + goldenReserved + `
b0f7627e22cd60fc 01000000000000000000000000000000 00000000 00000000 12000000 05000000 0000000000000000
68656c6c6f 02050000007472616365 0203000000616263
ad01bea8ee730102 02000000000000000000000000000000 01000000 dc050000 12000000 05000000 0000000000000000
776f726c64 02050000007472616365 0203000000646566`

var goldenReserved = strings.Repeat("00", 203)

type goldenMsg struct {
	id      byte
	origin  uint64
	payload string
	value   string
}

var goldenMsgs = []goldenMsg{{1, 1767225600000000, "hello", "abc"}, {2, 1767225600001500, "world", "def"}}

func goldenHeaders(v string) []byte {
	var b []byte
	b = append(b, KindString)
	b = appendStr32(b, "trace")
	b = append(b, KindString)
	return appendStr32(b, v)
}

func buildGoldenSend(t *testing.T) []byte {
	ids := mustName(t, "events").Append(mustName(t, "orders").Append(nil))
	b := AppendSendHead(nil, ids, 0, len(goldenMsgs))
	b, start := BeginBatch(b)
	origin := goldenMsgs[0].origin
	for i, m := range goldenMsgs {
		var id [16]byte
		id[0] = m.id
		b = AppendFrame(b, &id, uint32(i), uint32(m.origin-origin), []byte(m.payload), goldenHeaders(m.value))
	}
	FinishBatch(b, start, origin, uint32(len(goldenMsgs)))
	return b
}

func TestGolden012SendMessages(t *testing.T) {
	body := buildGoldenSend(t)
	want := unhex(t, goldenSendBody)
	if len(want) != 428 || !bytes.Equal(body, want) {
		t.Fatalf("send body (%d bytes, reference 428)\n got %x\nwant %x", len(body), body, want)
	}
	s, err := ParseSendBody(body)
	if err != nil || s.Stream.Str != "orders" || s.Topic.Str != "events" || s.Count != 2 || s.Kind != 2 {
		t.Fatalf("parse: %+v %v", s, err)
	}
	if err := VerifyBatch(s.Batch); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, HeaderSize)
	(&RequestHeader{Size: uint32(HeaderSize + len(body)), Client: goldenClient, Request: 1, Operation: OpSendMessages, Session: 1}).Put(frame)
	wantHdr := headerBytes(map[int][]byte{0x30: {0xac, 0x02}, 0x3c: {5}, 0x80: goldenClient[:], 0xa8: {1}, 0xb0: {0xa0}, 0xb8: {1}})
	if !bytes.Equal(frame, wantHdr) {
		t.Fatalf("send header\n got %x\nwant %x", frame, wantHdr)
	}
	// A corrupted payload byte fails its frame checksum; a corrupted
	// frame checksum fails the frame; a changed origin fails the batch.
	for _, c := range []struct {
		at   int
		want Status
	}{{0x14e - 0x1e, StatusInvalidMessageChecksum}, {0x11e - 0x1e, StatusInvalidMessageChecksum}, {0x036 - 0x1e, StatusInvalidBatchChecksum}} {
		bad := bytes.Clone(s.Batch)
		bad[c.at] ^= 1
		if err := VerifyBatch(bad); !errorsIsStatus(err, c.want) {
			t.Fatalf("corrupt byte %#x: %v, want status %d", c.at, err, c.want)
		}
	}
	reply := AppendConfirmations(nil, []Confirmation{{0, 0, 0, 0}})
	if !bytes.Equal(reply, unhex(t, `01000000 00000000 00000000 00000000 0000000000000000`)) {
		t.Fatalf("confirmations %x", reply)
	}
	cs, err := ParseConfirmations(reply)
	if err != nil || len(cs) != 1 {
		t.Fatal(cs, err)
	}
}

func TestGolden012Poll(t *testing.T) {
	part := uint32(0)
	p := Poll{Consumer: Consumer{Kind: ConsumerSingle, ID: NumericID(7)}, Stream: mustName(t, "orders"), Topic: mustName(t, "events"),
		Partition: &part, Strategy: PollOffset, Value: 0, Count: 10}
	body := p.Append(nil)
	want := unhex(t, `01 01 04 07000000 02066f7264657273 02066576656e7473 0100000000 010000000000000000 0a000000 00`)
	if len(body) != 42 || !bytes.Equal(body, want) {
		t.Fatalf("poll body\n got %x\nwant %x", body, want)
	}
	frame := make([]byte, HeaderSize)
	(&RequestHeader{Size: uint32(HeaderSize + len(body)), Client: goldenClient, Request: 1, Operation: OpNonReplicated, Session: 1, Code: CodePollMessages}).Put(frame)
	wantHdr := headerBytes(map[int][]byte{0x30: {0x2a, 0x01}, 0x3c: {5}, 0x80: goldenClient[:], 0xa8: {1}, 0xb0: {2}, 0xb8: {1}, 0xc4: {100}})
	if !bytes.Equal(frame, wantHdr) {
		t.Fatalf("poll header\n got %x\nwant %x", frame, wantHdr)
	}
	back, err := ParsePoll(body, ConsumerExternal)
	if err != nil || *back.Partition != 0 || back.Count != 10 || back.Consumer.ID.Num != 7 {
		t.Fatalf("parse: %+v %v", back, err)
	}

	// The reply: the stored batch as the server stamps it.
	send, _ := ParseSendBody(buildGoldenSend(t))
	batch := bytes.Clone(send.Batch)
	StampBatch(batch, 0, 0, 1767225600250000)
	if got := binary.LittleEndian.Uint64(batch[40:]); got != 0x15383af4f8a721fe {
		t.Fatalf("stamped batch checksum %#x, reference 0x15383af4f8a721fe", got)
	}
	reply := PollPrefix{Partition: 0, CurrentOffset: 1, Count: 2}.Append(nil)
	reply = append(reply, batch...)
	if len(reply) != 414 {
		t.Fatalf("poll reply body of %d bytes, reference 414", len(reply))
	}
	wantPrefix := unhex(t, `00000000 0100000000000000 02000000 0000000000000000 0000000000000000 9010244648470600 0040204648470600 8e01000000000000 fe21a7f8f43a3815 02000000`)
	if !bytes.Equal(reply[:len(wantPrefix)], wantPrefix) {
		t.Fatalf("poll reply\n got %x\nwant %x", reply[:len(wantPrefix)], wantPrefix)
	}
	for _, withCtx := range []bool{false, true} {
		r := reply
		if withCtx { // the crate 0.11.1-edge form: a 24-byte context after the prefix
			r = append(append(bytes.Clone(reply[:16]), PartitionContext{3, 0, 9}.Append(nil)...), reply[16:]...)
		}
		pre, ctx, batches, err := ParsePollReply(r)
		if err != nil || pre.Count != 2 || pre.CurrentOffset != 1 || (ctx != nil) != withCtx || len(batches) != 398 {
			t.Fatalf("parse reply (context %v): %+v %v %d %v", withCtx, pre, ctx, len(batches), err)
		}
		var got []string
		if _, err := Frames(batches, func(h *BatchHeader, f *Frame) error {
			got = append(got, string(f.Payload)+"@"+string(rune('0'+h.BaseOffset+uint64(f.OffsetDelta))))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != "hello@0,world@1" {
			t.Fatalf("frames %v", got)
		}
		if err := VerifyBatch(batches); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGolden012Eviction(t *testing.T) {
	e := Eviction{Client: goldenClient, MaxVersion: 0x2C00, MinVersion: 0x2C00, Reason: EvictIncompatibleProtocol}
	h := make([]byte, HeaderSize)
	e.Put(h)
	want := headerBytes(map[int][]byte{0x30: {0, 1}, 0x3c: {13}, 0x80: goldenClient[:], 0x90: {0, 0x2c}, 0x94: {0, 0x2c}, 0xff: {14}})
	if !bytes.Equal(h, want) {
		t.Fatalf("eviction\n got %x\nwant %x", h, want)
	}
	back, err := ParseEviction(h)
	if err != nil || back != e {
		t.Fatal(back, err)
	}
	msg := back.Error()
	if !strings.Contains(msg, "0.11.0..0.11.0") || !strings.Contains(msg, "speaks 0.12.0") {
		t.Fatalf("message %q does not name both versions", msg)
	}
}

func TestGolden012Admin(t *testing.T) {
	stream := mustName(t, "orders")
	ct := CreateTopic{Stream: stream, Partitions: 3, Name: "events", Expiry: 1000, MaxSize: 0}
	body := ct.Append(nil, V012)
	want := unhex(t, `02066f7264657273 03000000 066576656e7473 02 0e000000 6d6573736167655f657870697279 0c 08000000 e803000000000000`)
	if !bytes.Equal(body, want) {
		t.Fatalf("create topic\n got %x\nwant %x", body, want)
	}
	back, err := ParseCreateTopic(body, V012)
	if err != nil || back.Name != "events" || back.Expiry != 1000 || back.Partitions != 3 {
		t.Fatal(back, err)
	}
	si := StreamInfo{ID: 1, CreatedAt: 2, TopicsCount: 1, Name: "orders"}
	ti := TopicInfo{ID: 0, CreatedAt: 3, PartitionsCount: 2, Name: "events", Compression: 1}
	b := AppendTopic(AppendStream(nil, &si, V012), &ti, V012)
	got, ok, err := ParseStream(b, V012)
	if err != nil || !ok || got.Name != "orders" || len(got.Topics) != 1 || got.Topics[0].Name != "events" {
		t.Fatal(got, err)
	}
	tb := AppendTopic(nil, &ti, V012)
	for i := range 2 {
		tb = AppendPartition(tb, &PartitionInfo{ID: uint32(i), Context: PartitionContext{Incarnation: 5}}, V012)
	}
	gt, ok, err := ParseTopic(tb, V012)
	if err != nil || !ok || len(gt.Partitions) != 2 || gt.Partitions[1].Context.Incarnation != 5 {
		t.Fatal(gt, err)
	}
	// The 40-byte (0.9) partition entries are accepted too.
	tb = AppendTopic(nil, &ti, V012)
	for i := range 2 {
		tb = AppendPartition(tb, &PartitionInfo{ID: uint32(i)}, Legacy)
	}
	if gt, ok, err = ParseTopic(tb, V012); err != nil || !ok || len(gt.Partitions) != 2 {
		t.Fatal(gt, err)
	}
	so := StoreOffset{OffsetRef: OffsetRef{Consumer: Consumer{ConsumerSingle, NumericID(7)}, Stream: stream, Topic: mustName(t, "events")}, Offset: 5, Ack: 1}
	sb := so.Append(nil, V012)
	if sb[len(sb)-1] != 1 || len(sb) != len(so.Append(nil, Legacy))+1 {
		t.Fatalf("store offset %x", sb)
	}
	if back, err := ParseStoreOffset(sb, V012); err != nil || back.Offset != 5 || back.Ack != 1 {
		t.Fatal(back, err)
	}
	payload, st, err := ParseResult(AppendResultOK(nil))
	if err != nil || st != 0 || len(payload) != 0 {
		t.Fatal(payload, st, err)
	}
	nodes := []Node{{Name: "iggy-0", IP: "127.0.0.1", TCP: 8090}}
	name, back2, err := ParseClusterMetadata(AppendClusterMetadata(nil, "c", nodes))
	if err != nil || name != "c" || len(back2) != 1 || back2[0] != nodes[0] {
		t.Fatal(back2, err)
	}
}

func errorsIsStatus(err error, st Status) bool {
	var got Status
	return err != nil && errors.As(err, &got) && got == st
}
