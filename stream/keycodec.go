package stream

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/strand-io/strand/stream/connector"
)

// Key codecs turn a key value into the key bytes that travel in the
// strand-key header, pick the partition and prefix table rows. Every key
// codec here refuses keys that encode to 0 or more than connector.MaxKeyLen bytes.
// Integer keys encode big-endian (signed ones with the sign bit flipped),
// so table scans return keys in numeric order.
//
// The encoding of a key is part of the wire format and of the store: the
// publisher, the topology and its tables must use the same key codec for
// one key type. Declare and topology.Table pick DefaultKeyCodec when given
// none, so they agree by default.

// StringKey returns the key codec for string keys (and named string
// types): the key bytes are the string's bytes, 1..MaxKeyLen long.
func StringKey[K ~string]() Codec[K] { return stringKey[K]{} }

// BytesKey returns the key codec for []byte keys (and named byte-slice
// types): the key bytes are the slice itself, 1..MaxKeyLen long. Decode
// returns a copy.
func BytesKey[K ~[]byte]() Codec[K] { return bytesKey[K]{} }

// Uint64Key returns the key codec for uint64 keys (and named types over
// uint64): 8 bytes, big-endian.
func Uint64Key[K ~uint64]() Codec[K] { return uint64Key[K]{} }

// Int64Key returns the key codec for int64 keys (and named types over
// int64): 8 bytes, big-endian with the sign bit flipped.
func Int64Key[K ~int64]() Codec[K] { return int64Key[K]{} }

// Uint32Key returns the key codec for uint32 keys (and named types over
// uint32): 4 bytes, big-endian.
func Uint32Key[K ~uint32]() Codec[K] { return uint32Key[K]{} }

// Int32Key returns the key codec for int32 keys (and named types over
// int32): 4 bytes, big-endian with the sign bit flipped.
func Int32Key[K ~int32]() Codec[K] { return int32Key[K]{} }

// DefaultKeyCodec returns the ready-made key codec for K's underlying
// type: string, []byte, uint64, int64, uint32, int32, and uint and int
// (encoded as uint64 and int64). It inspects K with reflection once, when
// called; the codec it returns uses none. For any other key type it
// returns an error: pass a codec with the KeyCodec option instead.
func DefaultKeyCodec[K any]() (Codec[K], error) {
	t := reflect.TypeFor[K]()
	switch t.Kind() {
	case reflect.String:
		return anyKey[K, string]{stringKey[string]{}}, nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return anyKey[K, []byte]{bytesKey[[]byte]{}}, nil
		}
	case reflect.Uint64:
		return anyKey[K, uint64]{uint64Key[uint64]{}}, nil
	case reflect.Int64:
		return anyKey[K, int64]{int64Key[int64]{}}, nil
	case reflect.Uint32:
		return anyKey[K, uint32]{uint32Key[uint32]{}}, nil
	case reflect.Int32:
		return anyKey[K, int32]{int32Key[int32]{}}, nil
	case reflect.Uint:
		if t.Size() == 8 {
			return anyKey[K, uint64]{uint64Key[uint64]{}}, nil
		}
		return anyKey[K, uint32]{uint32Key[uint32]{}}, nil
	case reflect.Int:
		if t.Size() == 8 {
			return anyKey[K, int64]{int64Key[int64]{}}, nil
		}
		return anyKey[K, int32]{int32Key[int32]{}}, nil
	}
	return nil, fmt.Errorf("%w: no ready-made key codec for key type %s (kind %s); pass one with stream.WithKeyCodec", ErrCodec, t, t.Kind())
}

// anyKey reinterprets K as its underlying type U, which DefaultKeyCodec
// checked with reflection to have the same memory layout.
type anyKey[K, U any] struct{ c Codec[U] }

func (a anyKey[K, U]) Append(dst []byte, k K) ([]byte, error) {
	return a.c.Append(dst, *(*U)(unsafe.Pointer(&k)))
}

func (a anyKey[K, U]) Decode(data []byte) (K, error) {
	u, err := a.c.Decode(data)
	return *(*K)(unsafe.Pointer(&u)), err
}

func keyLenErr(n int, k any) error {
	return fmt.Errorf("%w: key %v encodes to %d bytes, want 1..%d", ErrCodec, k, n, connector.MaxKeyLen)
}

type stringKey[K ~string] struct{}

func (stringKey[K]) Append(dst []byte, k K) ([]byte, error) {
	if len(k) == 0 || len(k) > connector.MaxKeyLen {
		return dst, keyLenErr(len(k), k)
	}
	return append(dst, k...), nil
}

func (stringKey[K]) Decode(data []byte) (K, error) {
	if len(data) == 0 || len(data) > connector.MaxKeyLen {
		return "", keyLenErr(len(data), data)
	}
	return K(data), nil
}

type bytesKey[K ~[]byte] struct{}

func (bytesKey[K]) Append(dst []byte, k K) ([]byte, error) {
	if len(k) == 0 || len(k) > connector.MaxKeyLen {
		return dst, keyLenErr(len(k), k)
	}
	return append(dst, k...), nil
}

func (bytesKey[K]) Decode(data []byte) (K, error) {
	if len(data) == 0 || len(data) > connector.MaxKeyLen {
		return nil, keyLenErr(len(data), data)
	}
	return K(append([]byte(nil), data...)), nil
}

func fixedLenErr(n, want int) error {
	return fmt.Errorf("%w: key is %d bytes, want %d", ErrCodec, n, want)
}

type uint64Key[K ~uint64] struct{}

func (uint64Key[K]) Append(dst []byte, k K) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, uint64(k)), nil
}

func (uint64Key[K]) Decode(data []byte) (K, error) {
	if len(data) != 8 {
		return 0, fixedLenErr(len(data), 8)
	}
	return K(binary.BigEndian.Uint64(data)), nil
}

type int64Key[K ~int64] struct{}

func (int64Key[K]) Append(dst []byte, k K) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, uint64(k)^(1<<63)), nil
}

func (int64Key[K]) Decode(data []byte) (K, error) {
	if len(data) != 8 {
		return 0, fixedLenErr(len(data), 8)
	}
	return K(int64(binary.BigEndian.Uint64(data) ^ (1 << 63))), nil
}

type uint32Key[K ~uint32] struct{}

func (uint32Key[K]) Append(dst []byte, k K) ([]byte, error) {
	return binary.BigEndian.AppendUint32(dst, uint32(k)), nil
}

func (uint32Key[K]) Decode(data []byte) (K, error) {
	if len(data) != 4 {
		return 0, fixedLenErr(len(data), 4)
	}
	return K(binary.BigEndian.Uint32(data)), nil
}

type int32Key[K ~int32] struct{}

func (int32Key[K]) Append(dst []byte, k K) ([]byte, error) {
	return binary.BigEndian.AppendUint32(dst, uint32(k)^(1<<31)), nil
}

func (int32Key[K]) Decode(data []byte) (K, error) {
	if len(data) != 4 {
		return 0, fixedLenErr(len(data), 4)
	}
	return K(int32(binary.BigEndian.Uint32(data) ^ (1 << 31))), nil
}

// keyEncoder is implemented by the ready-made key codecs: it names their
// byte layout, so that two codecs for different named types can be seen to
// agree.
type keyEncoder interface{ keyEncoding() string }

func (a anyKey[K, U]) keyEncoding() string {
	if e, ok := a.c.(keyEncoder); ok {
		return e.keyEncoding()
	}
	return ""
}
func (stringKey[K]) keyEncoding() string { return "string" }
func (bytesKey[K]) keyEncoding() string  { return "string" }
func (uint64Key[K]) keyEncoding() string { return "u64be" }
func (int64Key[K]) keyEncoding() string  { return "i64be" }
func (uint32Key[K]) keyEncoding() string { return "u32be" }
func (int32Key[K]) keyEncoding() string  { return "i32be" }

// SameKeyCodec reports whether two key codecs encode keys alike, as far as
// can be told: it returns false when both are ready-made codecs with different layouts, or
// are values of different types, or equal-typed comparable values that
// differ. Codecs it cannot compare (the same non-comparable type, such as
// two CodecFunc values) are taken to agree. It uses reflection and is meant
// for build-time checks, not the hot path.
func SameKeyCodec(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ea, oka := a.(keyEncoder)
	eb, okb := b.(keyEncoder)
	if oka && okb {
		return ea.keyEncoding() == eb.keyEncoding()
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	if ta != tb {
		return false
	}
	if ta.Comparable() {
		return a == b
	}
	return true
}
