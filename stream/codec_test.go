package stream_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

func TestMain(m *testing.M) { testrun.Verify(m) }

type UserID string
type OrderID uint64
type Delta int64
type Small uint32
type Signed int32
type Blob []byte

func roundTrip[K comparable](t *testing.T, c stream.Codec[K], k K, want []byte) {
	t.Helper()
	b, err := c.Append([]byte("prefix"), k)
	if err != nil {
		t.Fatalf("Append(%v): %v", k, err)
	}
	if !bytes.HasPrefix(b, []byte("prefix")) || !bytes.Equal(b[6:], want) {
		t.Fatalf("Append(%v) = %x, want prefix + %x", k, b, want)
	}
	got, err := c.Decode(b[6:])
	if err != nil || got != k {
		t.Fatalf("Decode(%x) = %v, %v; want %v", b[6:], got, err, k)
	}
}

func TestKeyCodecs(t *testing.T) {
	roundTrip(t, stream.StringKey[UserID](), "ada", []byte("ada"))
	roundTrip(t, stream.Uint64Key[OrderID](), 258, []byte{0, 0, 0, 0, 0, 0, 1, 2})
	roundTrip(t, stream.Int64Key[Delta](), -1, []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	roundTrip(t, stream.Uint32Key[Small](), 7, []byte{0, 0, 0, 7})
	roundTrip(t, stream.Int32Key[Signed](), 0, []byte{0x80, 0, 0, 0})

	b := stream.BytesKey[Blob]()
	enc, err := b.Append(nil, Blob("xyz"))
	if err != nil || string(enc) != "xyz" {
		t.Fatalf("bytes key: %q %v", enc, err)
	}
	dec, _ := b.Decode(enc)
	enc[0] = 'Q'
	if string(dec) != "xyz" {
		t.Fatal("BytesKey.Decode must copy")
	}
}

func TestDefaultKeyCodecMatchesTheNamedCodecs(t *testing.T) {
	check := func(name string, def, named any, k any) {
		t.Helper()
		if !stream.SameKeyCodec(def, named) {
			t.Errorf("%s: default and named codecs do not agree", name)
		}
	}
	du, err := stream.DefaultKeyCodec[OrderID]()
	if err != nil {
		t.Fatal(err)
	}
	check("uint64", du, stream.Uint64Key[OrderID](), OrderID(1))
	a, _ := du.Append(nil, 258)
	b, _ := stream.Uint64Key[OrderID]().Append(nil, 258)
	if !bytes.Equal(a, b) {
		t.Fatalf("default %x, named %x", a, b)
	}
	ds, _ := stream.DefaultKeyCodec[UserID]()
	roundTrip(t, ds, "bob", []byte("bob"))
	di, _ := stream.DefaultKeyCodec[Delta]()
	roundTrip(t, di, math.MinInt64, make([]byte, 8))
	dn, _ := stream.DefaultKeyCodec[int]()
	roundTrip(t, dn, 5, []byte{0x80, 0, 0, 0, 0, 0, 0, 5})
	if stream.SameKeyCodec(du, stream.Int64Key[Delta]()) {
		t.Fatal("uint64 and int64 layouts must not count as the same codec")
	}
	if _, err := stream.DefaultKeyCodec[struct{ A int }](); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("struct key: %v, want ErrCodec", err)
	}
}

func TestKeyCodecsRefuseBadLengths(t *testing.T) {
	s := stream.StringKey[string]()
	if _, err := s.Append(nil, ""); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := s.Append(nil, strings.Repeat("x", connector.MaxKeyLen+1)); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("long key: %v", err)
	}
	if _, err := s.Append(nil, strings.Repeat("x", connector.MaxKeyLen)); err != nil {
		t.Fatalf("MaxKeyLen key: %v", err)
	}
	if _, err := stream.Uint64Key[uint64]().Decode([]byte{1, 2, 3}); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("short uint64 key: %v", err)
	}
	if _, err := stream.Int32Key[int32]().Decode(nil); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("empty int32 key: %v", err)
	}
}

func TestSignedKeysSortNumerically(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.Int64().Draw(t, "a")
		b := rapid.Int64().Draw(t, "b")
		c := stream.Int64Key[int64]()
		ea, _ := c.Append(nil, a)
		eb, _ := c.Append(nil, b)
		if (a < b) != (bytes.Compare(ea, eb) < 0) {
			t.Fatalf("%d < %d but %x vs %x", a, b, ea, eb)
		}
	})
}

type payment struct {
	ID     uint64
	Amount int64
	Memo   string
}

func (p payment) AppendBinary(dst []byte) ([]byte, error) {
	dst = binary.LittleEndian.AppendUint64(dst, p.ID)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(p.Amount))
	return append(dst, p.Memo...), nil
}

func (p *payment) UnmarshalBinary(b []byte) error {
	if len(b) < 16 {
		return errors.New("short payment")
	}
	p.ID = binary.LittleEndian.Uint64(b)
	p.Amount = int64(binary.LittleEndian.Uint64(b[8:]))
	p.Memo = string(b[16:])
	return nil
}

func TestPayloadCodecs(t *testing.T) {
	p := payment{ID: 9, Amount: -5, Memo: "<tea>"}
	for name, c := range map[string]stream.Codec[payment]{
		"json":   stream.JSON[payment](),
		"binary": stream.Binary[payment](),
		"func": stream.CodecFunc(
			func(dst []byte, v payment) ([]byte, error) { return v.AppendBinary(dst) },
			func(b []byte) (payment, error) { var v payment; return v, v.UnmarshalBinary(b) }),
	} {
		t.Run(name, func(t *testing.T) {
			b, err := c.Append([]byte{0xAA}, p)
			if err != nil || b[0] != 0xAA {
				t.Fatalf("Append: %x %v", b, err)
			}
			got, err := c.Decode(b[1:])
			if err != nil || got != p {
				t.Fatalf("Decode = %+v, %v", got, err)
			}
			if _, err := c.Decode([]byte{1}); err == nil {
				t.Fatal("Decode of garbage succeeded")
			}
		})
	}
	// The JSON codec writes what encoding/json writes.
	b, _ := stream.JSON[payment]().Append(nil, p)
	if want := `{"ID":9,"Amount":-5,"Memo":"\u003ctea\u003e"}`; string(b) != want {
		t.Fatalf("JSON %s, want %s", b, want)
	}
	if _, err := stream.JSON[payment]().Decode([]byte("{")); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("JSON decode error %v does not wrap ErrCodec", err)
	}
	if _, err := stream.Binary[payment]().Decode(nil); !errors.Is(err, stream.ErrCodec) {
		t.Fatalf("binary decode error %v does not wrap ErrCodec", err)
	}
	m := map[string]int{"b": 1, "a": 2}
	mb, _ := stream.JSON[map[string]int]().Append(nil, m)
	if string(mb) != `{"a":2,"b":1}` {
		t.Fatalf("map keys not sorted: %s", mb)
	}
	_ = slices.Equal[[]byte]
}

// A JSON decode error never quotes the document: errors reach log lines.
func TestJSONDecodeErrorsCarryNoPayloadBytes(t *testing.T) {
	type ev struct{ N int }
	c := stream.JSON[ev]()
	for _, doc := range []string{"\xffsecret-payload\xff", `{"N": 123456789.5}`, `{"N": "secret-payload"}`, `[`} {
		_, err := c.Decode([]byte(doc))
		if err == nil || !errors.Is(err, stream.ErrCodec) {
			t.Fatalf("Decode(%q) = %v, want an ErrCodec error", doc, err)
		}
		for _, leak := range []string{"secret", "123456789", "\xff", "ÿ"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("Decode(%q) error %q quotes the payload (%q)", doc, err, leak)
			}
		}
	}
}
