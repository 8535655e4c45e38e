package iggy

import (
	"bytes"
	"errors"
	"testing"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"pgregory.net/rapid"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

func genHeaders() *rapid.Generator[connector.Headers] {
	return rapid.Custom(func(t *rapid.T) connector.Headers {
		h := connector.Headers{
			Key:      rapid.SliceOfN(rapid.Byte(), 1, connector.MaxKeyLen).Draw(t, "key"),
			Tag:      planner.Tag(rapid.Uint32().Draw(t, "tag")),
			Ordering: rapid.SampledFrom([]planner.Ordering{planner.Relaxed, planner.Acquire, planner.Release, planner.AcqRel}).Draw(t, "ordering"),
			Algebra:  algebra.Kind(rapid.IntRange(0, 4).Draw(t, "algebra")),
		}
		if rapid.Bool().Draw(t, "hasSeq") {
			h.Seq, h.HasSeq = rapid.Uint64().Draw(t, "seq"), true
		}
		return h
	})
}

// sdkTLV encodes fields as the SDK would: String keys, Raw values.
func sdkTLV(t testing.TB, fields []connector.Field) []byte {
	entries := make([]iggcon.HeaderEntry, len(fields))
	for i, f := range fields {
		k, err := iggcon.NewHeaderKeyString(f.Name)
		if err != nil {
			t.Fatal(err)
		}
		entries[i] = iggcon.HeaderEntry{Key: k, Value: iggcon.HeaderValue{Kind: iggcon.Raw, Value: f.Value}}
	}
	return iggcon.GetHeadersBytes(entries)
}

func TestStrandHeadersAreExactlyTheSDKEncodingOfAppendFields(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		h := genHeaders().Draw(rt, "headers")
		fields, err := h.AppendFields(nil)
		if err != nil {
			rt.Fatal(err)
		}
		want := sdkTLV(t, fields)
		got, err := appendStrandHeaders(nil, &h)
		if err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			rt.Fatalf("appendStrandHeaders = %x\nSDK encoding of AppendFields = %x", got, want)
		}
		if len(got) != strandHeadersSize(&h) {
			rt.Fatalf("strandHeadersSize = %d, encoded %d", strandHeadersSize(&h), len(got))
		}
		back, err := parseStrandHeaders(got)
		if err != nil {
			rt.Fatalf("parse: %v", err)
		}
		if !bytes.Equal(back.Key, h.Key) || back.Tag != h.Tag || back.Ordering != h.Ordering || back.Algebra != h.Algebra || back.HasSeq != h.HasSeq || back.Seq != h.Seq {
			rt.Fatalf("round trip: got %+v, want %+v", back, h)
		}
	})
}

func TestParseStrandHeadersSkipsForeignHeaders(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		h := genHeaders().Draw(rt, "headers")
		fields, _ := h.AppendFields(nil)
		// Interleave foreign headers of other kinds.
		var entries []iggcon.HeaderEntry
		for i, f := range fields {
			if rapid.Bool().Draw(rt, "foreign") {
				entries = append(entries, iggcon.HeaderEntry{
					Key:   iggcon.NewHeaderKeyInt32(int32(i)),
					Value: iggcon.HeaderValue{Kind: iggcon.Uint64, Value: make([]byte, 8)},
				})
			}
			k, _ := iggcon.NewHeaderKeyString(f.Name)
			entries = append(entries, iggcon.HeaderEntry{Key: k, Value: iggcon.HeaderValue{Kind: iggcon.Raw, Value: f.Value}})
		}
		back, err := parseStrandHeaders(iggcon.GetHeadersBytes(entries))
		if err != nil {
			rt.Fatalf("parse: %v", err)
		}
		if !bytes.Equal(back.Key, h.Key) || back.Tag != h.Tag || back.Seq != h.Seq {
			rt.Fatalf("got %+v, want %+v", back, h)
		}
	})
}

func TestParseStrandHeadersErrors(t *testing.T) {
	h := connector.Headers{Key: []byte("k"), Tag: 1, Ordering: planner.Relaxed}
	good, _ := appendStrandHeaders(nil, &h)
	fields, _ := h.AppendFields(nil)
	tests := []struct {
		name string
		in   []byte
	}{
		{"no user headers at all", nil},
		{"truncated block", good[:len(good)-1]},
		{"kind zero", append([]byte{0}, good[1:]...)},
		{"only the key header", sdkTLV(t, fields[:1])},
		{"key header twice", append(append([]byte(nil), good...), sdkTLV(t, fields[:1])...)},
		{"props of an unknown version", sdkTLV(t, []connector.Field{fields[0], fields[1], {Name: connector.HeaderProps, Value: []byte{9, 1, 0}}})},
		{"a type header of 3 bytes", sdkTLV(t, []connector.Field{fields[0], {Name: connector.HeaderType, Value: []byte{1, 2, 3}}, fields[2]})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseStrandHeaders(tc.in)
			if !errors.Is(err, connector.ErrBadHeaders) {
				t.Fatalf("got %v, want an error wrapping connector.ErrBadHeaders", err)
			}
		})
	}
}

func TestParseStrandHeadersDoesNotAllocate(t *testing.T) {
	h := connector.Headers{Key: []byte("account-42"), Tag: 3, Ordering: planner.Acquire, Seq: 9, HasSeq: true}
	b, _ := appendStrandHeaders(nil, &h)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := parseStrandHeaders(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("parseStrandHeaders allocates %v times per message", allocs)
	}
}

func TestAppendFieldsChecksIggyLimits(t *testing.T) {
	for _, f := range []connector.Field{
		{Name: "", Value: []byte("x")},
		{Name: "reason", Value: nil},
		{Name: "reason", Value: make([]byte, 256)},
	} {
		if _, err := appendFields(nil, []connector.Field{f}); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("field %q (%d-byte value): got %v, want ErrInvalidMessage", f.Name, len(f.Value), err)
		}
	}
}

// FuzzWalkTLV checks that the walker never panics and accepts whatever the
// SDK's decoder accepts, with the same entries.
func FuzzWalkTLV(f *testing.F) {
	h := connector.Headers{Key: []byte("k"), Tag: 1, Ordering: planner.Relaxed, HasSeq: true, Seq: 3}
	good, _ := appendStrandHeaders(nil, &h)
	f.Add(good)
	f.Add(good[:7])
	f.Add([]byte{})
	f.Add([]byte{2, 1, 0, 0, 0, 'a', 6, 4, 0, 0, 0, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got []iggcon.HeaderEntry
		werr := walkTLV(b, func(kk byte, k []byte, vk byte, v []byte) error {
			got = append(got, iggcon.HeaderEntry{Key: iggcon.HeaderKey{Kind: iggcon.HeaderKind(kk), Value: k}, Value: iggcon.HeaderValue{Kind: iggcon.HeaderKind(vk), Value: v}})
			return nil
		})
		_, _ = parseStrandHeaders(b)
		want, serr := iggcon.DeserializeHeaders(b)
		if serr != nil {
			return
		}
		if werr != nil {
			// The SDK accepts kinds above 15 and checks sizes we do not;
			// only a kind outside 1..15 may make us stricter.
			for _, e := range want {
				if e.Key.Kind == 0 || e.Key.Kind > kindMax || e.Value.Kind == 0 || e.Value.Kind > kindMax {
					return
				}
			}
			t.Fatalf("SDK accepts %x, walkTLV says %v", b, werr)
		}
		if len(got) != len(want) {
			t.Fatalf("walkTLV found %d headers, the SDK %d", len(got), len(want))
		}
		for i := range got {
			if got[i].Key.Kind != want[i].Key.Kind || !bytes.Equal(got[i].Key.Value, want[i].Key.Value) ||
				got[i].Value.Kind != want[i].Value.Kind || !bytes.Equal(got[i].Value.Value, want[i].Value.Value) {
				t.Fatalf("header %d: walkTLV %+v, SDK %+v", i, got[i], want[i])
			}
		}
	})
}
