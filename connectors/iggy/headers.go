package iggy

import (
	"encoding/binary"
	"fmt"

	"github.com/strand-io/strand/stream/connector"
)

// Iggy user-header kinds used here (the SDK's iggcon.Raw and iggcon.String).
const (
	kindRaw    = 1
	kindString = 2
	kindMax    = 15 // Double; 1..15 are valid
)

// maxUserHeaders is the SDK's limit on one message's user-header block.
const maxUserHeaders = 100_000

// tlvSize is the encoded size of one user header.
func tlvSize(name string, value []byte) int { return 1 + 4 + len(name) + 1 + 4 + len(value) }

// appendTLV appends one user header: a String key holding name and a Raw
// value (Iggy's user-header TLV, protocol reference §2.6).
func appendTLV(dst []byte, name string, value []byte) []byte {
	return appendKindTLV(dst, kindString, name, kindRaw, value)
}

// appendKindTLV appends one user header with the given kinds.
func appendKindTLV(dst []byte, nameKind byte, name string, valueKind byte, value []byte) []byte {
	dst = append(dst, nameKind)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(name)))
	dst = append(dst, name...)
	dst = append(dst, valueKind)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(value)))
	return append(dst, value...)
}

// strandHeadersSize is the encoded size of h's strand headers.
func strandHeadersSize(h *connector.Headers) int {
	n := 3*10 + len(connector.HeaderKey) + len(h.Key) + len(connector.HeaderType) + 4 + len(connector.HeaderProps) + 3
	if h.HasSeq {
		n += 10 + len(connector.HeaderSeq) + 8
	}
	return n
}

// appendStrandHeaders validates h and appends its strand headers as Iggy user
// headers, byte for byte what encoding h.AppendFields would give, without
// allocating per field.
func appendStrandHeaders(dst []byte, h *connector.Headers) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return dst, err
	}
	var b [8]byte
	dst = appendTLV(dst, connector.HeaderKey, h.Key)
	binary.LittleEndian.PutUint32(b[:4], uint32(h.Tag))
	dst = appendTLV(dst, connector.HeaderType, b[:4])
	b[0], b[1], b[2] = connector.PropsVersion, byte(h.Ordering), byte(h.Algebra)
	dst = appendTLV(dst, connector.HeaderProps, b[:3])
	if h.HasSeq {
		binary.LittleEndian.PutUint64(b[:], h.Seq)
		dst = appendTLV(dst, connector.HeaderSeq, b[:])
	}
	return dst, nil
}

// appendFields appends fields as Iggy user headers, checking Iggy's limits:
// names and values 1..255 bytes, kinds 1..15. A field's kinds are written
// as given (a foreign message's, replayed), 0 as a String name and a Raw
// value.
func appendFields(dst []byte, fields []connector.Field) ([]byte, error) {
	for i, f := range fields {
		if len(f.Name) == 0 || len(f.Name) > 255 {
			return dst, fmt.Errorf("%w: header %d name %q is %d bytes, Iggy allows 1..255", ErrInvalidMessage, i, f.Name, len(f.Name))
		}
		if len(f.Value) == 0 || len(f.Value) > 255 {
			return dst, fmt.Errorf("%w: header %q value is %d bytes, Iggy allows 1..255", ErrInvalidMessage, f.Name, len(f.Value))
		}
		if !f.NameKind.Valid() || !f.ValueKind.Valid() {
			return dst, fmt.Errorf("%w: header %q has kinds %s and %s, Iggy knows 1..%d", ErrInvalidMessage, f.Name, f.NameKind, f.ValueKind, kindMax)
		}
		nk, vk := byte(f.NameKind), byte(f.ValueKind)
		if nk == 0 {
			nk = kindString
		}
		if vk == 0 {
			vk = kindRaw
		}
		dst = appendKindTLV(dst, nk, f.Name, vk, f.Value)
	}
	return dst, nil
}

// walkTLV calls fn for every user header in b, in order, with slices of b.
// It allocates nothing and reports a structural error (truncation, a kind
// outside 1..15, a length outside 1..255) wrapping connector.ErrBadHeaders.
func walkTLV(b []byte, fn func(keyKind byte, key []byte, valueKind byte, value []byte) error) error {
	for pos := 0; pos < len(b); {
		var kk, vk byte
		var key, val []byte
		var err error
		if kk, key, pos, err = tlvItem(b, pos, "key"); err != nil {
			return err
		}
		if vk, val, pos, err = tlvItem(b, pos, "value"); err != nil {
			return err
		}
		if err := fn(kk, key, vk, val); err != nil {
			return err
		}
	}
	return nil
}

func tlvItem(b []byte, pos int, what string) (kind byte, v []byte, next int, err error) {
	if len(b)-pos < 5 {
		return 0, nil, 0, fmt.Errorf("%w: user headers truncated at byte %d (header %s)", connector.ErrBadHeaders, pos, what)
	}
	kind = b[pos]
	if kind == 0 || kind > kindMax {
		return 0, nil, 0, fmt.Errorf("%w: user header %s kind %d at byte %d, want 1..%d", connector.ErrBadHeaders, what, kind, pos, kindMax)
	}
	n := binary.LittleEndian.Uint32(b[pos+1:])
	pos += 5
	if n == 0 || n > 255 || uint64(n) > uint64(len(b)-pos) {
		return 0, nil, 0, fmt.Errorf("%w: user header %s length %d at byte %d does not fit (1..255, %d bytes left)", connector.ErrBadHeaders, what, n, pos-4, len(b)-pos)
	}
	return kind, b[pos : pos+int(n) : pos+int(n)], pos + int(n), nil
}

// parseStrandHeaders finds the strand headers in an Iggy user-header block
// and parses them. The returned Key aliases b. Foreign headers are skipped;
// a strand header that appears twice is an error. It allocates only to
// report an error, which wraps connector.ErrBadHeaders.
func parseStrandHeaders(b []byte) (connector.Headers, error) {
	var key, typ, props, seq, tp, origin []byte
	for pos := 0; pos < len(b); {
		var k, v []byte
		var err error
		if _, k, pos, err = tlvItem(b, pos, "key"); err != nil {
			return connector.Headers{}, err
		}
		if _, v, pos, err = tlvItem(b, pos, "value"); err != nil {
			return connector.Headers{}, err
		}
		if string(k) == connector.HeaderTraceParent {
			if tp == nil { // not a strand header: the first one counts
				tp = v
			}
			continue
		}
		if string(k) == connector.HeaderOrigin {
			if origin == nil {
				origin = v
			}
			continue
		}
		var slot *[]byte
		switch string(k) {
		case connector.HeaderKey:
			slot = &key
		case connector.HeaderType:
			slot = &typ
		case connector.HeaderProps:
			slot = &props
		case connector.HeaderSeq:
			slot = &seq
		default:
			continue
		}
		if *slot != nil {
			return connector.Headers{}, fmt.Errorf("%w: %s header appears twice", connector.ErrBadHeaders, k)
		}
		*slot = v
	}
	h, err := connector.ParseHeaders(key, typ, props, seq)
	if err == nil {
		h.TraceParent, h.Origin = tp, origin
	}
	return h, err
}
