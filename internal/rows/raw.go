package rows

import (
	"encoding/binary"

	"github.com/strand-io/strand/stream/connector"
)

// appendRaw appends the row encoding of m (id, then its headers) to dst.
func appendRaw(dst []byte, m *connector.RawMessage) []byte {
	dst = append(dst, m.ID[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
	for _, f := range m.Headers {
		dst = append(dst, byte(f.NameKind))
		dst = AppendString(dst, f.Name)
		dst = append(dst, byte(f.ValueKind))
		dst = AppendString(dst, string(f.Value))
	}
	return dst
}

// readRaw decodes what appendRaw wrote; the bytes are copied.
func readRaw(r *Reader) *connector.RawMessage {
	m := &connector.RawMessage{}
	for i := range m.ID {
		m.ID[i] = r.Byte()
	}
	n := r.Uvarint()
	if n > uint64(len(r.B)) { // each header takes at least a byte
		r.Err = ErrShort
		return m
	}
	m.Headers = make([]connector.Field, 0, n)
	for range n {
		var f connector.Field
		f.NameKind = connector.FieldKind(r.Byte())
		f.Name = string(r.Bytes())
		f.ValueKind = connector.FieldKind(r.Byte())
		f.Value = r.Bytes()
		if r.Err != nil {
			return m
		}
		m.Headers = append(m.Headers, f)
	}
	return m
}
