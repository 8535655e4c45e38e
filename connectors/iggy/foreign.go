package iggy

import (
	"context"
	"unsafe"

	"github.com/strand-io/strand/stream/connector"
)

// Foreign topics (docs/design.md, "Foreign input"): topics whose producers
// write no strand headers. A foreign Source's decoder gives each record its
// raw message, its id and every user header with its kinds, for the
// topology's classifier.

var _ connector.ForeignConnector = (*Client)(nil)

// WithForeign makes the Source read a foreign topic: its records carry
// their raw message (connector.Record.Raw: the message id and every user
// header, kinds kept) and no parsed strand headers; HeaderErr is set only
// when a message's user-header block is malformed. A traceparent header,
// if any, is still found (Headers.TraceParent). A topology reads such a
// source with topology.ForeignSource, which Client.OpenForeignSource serves.
func WithForeign() SourceOption {
	return sourceOptionFunc(func(c *srcConfig) error {
		c.foreign = true
		return nil
	})
}

// OpenForeignSource returns the Source of the foreign topic named
// "stream/topic", which must exist (OpenSource with WithForeign); it makes
// the Client a connector.ForeignConnector.
func (c *Client) OpenForeignSource(ctx context.Context, name string) (connector.Source, error) {
	s, t, err := splitTopic(name)
	if err != nil {
		return nil, err
	}
	if _, err := c.Partitions(ctx, s, t); err != nil {
		return nil, err
	}
	return NewSource(c, s, t, WithForeign())
}

// foreignArena holds the raw messages and header fields of one reply's
// records: one allocation each per reply, grown (never moved under a
// record: a record keeps the slice it was given) when a reply holds more
// headers than guessed.
type foreignArena struct {
	raws   []connector.RawMessage
	fields []connector.Field
}

// raw fills rec.Raw from the message's id and user-header block uh, whose
// names and values it aliases (the reply is never reused). n is how many
// records the reply can give. A malformed block gives an error wrapping
// connector.ErrBadHeaders and leaves rec.Raw with the id and no headers.
func (a *foreignArena) raw(rec *connector.Record, id []byte, uh []byte, n int) error {
	if a.raws == nil {
		a.raws = make([]connector.RawMessage, 0, n)
	}
	a.raws = append(a.raws, connector.RawMessage{})
	m := &a.raws[len(a.raws)-1]
	copy(m.ID[:], id)
	rec.Raw = m
	if len(uh) == 0 {
		m.Headers = []connector.Field{}
		return nil
	}
	if a.fields == nil {
		// Guess that every message of the reply has as many headers as
		// the first one that has any (producers are alike).
		k := 0
		_ = walkTLV(uh, func(byte, []byte, byte, []byte) error { k++; return nil })
		a.fields = make([]connector.Field, 0, max(k, 1)*(n-len(a.raws)+1))
	}
	start := len(a.fields)
	err := walkTLV(uh, func(kk byte, key []byte, vk byte, value []byte) error {
		if cap(a.fields) == len(a.fields) {
			grown := make([]connector.Field, len(a.fields)-start, 2*cap(a.fields)+8)
			copy(grown, a.fields[start:])
			a.fields, start = grown, 0
		}
		f := connector.Field{Name: unsafe.String(unsafe.SliceData(key), len(key)), Value: value}
		if kk != kindString {
			f.NameKind = connector.FieldKind(kk)
		}
		if vk != kindRaw {
			f.ValueKind = connector.FieldKind(vk)
		}
		a.fields = append(a.fields, f)
		if f.Name == connector.HeaderTraceParent && rec.Headers.TraceParent == nil {
			rec.Headers.TraceParent = value
		}
		return nil
	})
	if err != nil {
		a.fields = a.fields[:start]
		m.Headers = nil
		rec.Headers.TraceParent = nil
		return err
	}
	m.Headers = a.fields[start:len(a.fields):len(a.fields)]
	return nil
}
