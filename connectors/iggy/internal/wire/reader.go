package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrMalformed is wrapped by every decoding error of this package.
var ErrMalformed = errors.New("iggy wire: malformed")

// Reader decodes fields from a byte slice in order. The first field that
// does not fit records an error; later reads return zero values, so a
// decoder reads all its fields and checks Err once.
type Reader struct {
	b   []byte
	off int
	err error
}

// NewReader returns a Reader over b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err returns the first decoding error, or nil.
func (r *Reader) Err() error { return r.err }

// Len returns the number of unread bytes.
func (r *Reader) Len() int { return len(r.b) - r.off }

// Offset returns the number of bytes read so far.
func (r *Reader) Offset() int { return r.off }

// Fail records err (wrapped in ErrMalformed) unless an error is recorded
// already.
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (r *Reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || r.Len() < n {
		r.Fail("%s: need %d bytes at offset %d, have %d", what, n, r.off, r.Len())
		return nil
	}
	b := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return b
}

// U8 reads a byte.
func (r *Reader) U8() uint8 {
	if b := r.take(1, "u8"); b != nil {
		return b[0]
	}
	return 0
}

// U16 reads a u16.
func (r *Reader) U16() uint16 {
	if b := r.take(2, "u16"); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

// U32 reads a u32.
func (r *Reader) U32() uint32 {
	if b := r.take(4, "u32"); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

// U64 reads a u64.
func (r *Reader) U64() uint64 {
	if b := r.take(8, "u64"); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// Bytes reads n bytes, aliasing the input.
func (r *Reader) Bytes(n int) []byte { return r.take(n, "bytes") }

// Rest reads every unread byte.
func (r *Reader) Rest() []byte { return r.take(r.Len(), "rest") }

// Name reads a u8-length UTF-8 string of 1..255 bytes.
func (r *Reader) Name() string {
	n := int(r.U8())
	if r.err == nil && n == 0 {
		r.Fail("empty name at offset %d", r.off-1)
		return ""
	}
	b := r.take(n, "name")
	if b != nil && !utf8.Valid(b) {
		r.Fail("name at offset %d is not UTF-8", r.off-n)
	}
	return string(b)
}

// Str8 reads a u8-length byte string (possibly empty).
func (r *Reader) Str8() string { return string(r.take(int(r.U8()), "string")) }

// Str32 reads a u32-length byte string (possibly empty).
func (r *Reader) Str32() string {
	n := r.U32()
	if r.err == nil && uint64(n) > uint64(r.Len()) {
		r.Fail("string of %d bytes at offset %d, have %d", n, r.off-4, r.Len())
		return ""
	}
	return string(r.take(int(n), "string"))
}

// Done records an error if bytes are left unread.
func (r *Reader) Done(what string) {
	if r.err == nil && r.Len() != 0 {
		r.Fail("%s: %d trailing bytes", what, r.Len())
	}
}

func appendU16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

// appendName appends a u8-length string; the caller has checked 1..255.
func appendName(b []byte, s string) []byte { return append(append(b, byte(len(s))), s...) }

func appendStr32(b []byte, s string) []byte { return append(appendU32(b, uint32(len(s))), s...) }

// errorsJoin wraps err with a status, so errors.As finds the status to
// answer and the message keeps err's detail.
func errorsJoin(st Status, err error) error { return fmt.Errorf("%w: %w", st, err) }
