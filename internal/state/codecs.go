package state

import (
	json "github.com/segmentio/encoding/json"
)

// JSON returns a codec that encodes values as JSON, with the output and the
// decoding rules of encoding/json (struct tags, Marshaler and Unmarshaler,
// maps with sorted keys, HTML escaping; trailing data is an error).
//
// It is implemented with github.com/segmentio/encoding/json, the fastest of
// the JSON libraries measured for this workload (see
// benchmarks/results/state.md): for a small struct it encodes in about a
// third of encoding/json's time without allocating, and decodes about 4x
// faster. Tables encode on every Write and decode only on a cache miss, so
// encoding speed matters most.
func JSON[T any]() Codec[T] { return jsonCodec[T]{} }

type jsonCodec[T any] struct{}

const jsonFlags = json.EscapeHTML | json.SortMapKeys

func (jsonCodec[T]) Append(dst []byte, v T) ([]byte, error) {
	return json.Append(dst, v, jsonFlags)
}

func (jsonCodec[T]) Decode(data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

// Bytes returns a codec that stores byte slices as they are. Decode returns a
// copy, so the value outlives the bytes it was decoded from.
func Bytes() Codec[[]byte] { return bytesCodec{} }

type bytesCodec struct{}

func (bytesCodec) Append(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }

func (bytesCodec) Decode(data []byte) ([]byte, error) { return append([]byte{}, data...), nil }

// String returns a codec that stores strings as their bytes (UTF-8 or not).
func String() Codec[string] { return stringCodec{} }

type stringCodec struct{}

func (stringCodec) Append(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }

func (stringCodec) Decode(data []byte) (string, error) { return string(data), nil }
