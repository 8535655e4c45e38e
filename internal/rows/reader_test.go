package rows

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// A row read field by field gives back what was written; View aliases the
// row and Bytes copies it.
func TestReaderRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b8 := rapid.Byte().Draw(t, "b")
		u32 := rapid.Uint32().Draw(t, "u32")
		u64 := rapid.Uint64().Draw(t, "u64")
		uv := rapid.Uint64().Draw(t, "uvarint")
		s := rapid.String().Draw(t, "s")
		p := rapid.SliceOf(rapid.Byte()).Draw(t, "p")
		row := append([]byte{b8}, binary.BigEndian.AppendUint32(nil, u32)...)
		row = binary.BigEndian.AppendUint64(row, u64)
		row = binary.AppendUvarint(row, uv)
		row = AppendString(row, s)
		row = AppendBytes(row, p)
		row = AppendBytes(row, p)
		r := Reader{B: row}
		if r.Byte() != b8 || r.U32() != u32 || r.U64() != u64 || r.Uvarint() != uv || r.String() != s {
			t.Fatalf("fields differ")
		}
		view := r.View()
		cp := r.Bytes()
		if r.Err != nil || len(r.B) != 0 || !bytes.Equal(view, p) || !bytes.Equal(cp, p) {
			t.Fatalf("err %v, %d bytes left, view %x, copy %x, want %x", r.Err, len(r.B), view, cp, p)
		}
		if len(p) > 0 {
			cp[0] ^= 0xff   // a copy: the row keeps p
			view[0] ^= 0xff // an alias: the row changes
			r2 := Reader{B: row}
			r2.Take(1 + 4 + 8)
			r2.Uvarint()
			_ = r2.String()
			if got := r2.View(); got[0] != p[0]^0xff {
				t.Fatalf("View does not alias the row")
			}
			if got := r2.View(); got[0] != p[0] {
				t.Fatalf("Bytes shares memory with the row")
			}
		}
	})
}

// Every cut of a row fails with ErrShort, which sticks: later reads return
// zero values and never panic.
func TestReaderShortRowSticks(t *testing.T) {
	row := AppendString(binary.BigEndian.AppendUint64([]byte{7}, 42), "hello")
	for cut := range len(row) {
		r := Reader{B: row[:cut]}
		r.Byte()
		r.U64()
		_ = r.String()
		if !errors.Is(r.Err, ErrShort) {
			t.Fatalf("cut at %d: err %v, want ErrShort", cut, r.Err)
		}
		if r.Byte() != 0 || r.U32() != 0 || r.U64() != 0 || r.Uvarint() != 0 || r.View() != nil || r.Bytes() != nil || r.String() != "" {
			t.Fatalf("cut at %d: a read after the error returned data", cut)
		}
		if got := r.Take(3); len(got) != 3 || !bytes.Equal(got, []byte{0, 0, 0}) {
			t.Fatalf("cut at %d: Take after the error = %x, want 3 zero bytes", cut, got)
		}
	}
	r := Reader{B: row}
	if got := r.Take(-1); len(got) != 0 || !errors.Is(r.Err, ErrShort) {
		t.Fatalf("Take(-1) = %x, err %v; want nothing and ErrShort", got, r.Err)
	}
}
