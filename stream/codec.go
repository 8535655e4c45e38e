package stream

import (
	"encoding"
	"errors"
	"fmt"

	gojson "github.com/goccy/go-json"
	segjson "github.com/segmentio/encoding/json"
)

// Codec turns values of one Go type into bytes and back. One codec
// interface serves event payloads, keys and table values.
//
// Append must append the encoding of v to dst and return the extended
// slice; Decode must not keep data after it returns. Both must be safe for
// concurrent use: the executor decodes runs of different keys at once.
type Codec[T any] interface {
	Append(dst []byte, v T) ([]byte, error)
	Decode(data []byte) (T, error)
}

// ErrCodec is wrapped by the errors of the codecs in this package, so
// callers can tell encoding problems from other failures with errors.Is.
var ErrCodec = errors.New("strand: codec")

// JSON returns the default payload codec. It follows encoding/json's rules
// (struct tags, exported fields, HTML escaping, sorted map keys) and
// reads and writes the same documents, but it is chosen by benchmark (see
// benchmarks/results/stream.md): decoding uses github.com/goccy/go-json
// (about 0.2–0.3 µs for a small event here, against 1.5–2 µs for
// encoding/json) and encoding uses github.com/segmentio/encoding/json,
// which appends to dst without an intermediate copy. Use Binary when even
// that matters.
func JSON[T any]() Codec[T] { return jsonCodec[T]{} }

type jsonCodec[T any] struct{}

func (jsonCodec[T]) Append(dst []byte, v T) ([]byte, error) {
	out, err := segjson.Append(dst, v, segjson.EscapeHTML|segjson.SortMapKeys)
	if err != nil {
		return dst, fmt.Errorf("%w: json encode %T: %w", ErrCodec, v, err)
	}
	return out, nil
}

func (jsonCodec[T]) Decode(data []byte) (T, error) {
	var v T
	if err := gojson.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("%w: json decode %T: %w", ErrCodec, v, payloadFree(err))
	}
	return v, nil
}

// payloadFree returns a JSON decoder's error without the bytes of the
// document it quotes (a syntax error names the offending character, a type
// error the offending number): errors reach log lines, which never carry
// payload bytes. The payload itself travels with the dead letter.
func payloadFree(err error) error {
	var se *gojson.SyntaxError
	var te *gojson.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(root)"
		}
		return fmt.Errorf("JSON value at byte %d does not fit field %s of type %v", te.Offset, field, te.Type)
	}
	return fmt.Errorf("invalid JSON (%T)", err)
}

// Binary returns a codec for an event type that encodes itself: T appends
// its binary form with AppendBinary (encoding.BinaryAppender) and *T reads
// it back with UnmarshalBinary (encoding.BinaryUnmarshaler). No reflection
// is involved, so a hand-written pair costs a few nanoseconds per event.
// UnmarshalBinary must not keep data (copy strings and slices out of it).
//
//	stream.Declare[AccountID, Deposited](2, stream.WithPayload(stream.Binary[Deposited]()))
func Binary[T encoding.BinaryAppender, P interface {
	*T
	encoding.BinaryUnmarshaler
}]() Codec[T] {
	return binaryCodec[T, P]{}
}

type binaryCodec[T encoding.BinaryAppender, P interface {
	*T
	encoding.BinaryUnmarshaler
}] struct{}

func (binaryCodec[T, P]) Append(dst []byte, v T) ([]byte, error) {
	out, err := v.AppendBinary(dst)
	if err != nil {
		return dst, fmt.Errorf("%w: binary encode %T: %w", ErrCodec, v, err)
	}
	return out, nil
}

func (binaryCodec[T, P]) Decode(data []byte) (T, error) {
	var v T
	if err := P(&v).UnmarshalBinary(data); err != nil {
		return v, fmt.Errorf("%w: binary decode %T: %w", ErrCodec, v, err)
	}
	return v, nil
}

// CodecFunc makes a Codec from an append function and a decode function,
// for formats that have no codec here (protobuf, a hand-written layout).
// Both functions must be safe for concurrent use.
func CodecFunc[T any](appendFn func(dst []byte, v T) ([]byte, error), decodeFn func(data []byte) (T, error)) Codec[T] {
	return funcCodec[T]{appendFn, decodeFn}
}

type funcCodec[T any] struct {
	appendFn func(dst []byte, v T) ([]byte, error)
	decodeFn func(data []byte) (T, error)
}

func (c funcCodec[T]) Append(dst []byte, v T) ([]byte, error) { return c.appendFn(dst, v) }
func (c funcCodec[T]) Decode(data []byte) (T, error)          { return c.decodeFn(data) }
