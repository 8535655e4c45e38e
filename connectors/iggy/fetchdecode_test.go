package iggy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	binaryserialization "github.com/apache/iggy/foreign/go/binary_serialization"
	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// sdkRecords is what Reader.Poll did before it decoded replies itself: the
// SDK's decoded messages turned into records, delivering only the
// contiguous run that starts at want. It is the reference the new decoder
// is checked and measured against.
func sdkRecords(t topicRef, partition uint32, ms []iggcon.IggyMessage, want uint64) ([]connector.Record, error) {
	for len(ms) > 0 && ms[0].Header.Offset < want {
		ms = ms[1:]
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%w: the broker returned only earlier offsets", ErrProtocol)
	}
	if got := ms[0].Header.Offset; got != want {
		return nil, fmt.Errorf("%w: the log continues at %d", ErrOffsetGap, got)
	}
	n := 1
	for n < len(ms) && ms[n].Header.Offset == want+uint64(n) {
		n++
	}
	ms = ms[:n]
	recs := make([]connector.Record, n)
	for i := range ms {
		m := &ms[i]
		rec := &recs[i]
		rec.Partition = partition
		rec.Offset = m.Header.Offset
		rec.Timestamp = m.Header.Timestamp
		rec.Payload = m.Payload[:len(m.Payload):len(m.Payload)]
		h, err := parseStrandHeaders(m.UserHeaders)
		if err != nil {
			rec.HeaderErr = strerr.Errorf("strand: iggy: %s partition %d offset %d: %w", t, partition, rec.Offset, err)
		} else {
			rec.Headers = h
		}
	}
	return recs, nil
}

// sdkPoll polls on r's connection through the reference path: the whole
// reply decoded by package wire into the SDK's message type (session.poll),
// not the readers' in-place decoder. (Package wire's golden tests check its
// legacy layouts against the SDK v0.8.0's own decoders.)
func sdkPoll(ctx context.Context, r *Reader, offset uint64, count int) ([]connector.Record, error) {
	s := r.src
	var polled *iggcon.PolledMessage
	err := r.k.call(ctx, func(c *session) error {
		var err error
		polled, err = c.poll(s.t, r.partition, offset, uint32(count))
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(polled.Messages) == 0 {
		return nil, nil
	}
	return sdkRecords(s.t, r.partition, polled.Messages, offset)
}

// newPoll polls through the connector's own encoding and decoding.
func newPoll(ctx context.Context, r *Reader, offset uint64, count int) ([]connector.Record, error) {
	reply, err := r.poll(ctx, offset, count)
	if err != nil {
		return nil, err
	}
	recs, _, err := r.dec.decode(reply, offset)
	return recs, err
}

// randomHeaders returns a user-header block: valid strand headers, strand
// headers among foreign ones, none, a broken strand header, or garbage.
func randomHeaders(rng *rand.Rand) []byte {
	key := make([]byte, 1+rng.IntN(40))
	for i := range key {
		key[i] = byte('a' + rng.IntN(26))
	}
	h := connector.Headers{Key: key, Tag: planner.Tag(rng.Uint32()), Ordering: planner.Relaxed, Algebra: algebra.Associative}
	if rng.IntN(2) == 0 {
		h.Seq, h.HasSeq = rng.Uint64(), true
	}
	switch rng.IntN(6) {
	case 0, 1:
		b, _ := appendStrandHeaders(nil, &h)
		return b
	case 2:
		b := appendTLV(nil, "trace-id", []byte("0123456789"))
		b, _ = appendStrandHeaders(b, &h)
		return appendTLV(b, "z", []byte{1})
	case 3:
		return nil
	case 4:
		b, _ := appendStrandHeaders(nil, &h)
		return b[:len(b)-1-rng.IntN(5)] // truncated
	default:
		b := appendTLV(nil, connector.HeaderKey, key)
		return appendTLV(b, connector.HeaderKey, key) // twice
	}
}

// sendRaw publishes messages with the given payloads and raw user-header
// blocks to one partition, through the SDK, in batches.
func sendRaw(t testing.TB, c *Client, s, topic string, part uint32, payloads, headers [][]byte) {
	t.Helper()
	ref, err := newTopicRef(s, topic)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	for start := 0; start < len(payloads); start += 500 {
		end := min(start+500, len(payloads))
		ms := make([]iggcon.IggyMessage, 0, end-start)
		for i := start; i < end; i++ {
			var id [16]byte
			binary.LittleEndian.PutUint64(id[:], uint64(i+1))
			ms = append(ms, iggcon.IggyMessage{
				Header: iggcon.MessageHeader{
					Id: id, OriginTimestamp: uint64(time.Now().UnixMicro()),
					UserHeaderLength: uint32(len(headers[i])), PayloadLength: uint32(len(payloads[i])),
				},
				Payload: payloads[i], UserHeaders: headers[i],
			})
		}
		err := c.admin.callOnce(ctx, func(s *session) error {
			_, err := s.send(ref, uint32(part), encodeSend(nil, s.proto, sendHead(ref.ids()), uint32(part), ms))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sameRecords reports the first difference between two record slices;
// HeaderErr is compared by its message.
func sameRecords(a, b []connector.Record) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d records vs %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if (x.HeaderErr == nil) != (y.HeaderErr == nil) || (x.HeaderErr != nil && x.HeaderErr.Error() != y.HeaderErr.Error()) {
			return fmt.Errorf("record %d: HeaderErr %v vs %v", i, x.HeaderErr, y.HeaderErr)
		}
		x.HeaderErr, y.HeaderErr = nil, nil
		if !reflect.DeepEqual(x, y) {
			return fmt.Errorf("record %d:\n%+v\nvs\n%+v", i, x, y)
		}
		if cap(x.Payload) != len(x.Payload) || cap(x.Headers.Key) != len(x.Headers.Key) {
			return fmt.Errorf("record %d: payload or key capacity reaches past its bytes", i)
		}
	}
	return nil
}

// TestFetchDecodeMatchesSDK publishes random messages with random headers
// (valid, foreign, missing, malformed) to the broker and checks that the
// connector's poll path returns exactly what the SDK path returns, from
// random offsets with random counts (more with STRAND_SOAK=1), and that
// polling past the end is empty on both.
func TestFetchDecodeMatchesSDK(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 2)
	rng := rand.New(rand.NewPCG(17, uint64(time.Now().UnixNano())))
	const n = 3000
	payloads, headers := make([][]byte, n), make([][]byte, n)
	for i := range n {
		payloads[i] = make([]byte, 1+rng.IntN(300))
		for j := range payloads[i] {
			payloads[i][j] = byte(rng.Uint32())
		}
		headers[i] = randomHeaders(rng)
	}
	sendRaw(t, c, s, topic, 1, payloads, headers)
	src, err := NewSource(c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	r := open(t, src, 1, 0)
	ctx := ctxT(t, 60*time.Second)
	compare := func(offset uint64, count int) []connector.Record {
		t.Helper()
		want, werr := sdkPoll(ctx, r, offset, count)
		got, gerr := newPoll(ctx, r, offset, count)
		if werr != nil || gerr != nil {
			t.Fatalf("poll at %d count %d: sdk error %v, new error %v", offset, count, werr, gerr)
		}
		if err := sameRecords(want, got); err != nil {
			t.Fatalf("poll at %d count %d: %v", offset, count, err)
		}
		return got
	}
	// The whole partition in order, in random batch sizes.
	bad := 0
	for off := uint64(0); off < n; {
		recs := compare(off, 1+rng.IntN(700))
		if len(recs) == 0 {
			t.Fatalf("no records at %d", off)
		}
		for i, rec := range recs {
			if !bytes.Equal(rec.Payload, payloads[off+uint64(i)]) {
				t.Fatalf("offset %d: payload differs from what was sent", rec.Offset)
			}
			if rec.HeaderErr != nil {
				bad++
			}
		}
		off += uint64(len(recs))
	}
	if bad == 0 || bad == n {
		t.Fatalf("%d of %d records have header errors; the test means to mix both", bad, n)
	}
	// Random offsets and counts: 8 in the default run, 50 with STRAND_SOAK=1
	// (each reads about 1,500 records through both paths).
	for range sized(8, 50) {
		compare(uint64(rng.IntN(n)), 1+rng.IntN(5000))
	}
	if recs := compare(n, 10); len(recs) != 0 {
		t.Fatalf("past the end: %d records", len(recs))
	}
	if recs := compare(0, 0); len(recs) != 0 {
		t.Fatalf("count 0: %d records", len(recs))
	}
	// The empty partition.
	r0 := open(t, src, 0, 0)
	if want, got := compareEmpty(ctx, t, r0); want != 0 || got != 0 {
		t.Fatalf("empty partition: sdk %d, new %d records", want, got)
	}
	// And Poll itself delivers the same as the SDK.
	r2 := open(t, src, 1, 123)
	recs, err := r2.Poll(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sdkPoll(ctx, r, 123, 300)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameRecords(want, recs); err != nil {
		t.Fatal(err)
	}
	if r2.Next() != 123+uint64(len(recs)) {
		t.Fatalf("Next is %d after %d records from 123", r2.Next(), len(recs))
	}
}

func compareEmpty(ctx context.Context, t *testing.T, r *Reader) (int, int) {
	t.Helper()
	want, err := sdkPoll(ctx, r, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	got, err := newPoll(ctx, r, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	return len(want), len(got)
}

// TestPollRequestEncoding checks the request frame byte by byte against
// the protocol's layout.
func TestPollRequestEncoding(t *testing.T) {
	ref, err := newTopicRef("bank", "accounts")
	if err != nil {
		t.Fatal(err)
	}
	cid, _ := iggcon.NewIdentifier("strand")
	q, err := newPollRequest(iggcon.NewSingleConsumer(cid), ref, 7)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	want = append(want, 1, 2, 6)
	want = append(want, "strand"...)
	want = append(want, 2, 4)
	want = append(want, "bank"...)
	want = append(want, 2, 8)
	want = append(want, "accounts"...)
	want = append(want, 1, 7, 0, 0, 0) // partition 7
	want = append(want, 1)             // Offset strategy
	want = binary.LittleEndian.AppendUint64(want, 0x0102030405060708)
	want = binary.LittleEndian.AppendUint32(want, 4096)
	want = append(want, 0) // no auto-commit
	if got := q.at(0x0102030405060708, 4096); !bytes.Equal(got, want) {
		t.Fatalf("frame\n%x\nwant\n%x", got, want)
	}
	if got := q.at(9, 1); binary.LittleEndian.Uint64(got[len(got)-13:]) != 9 || binary.LittleEndian.Uint32(got[len(got)-5:]) != 1 {
		t.Fatalf("re-patched frame %x", got)
	}
}

// testMsg is one message of a hand-built reply.
type testMsg struct {
	offset, ts uint64
	payload    []byte
	headers    []byte
}

// buildReply encodes a PollMessages reply payload holding msgs.
func buildReply(partition uint32, msgs []testMsg) []byte {
	b := binary.LittleEndian.AppendUint32(nil, partition)
	var cur uint64
	if len(msgs) > 0 {
		cur = msgs[len(msgs)-1].offset
	}
	b = binary.LittleEndian.AppendUint64(b, cur)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(msgs)))
	for _, m := range msgs {
		var h [msgHeaderSize]byte
		binary.LittleEndian.PutUint64(h[0:], 0xfeed)
		h[8] = 1
		binary.LittleEndian.PutUint64(h[24:], m.offset)
		binary.LittleEndian.PutUint64(h[32:], m.ts)
		binary.LittleEndian.PutUint64(h[40:], m.ts-1)
		binary.LittleEndian.PutUint32(h[48:], uint32(len(m.headers)))
		binary.LittleEndian.PutUint32(h[52:], uint32(len(m.payload)))
		b = append(b, h[:]...)
		b = append(b, m.payload...)
		b = append(b, m.headers...)
	}
	return b
}

func strandTLV(key string, seq uint64) []byte {
	h := connector.Headers{Key: []byte(key), Tag: 3, Ordering: planner.Relaxed, Algebra: algebra.Associative, Seq: seq, HasSeq: true}
	b, _ := appendStrandHeaders(nil, &h)
	return b
}

func msgsFrom(offsets ...uint64) []testMsg {
	ms := make([]testMsg, len(offsets))
	for i, o := range offsets {
		ms[i] = testMsg{offset: o, ts: 1000 + o, payload: []byte(fmt.Sprintf("p%d", o)), headers: strandTLV(fmt.Sprintf("k%d", o), o)}
	}
	return ms
}

func TestFetchDecodeCases(t *testing.T) {
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, partition: 3}
	t.Run("contiguous", func(t *testing.T) {
		reply := buildReply(3, msgsFrom(5, 6, 7))
		recs, info, err := d.decode(reply, 5)
		if err != nil || len(recs) != 3 || info.count != 3 || info.currentOffset != 7 || info.partition != 3 {
			t.Fatalf("%d records, %+v, %v", len(recs), info, err)
		}
		for i, r := range recs {
			o := uint64(5 + i)
			if r.Offset != o || r.Partition != 3 || r.Timestamp != 1000+o || string(r.Payload) != fmt.Sprintf("p%d", o) ||
				string(r.Headers.Key) != fmt.Sprintf("k%d", o) || r.Headers.Seq != o || r.HeaderErr != nil {
				t.Fatalf("record %d: %+v", i, r)
			}
		}
		// Matches the SDK's decoder.
		polled, err := binaryserialization.DeserializeFetchMessagesResponse(reply, iggcon.MESSAGE_COMPRESSION_NONE)
		if err != nil {
			t.Fatal(err)
		}
		want, err := sdkRecords(ref, 3, polled.Messages, 5)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameRecords(want, recs); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("hole inside stops the batch", func(t *testing.T) {
		recs, _, err := d.decode(buildReply(3, msgsFrom(5, 6, 8, 9)), 5)
		if err != nil || len(recs) != 2 {
			t.Fatalf("%d records, %v", len(recs), err)
		}
	})
	t.Run("earlier offsets are skipped", func(t *testing.T) {
		recs, _, err := d.decode(buildReply(3, msgsFrom(3, 4, 5, 6)), 5)
		if err != nil || len(recs) != 2 || recs[0].Offset != 5 {
			t.Fatalf("%d records, %v", len(recs), err)
		}
	})
	t.Run("only earlier offsets", func(t *testing.T) {
		_, _, err := d.decode(buildReply(3, msgsFrom(3, 4)), 5)
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("gap", func(t *testing.T) {
		_, _, err := d.decode(buildReply(3, msgsFrom(9, 10)), 5)
		if !errors.Is(err, ErrOffsetGap) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		for _, reply := range [][]byte{nil, buildReply(3, nil)} {
			recs, _, err := d.decode(reply, 5)
			if err != nil || recs != nil {
				t.Fatalf("%d records, %v", len(recs), err)
			}
		}
	})
	t.Run("bad headers are delivered with HeaderErr", func(t *testing.T) {
		ms := msgsFrom(5, 6)
		ms[1].headers = ms[1].headers[:7]
		recs, _, err := d.decode(buildReply(3, ms), 5)
		if err != nil || len(recs) != 2 || recs[0].HeaderErr != nil || !errors.Is(recs[1].HeaderErr, connector.ErrBadHeaders) {
			t.Fatalf("%d records, %v", len(recs), err)
		}
	})
	malformed := map[string][]byte{
		"short prefix":     buildReply(3, nil)[:10],
		"count too large":  func() []byte { b := buildReply(3, msgsFrom(5)); b[12] = 2; return b }(),
		"count too small":  func() []byte { b := buildReply(3, msgsFrom(5, 6)); b[12] = 1; return b }(),
		"huge count":       func() []byte { b := buildReply(3, msgsFrom(5)); b[15] = 0xff; return b }(),
		"truncated header": buildReply(3, msgsFrom(5, 6))[:fetchPrefixSize+msgHeaderSize+30],
		"truncated body":   func() []byte { b := buildReply(3, msgsFrom(5)); return b[:len(b)-1] }(),
		"trailing bytes":   append(buildReply(3, msgsFrom(5)), 0),
		"bytes after none": append(buildReply(3, nil), 1, 2, 3),
		"payload length past end": func() []byte {
			b := buildReply(3, msgsFrom(5))
			binary.LittleEndian.PutUint32(b[fetchPrefixSize+52:], 0xffffffff)
			return b
		}(),
	}
	for name, reply := range malformed {
		t.Run(name, func(t *testing.T) {
			recs, _, err := d.decode(reply, 5)
			if !errors.Is(err, ErrProtocol) || recs != nil {
				t.Fatalf("%d records, err %v", len(recs), err)
			}
		})
	}
}

// TestFetchDecodeAllocations: one allocation for the records of a reply,
// none per message.
func TestFetchDecodeAllocations(t *testing.T) {
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, partition: 0}
	offs := make([]uint64, 1000)
	for i := range offs {
		offs[i] = uint64(i)
	}
	reply := buildReply(0, msgsFrom(offs...))
	allocs := testing.AllocsPerRun(20, func() {
		if recs, _, err := d.decode(reply, 0); err != nil || len(recs) != len(offs) {
			t.Fatal(len(recs), err)
		}
	})
	if allocs > 1 {
		t.Fatalf("%v allocations per decode of %d messages, want 1", allocs, len(offs))
	}
}

// FuzzFetchDecode: no reply, however malformed, makes the decoder panic;
// what it accepts is a contiguous run from want whose bytes lie inside the
// reply.
func FuzzFetchDecode(f *testing.F) {
	f.Add(buildReply(0, msgsFrom(0, 1, 2)), uint64(0))
	f.Add(buildReply(0, msgsFrom(4, 5, 7)), uint64(4))
	f.Add(buildReply(0, msgsFrom(1, 2)), uint64(2))
	f.Add(buildReply(0, nil), uint64(0))
	f.Add([]byte{}, uint64(0))
	ms := msgsFrom(0, 1)
	ms[0].headers = []byte{2, 255, 255, 255, 255}
	f.Add(buildReply(0, ms), uint64(0))
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, partition: 1}
	f.Fuzz(func(t *testing.T, reply []byte, want uint64) {
		recs, _, err := d.decode(reply, want)
		if err != nil {
			if recs != nil {
				t.Fatal("records with an error")
			}
			return
		}
		for i, r := range recs {
			if r.Offset != want+uint64(i) || r.Partition != 1 {
				t.Fatalf("record %d: offset %d partition %d", i, r.Offset, r.Partition)
			}
			if cap(r.Payload) != len(r.Payload) {
				t.Fatal("payload capacity past its bytes")
			}
			if r.HeaderErr == nil && len(r.Headers.Key) == 0 {
				t.Fatal("valid headers without a key")
			}
		}
	})
}

// decodeAppend joins replies: it appends a reply's records to the batch so
// far, in its spare room when there is some, and leaves the batch as it was
// when the reply gives nothing or fails.
func TestFetchDecodeAppend(t *testing.T) {
	ref, _ := newTopicRef("s", "t")
	d := fetchDecoder{t: ref, partition: 3}
	first, _, err := d.decode(buildReply(3, msgsFrom(5, 6)), 5)
	if err != nil || len(first) != 2 {
		t.Fatalf("%d records, %v", len(first), err)
	}
	for _, room := range []int{0, 10} {
		batch := append(make([]connector.Record, 0, len(first)+room), first...)
		batch, _, err = d.decodeAppend(batch, buildReply(3, msgsFrom(7, 8, 9)), 7)
		if err != nil || len(batch) != 5 {
			t.Fatalf("room %d: %d records, %v", room, len(batch), err)
		}
		for i, r := range batch {
			if o := uint64(5 + i); r.Offset != o || string(r.Payload) != fmt.Sprintf("p%d", o) || r.Headers.Seq != o {
				t.Fatalf("room %d: record %d: offset %d payload %q", room, i, r.Offset, r.Payload)
			}
		}
		for _, bad := range [][]byte{buildReply(3, nil), buildReply(3, msgsFrom(12)), buildReply(3, msgsFrom(10))[:40]} {
			got, _, _ := d.decodeAppend(batch, bad, 10)
			if len(got) != 5 || got[4].Offset != 9 {
				t.Fatalf("room %d: a reply without records changed the batch to %d records", room, len(got))
			}
		}
	}
}
