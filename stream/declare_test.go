package stream_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

type AccountID uint64

type Deposited struct {
	Account AccountID
	Amount  int64
}

func (d Deposited) Key() AccountID { return d.Account }

type Status struct {
	Account AccountID
	Frozen  bool
}

func (s Status) Key() AccountID { return s.Account }

func TestEnvelopeCarriesTheDeclaration(t *testing.T) {
	deposits := stream.Declare[AccountID, Deposited](2, stream.WithReduce(algebra.Sum(
		func(d Deposited) int64 { return d.Amount },
		func(d Deposited, n int64) Deposited { d.Amount = n; return d })))
	if err := deposits.Err(); err != nil {
		t.Fatal(err)
	}
	env, err := deposits.Envelope(Deposited{Account: 42, Amount: 100})
	if err != nil {
		t.Fatal(err)
	}
	h := env.Headers
	if h.Tag != 2 || h.Ordering != planner.Relaxed || h.Algebra != algebra.Associative || string(h.Key) != "\x00\x00\x00\x00\x00\x00\x00\x2a" {
		t.Fatalf("headers %+v", h)
	}
	// The headers survive the wire format.
	fields, err := h.AppendFields(nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := connector.ParseHeaders(fields[0].Value, fields[1].Value, fields[2].Value, nil)
	if err != nil || back.Tag != 2 || back.Algebra != algebra.Associative {
		t.Fatalf("ParseHeaders = %+v, %v", back, err)
	}
	e, err := deposits.Decode(env.Payload)
	if err != nil || e != (Deposited{42, 100}) {
		t.Fatalf("Decode = %+v, %v", e, err)
	}
	var _ stream.Encoder[Deposited] = deposits
}

func TestFenceByChoosesPerEvent(t *testing.T) {
	status := stream.Declare[AccountID, Status](5, stream.WithFenceBy(func(s Status) planner.Ordering {
		if s.Frozen {
			return planner.AcqRel
		}
		return planner.Relaxed
	}))
	if _, static := status.StaticOrdering(); static {
		t.Fatal("FenceBy declaration reports a static ordering")
	}
	for _, c := range []struct {
		frozen bool
		want   planner.Ordering
	}{{false, planner.Relaxed}, {true, planner.AcqRel}} {
		env, err := status.Envelope(Status{Account: 1, Frozen: c.frozen})
		if err != nil || env.Headers.Ordering != c.want {
			t.Fatalf("frozen=%v: ordering %v, %v; want %v", c.frozen, env.Headers.Ordering, err, c.want)
		}
	}
	bad := stream.Declare[AccountID, Status](6, stream.WithFenceBy(func(Status) planner.Ordering { return 3 }))
	if _, err := bad.Envelope(Status{Account: 1}); !errors.Is(err, connector.ErrBadHeaders) {
		t.Fatalf("invalid per-event fence: %v, want ErrBadHeaders", err)
	}
}

func TestMistypedOptionsAreRecordedNotPanics(t *testing.T) {
	cases := []struct {
		name string
		opts []stream.Option
		want string
	}{
		{"FenceBy of another type", []stream.Option{stream.WithFenceBy(func(Status) planner.Ordering { return planner.Acquire })}, "stream.WithFenceBy takes func(stream_test.Status)"},
		{"Reduce of another type", []stream.Option{stream.WithReduce(algebra.Dedup[Status]())}, "stream_test.Status], want algebra.Algebra[stream_test.Deposited]"},
		{"Payload of another type", []stream.Option{stream.WithPayload(stream.JSON[Status]())}, "does not encode stream_test.Deposited"},
		{"KeyCodec of another type", []stream.Option{stream.WithKeyCodec(stream.StringKey[string]())}, "does not encode key type stream_test.AccountID"},
		{"invalid Fence", []stream.Option{stream.WithFence(3)}, "stream.WithFence(3)"},
		{"Fence twice", []stream.Option{stream.WithFence(planner.Acquire), stream.WithFence(planner.Release)}, "stream.WithFence given twice"},
		{"Fence and FenceBy", []stream.Option{stream.WithFence(planner.Acquire), stream.WithFenceBy(func(Deposited) planner.Ordering { return planner.Relaxed })}, "both stream.WithFence and stream.WithFenceBy"},
		{"nil option", []stream.Option{nil}, "nil option"},
		{"nil payload codec", []stream.Option{stream.WithPayload[Deposited](nil)}, "stream.WithPayload codec is nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := stream.Declare[AccountID, Deposited](9, c.opts...)
			err := d.Err()
			if !errors.Is(err, stream.ErrBadDeclaration) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "type tag 9") {
				t.Fatalf("Err() = %v; want ErrBadDeclaration naming tag 9 and %q", err, c.want)
			}
			if _, err := d.Envelope(Deposited{Account: 1}); !errors.Is(err, stream.ErrBadDeclaration) {
				t.Fatalf("Envelope of a bad declaration: %v", err)
			}
		})
	}
}

func TestKeyTypeWithoutCodecIsRefused(t *testing.T) {
	type pair struct{ A, B int }
	d := stream.DeclareFunc(1, func(e Deposited) pair { return pair{} })
	if err := d.Err(); !errors.Is(err, stream.ErrBadDeclaration) || !strings.Contains(err.Error(), "stream.WithKeyCodec") {
		t.Fatalf("Err() = %v", err)
	}
	ok := stream.DeclareFunc(1, func(e Deposited) pair { return pair{} }, stream.WithKeyCodec(stream.CodecFunc(
		func(dst []byte, p pair) ([]byte, error) { return append(dst, byte(p.A), byte(p.B)), nil },
		func(b []byte) (pair, error) { return pair{int(b[0]), int(b[1])}, nil })))
	if err := ok.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestEnvelopeRefusesBadKeys(t *testing.T) {
	d := stream.DeclareFunc(1, func(s string) string { return s })
	if _, err := d.Envelope(""); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("empty key: %v", err)
	}
	long := stream.DeclareFunc(1, func(s string) string { return s }, stream.WithKeyCodec(stream.CodecFunc(
		func(dst []byte, s string) ([]byte, error) { return append(dst, s...), nil },
		func(b []byte) (string, error) { return string(b), nil })))
	if _, err := long.Envelope(strings.Repeat("k", 300)); !errors.Is(err, connector.ErrBadHeaders) {
		t.Fatalf("300-byte key from a lax codec: %v", err)
	}
}
