package rows

import (
	"encoding/binary"
	"errors"
)

// ErrShort is the Reader's error when a row ends too early.
var ErrShort = errors.New("row too short")

// AppendString appends s, prefixed with its length as a uvarint.
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// AppendBytes appends b prefixed with its length as a uvarint (as
// AppendString, without converting b to a string).
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// Reader decodes a row of any family: the one reader of every row layout.
// The first problem sticks in Err and later reads return zero values; B is
// what is left of the row.
type Reader struct {
	B   []byte
	Err error
}

// Take reads the next n bytes; they alias the row. After a problem it
// returns n zero bytes (so that a caller may index them), and the problem
// sticks.
func (r *Reader) Take(n int) []byte {
	if r.Err == nil && (n < 0 || len(r.B) < n) {
		r.Err = ErrShort
	}
	if r.Err != nil {
		return make([]byte, max(n, 0))
	}
	out := r.B[:n:n]
	r.B = r.B[n:]
	return out
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	return r.Take(1)[0]
}

// U32 reads a big-endian uint32.
func (r *Reader) U32() uint32 {
	return binary.BigEndian.Uint32(r.Take(4))
}

// U64 reads a big-endian uint64.
func (r *Reader) U64() uint64 {
	return binary.BigEndian.Uint64(r.Take(8))
}

// Uvarint reads a uvarint.
func (r *Reader) Uvarint() uint64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.Err = ErrShort
		return 0
	}
	r.B = r.B[n:]
	return v
}

// View reads a length-prefixed byte string; it aliases the row (nil after
// a problem).
func (r *Reader) View() []byte {
	n := r.Uvarint()
	if r.Err == nil && n > uint64(len(r.B)) {
		r.Err = ErrShort
	}
	if r.Err != nil {
		return nil
	}
	return r.Take(int(n))
}

// Bytes reads a length-prefixed byte string and returns a copy.
func (r *Reader) Bytes() []byte {
	b := r.View()
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// String reads a length-prefixed string.
func (r *Reader) String() string { return string(r.Bytes()) }
