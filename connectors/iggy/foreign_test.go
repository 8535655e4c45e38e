package iggy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"pgregory.net/rapid"

	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream/connector"
)

// normal is f as the foreign decoder reports it: a String name and a Raw
// value are the default kinds (0).
func normal(f connector.Field) connector.Field {
	if f.NameKind == connector.FieldString {
		f.NameKind = 0
	}
	if f.ValueKind == connector.FieldRaw {
		f.ValueKind = 0
	}
	return f
}

func genField(t *rapid.T, label string) connector.Field {
	return connector.Field{
		Name:      string(rapid.SliceOfN(rapid.Byte(), 1, 255).Draw(t, label+" name")),
		Value:     rapid.SliceOfN(rapid.Byte(), 1, 255).Draw(t, label+" value"),
		NameKind:  connector.FieldKind(rapid.IntRange(0, 15).Draw(t, label+" name kind")),
		ValueKind: connector.FieldKind(rapid.IntRange(0, 15).Draw(t, label+" value kind")),
	}
}

// A foreign decoder gives every record its raw message: the id and every
// user header, kinds kept, exactly what appendFields wrote (the sink's and
// a replay's encoding), and parses no strand headers.
func TestForeignDecodeRoundTrip(t *testing.T) {
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, partition: 2, foreign: true}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(t, "messages")
		ms := make([]testMsg, n)
		want := make([][]connector.Field, n)
		for i := range ms {
			var fs []connector.Field
			for j := range rapid.IntRange(0, 12).Draw(t, fmt.Sprint("headers ", i)) {
				fs = append(fs, genField(t, fmt.Sprint(i, "/", j)))
			}
			if rapid.Bool().Draw(t, fmt.Sprint("strand headers ", i)) {
				fs = append(fs, connector.Field{Name: connector.HeaderKey, Value: []byte("k")})
			}
			uh, err := appendFields(nil, fs)
			if err != nil {
				t.Fatal(err)
			}
			ms[i] = testMsg{offset: uint64(10 + i), ts: 99, payload: []byte{byte(i)}, headers: uh}
			want[i] = []connector.Field{}
			for _, f := range fs {
				want[i] = append(want[i], normal(f))
			}
		}
		recs, _, err := d.decode(buildReply(2, ms), 10)
		if err != nil || len(recs) != n {
			t.Fatalf("decode: %d records, %v", len(recs), err)
		}
		for i, r := range recs {
			if r.HeaderErr != nil || len(r.Headers.Key) != 0 || r.Raw == nil {
				t.Fatalf("record %d: header error %v, headers %+v, raw %v", i, r.HeaderErr, r.Headers, r.Raw)
			}
			if r.Raw.ID != [16]byte{1} {
				t.Fatalf("record %d: id %x", i, r.Raw.ID)
			}
			if !reflect.DeepEqual(r.Raw.Headers, want[i]) {
				t.Fatalf("record %d: headers %+v, want %+v", i, r.Raw.Headers, want[i])
			}
			// What a replay writes is the block the producer wrote.
			if back, err := appendFields(nil, r.Raw.Headers); err != nil || !bytes.Equal(back, ms[i].headers) {
				t.Fatalf("record %d: re-encoded %x (%v), want %x", i, back, err, ms[i].headers)
			}
		}
	})
}

func TestForeignDecodeCases(t *testing.T) {
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, partition: 0, foreign: true}
	tp := []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	good := appendTLV(nil, connector.HeaderTraceParent, tp)
	ms := []testMsg{
		{offset: 0, ts: 1, payload: []byte(`{"a":1}`)},                        // no headers at all
		{offset: 1, ts: 1, payload: []byte("x"), headers: good},               // a traceparent
		{offset: 2, ts: 1, payload: []byte("y"), headers: good[:len(good)-3]}, // truncated block
		{offset: 3, ts: 1, payload: []byte("z"), headers: strandTLV("k", 4)},  // strand headers: not parsed
	}
	recs, _, err := d.decode(buildReply(0, ms), 0)
	if err != nil || len(recs) != 4 {
		t.Fatalf("decode: %d records, %v", len(recs), err)
	}
	if r := recs[0]; r.HeaderErr != nil || r.Raw == nil || r.Raw.Headers == nil || len(r.Raw.Headers) != 0 {
		t.Errorf("no headers: %+v", r)
	}
	if r := recs[1]; r.HeaderErr != nil || !bytes.Equal(r.Headers.TraceParent, tp) || len(r.Raw.Headers) != 1 {
		t.Errorf("traceparent: %+v", r)
	}
	if r := recs[2]; !errors.Is(r.HeaderErr, connector.ErrBadHeaders) || r.Raw == nil || r.Raw.Headers != nil || r.Headers.TraceParent != nil {
		t.Errorf("truncated: %+v", r)
	}
	if r := recs[3]; r.HeaderErr != nil || len(r.Headers.Key) != 0 || len(r.Raw.Headers) != 4 {
		t.Errorf("strand headers: %+v", r)
	}
}

// The foreign decoder costs the records, their raw messages and their
// header fields: three allocations per reply, none per message.
func TestForeignDecodeAllocations(t *testing.T) {
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, foreign: true}
	ms := foreignMsgs(1000)
	reply := buildReply(0, ms)
	allocs := testing.AllocsPerRun(20, func() {
		if recs, _, err := d.decode(reply, 0); err != nil || len(recs) != len(ms) || recs[999].Raw == nil {
			t.Fatal(len(recs), err)
		}
	})
	if allocs > 3 {
		t.Fatalf("%v allocations per decode of %d messages, want at most 3", allocs, len(ms))
	}
}

// foreignMsgs are n JSON messages with two String headers each, as a
// plain producer writes them.
func foreignMsgs(n int) []testMsg {
	ms := make([]testMsg, n)
	for i := range ms {
		uh, _ := appendFields(nil, []connector.Field{
			{Name: "content-type", Value: []byte("application/json"), ValueKind: connector.FieldString},
			{Name: "event-type", Value: []byte("order.placed"), ValueKind: connector.FieldString},
		})
		ms[i] = testMsg{offset: uint64(i), ts: 1, payload: fmt.Appendf(nil, `{"order":"o-%d","amount":%d,"note":"%080d"}`, i%97, i, 0), headers: uh}
	}
	return ms
}

// FuzzForeignDecode: no reply makes the foreign decoder panic; every
// record it delivers has a raw message, and headers within Iggy's limits
// unless HeaderErr says the block was malformed.
func FuzzForeignDecode(f *testing.F) {
	f.Add(buildReply(0, foreignMsgs(3)), uint64(0))
	f.Add(buildReply(0, msgsFrom(0, 1, 2)), uint64(0))
	ms := msgsFrom(0, 1)
	ms[0].headers = []byte{2, 255, 255, 255, 255}
	f.Add(buildReply(0, ms), uint64(0))
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, partition: 1, foreign: true}
	f.Fuzz(func(t *testing.T, reply []byte, want uint64) {
		recs, _, err := d.decode(reply, want)
		if err != nil {
			return
		}
		for i, r := range recs {
			if r.Raw == nil || len(r.Headers.Key) != 0 {
				t.Fatalf("record %d: raw %v headers %+v", i, r.Raw, r.Headers)
			}
			if r.HeaderErr != nil {
				continue
			}
			for _, h := range r.Raw.Headers {
				if len(h.Name) == 0 || len(h.Name) > 255 || len(h.Value) == 0 || len(h.Value) > 255 || !h.NameKind.Valid() || !h.ValueKind.Valid() {
					t.Fatalf("record %d: header %+v", i, h)
				}
			}
		}
	})
}

// A plain producer on the official SDK (typed headers, messages-key
// partitioning, its own ids) writes a topic; a foreign Source reads each
// message back with its id, its headers and their kinds as the SDK
// decodes them.
func TestForeignSourceReadsWhatTheSDKWrote(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 3)
	tg.sdk08(t)
	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(tg.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	if _, err := sdk.LoginUser(tg.user, tg.pass); err != nil {
		t.Fatal(err)
	}
	sid, _ := iggcon.NewIdentifier(s)
	tid, _ := iggcon.NewIdentifier(topic)
	nameKey, _ := iggcon.NewHeaderKeyString("content-type")
	var sent []iggcon.IggyMessage
	for i := range 12 {
		hs := []iggcon.HeaderEntry{
			{Key: nameKey, Value: iggcon.HeaderValue{Kind: iggcon.String, Value: []byte("application/json")}},
			{Key: iggcon.NewHeaderKeyInt32(int32(i)), Value: iggcon.HeaderValue{Kind: iggcon.Uint64, Value: []byte{byte(i), 0, 0, 0, 0, 0, 0, 0}}},
		}
		m, err := iggcon.NewIggyMessage(fmt.Appendf(nil, `{"n":%d}`, i), iggcon.WithID([16]byte{byte(i + 1)}), iggcon.WithUserHeaders(hs))
		if err != nil {
			t.Fatal(err)
		}
		key, _ := iggcon.EntityIdString(fmt.Sprintf("order-%d", i%4))
		if err := sdk.SendMessages(sid, tid, key, []iggcon.IggyMessage{m}); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m)
	}
	cs, err := c.OpenForeignSource(context.Background(), s+"/"+topic)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for p := range uint32(3) {
		wantN := 0
		for i := range sent {
			if xxh32.Partition([]byte(fmt.Sprintf("order-%d", i%4)), 3) == p {
				wantN++
			}
		}
		if wantN == 0 {
			continue
		}
		r, err := cs.Open(context.Background(), p, 0)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := r.Poll(ctxT(t, 10*time.Second), 100)
		r.Close()
		if err != nil || len(recs) != wantN {
			t.Fatalf("partition %d: %d records (%v), want %d", p, len(recs), err, wantN)
		}
		for _, rec := range recs {
			i := int(rec.Raw.ID[0]) - 1
			if i < 0 || i >= len(sent) || !bytes.Equal(rec.Payload, sent[i].Payload) || rec.HeaderErr != nil {
				t.Fatalf("record %+v", rec)
			}
			want, err := iggcon.DeserializeHeaders(sent[i].UserHeaders)
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.Raw.Headers) != len(want) {
				t.Fatalf("record %d: %d headers, want %d", i, len(rec.Raw.Headers), len(want))
			}
			for j, h := range rec.Raw.Headers {
				wk, wv := want[j].Key, want[j].Value
				wf := normal(connector.Field{NameKind: connector.FieldKind(wk.Kind), ValueKind: connector.FieldKind(wv.Kind)})
				if h.Name != string(wk.Value) || !bytes.Equal(h.Value, wv.Value) || h.NameKind != wf.NameKind || h.ValueKind != wf.ValueKind {
					t.Fatalf("record %d header %d: %+v, want %+v", i, j, h, want[j])
				}
			}
			got++
		}
	}
	if got != len(sent) {
		t.Fatalf("read %d of %d messages", got, len(sent))
	}
}

// A sink writes a field's kinds and honours an explicit partition; Tail
// reads the kinds back and Sent looks in that partition.
func TestSinkKindsAndPartition(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 4)
	ctx := ctxT(t, 20*time.Second)
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	hs := []connector.Field{
		{Name: "a", Value: []byte("x")},
		{Name: "\x07\x00\x00\x00", Value: []byte{1, 0, 0, 0, 0, 0, 0, 0}, NameKind: connector.FieldInt32, ValueKind: connector.FieldUint64},
		{Name: "s", Value: []byte("text"), ValueKind: connector.FieldString},
	}
	key := []byte("some key")
	target := (sink.PartitionOf(key) + 1) % 4
	m := connector.Message{Key: key, ID: MessageID([]byte("kinds")), Headers: hs, Payload: []byte("p"), Partition: target, HasPartition: true}
	if sent, err := sink.Sent(ctx, []connector.Message{m}); err != nil || sent[0] {
		t.Fatalf("Sent before: %v %v", sent, err)
	}
	if err := sink.Send(ctx, []connector.Message{m}); err != nil {
		t.Fatal(err)
	}
	tail, err := sink.Tail(ctx, target, 10)
	if err != nil || len(tail) != 1 {
		t.Fatalf("Tail of partition %d: %d messages, %v", target, len(tail), err)
	}
	if !reflect.DeepEqual(tail[0].Headers, hs) {
		t.Fatalf("headers read back %+v, want %+v", tail[0].Headers, hs)
	}
	if sent, err := sink.Sent(ctx, []connector.Message{m}); err != nil || !sent[0] {
		t.Fatalf("Sent after: %v %v", sent, err)
	}
	bad := m
	bad.Partition = 4
	if err := sink.Send(ctx, []connector.Message{bad}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("Send to partition 4 of 4: %v", err)
	}
	badKind := m
	badKind.Headers = []connector.Field{{Name: "a", Value: []byte("x"), ValueKind: 16}}
	if err := sink.Send(ctx, []connector.Message{badKind}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("Send with kind 16: %v", err)
	}
}
