package state

// Codec turns values of one Go type into bytes and back. Tables use one for
// their keys and one for their values; stream uses the same interface for
// event payloads and keys.
//
// Append must append the encoding of v to dst and return the extended slice;
// it must not keep dst. Decode must not keep data after it returns: the
// bytes may be reused. Both must be safe for concurrent use.
type Codec[T any] interface {
	Append(dst []byte, v T) ([]byte, error)
	Decode(data []byte) (T, error)
}
