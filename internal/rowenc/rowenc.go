// Package rowenc holds the primitives of strand's durable row encodings
// (dead-letter rows, parked records and keys): uvarint-prefixed strings and
// big-endian integers, and a Reader whose first problem sticks.
package rowenc

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

// Reader decodes a row; the first problem sticks in Err and later reads
// return zero values.
type Reader struct {
	B   []byte
	Err error
}

func (r *Reader) take(n int) []byte {
	if r.Err != nil {
		return nil
	}
	if n < 0 || len(r.B) < n {
		r.Err = ErrShort
		return nil
	}
	out := r.B[:n]
	r.B = r.B[n:]
	return out
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

// U32 reads a big-endian uint32.
func (r *Reader) U32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// U64 reads a big-endian uint64.
func (r *Reader) U64() uint64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
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

// Bytes reads a length-prefixed byte string and returns a copy.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if n > uint64(len(r.B)) {
		r.Err = ErrShort
		return nil
	}
	b := r.take(int(n))
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// String reads a length-prefixed string.
func (r *Reader) String() string { return string(r.Bytes()) }
