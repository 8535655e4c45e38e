package executor

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// Foreign input (docs/design.md, "Foreign input"). A foreign source's
// records carry no strand headers; Task.stage classifies them first thing,
// before the re-sequencer reads Seq and prepare reads key, tag and
// ordering, so that from there on they are records like any other. The
// classifier sees the raw message (Record.Raw and the payload). A record it
// cannot classify gets HeaderErr wrapping stream.ErrUnclassified, which
// prepare dead-letters as deadletter.ReasonUnclassified. Records read back from
// rows (parked, held) were classified when they arrived and are not
// classified again.

// ForeignSpec makes a source of a Program foreign: its records are
// classified by a function of the raw message instead of read from strand
// headers. Make one with NewForeign.
type ForeignSpec struct {
	classify func(m *stream.ForeignMessage, key []byte) (foreignClass, error)
	keyCodec any
	keyType  reflect.Type
}

// foreignClass is a classification with the key encoded.
type foreignClass struct {
	key      []byte
	tag      planner.Tag
	ordering planner.Ordering
	seq      uint64
}

// NewForeign returns the ForeignSpec of a source whose classifier is
// classify and whose keys keys encodes (the codec of the source's
// declarations; NewProgram refuses another). A nil classify or keys is
// refused by NewProgram.
func NewForeign[K any](classify func(stream.ForeignMessage) (stream.Classified[K], error), keys stream.Codec[K]) *ForeignSpec {
	s := &ForeignSpec{keyType: reflect.TypeFor[K]()}
	if keys != nil {
		s.keyCodec = keys
	}
	if classify == nil || keys == nil {
		return s
	}
	s.classify = func(m *stream.ForeignMessage, buf []byte) (foreignClass, error) {
		c, err := classify(*m)
		if err != nil {
			return foreignClass{}, err
		}
		key, err := keys.Append(buf, c.Key)
		if err != nil {
			return foreignClass{}, fmt.Errorf("encode the key: %w", err)
		}
		return foreignClass{key: key, tag: c.Tag, ordering: c.Ordering, seq: c.Seq}, nil
	}
	return s
}

// compileForeign checks the ForeignSpec of a source, if any, against the
// source's declarations and adds its line to the fingerprint: whether a
// source is foreign changes what its stored records mean.
func (c *compiler) compileForeign(ps *programSource, src SourceSpec) {
	f := src.Foreign
	if f == nil {
		return
	}
	if f.classify == nil {
		c.fail("source %q: foreign source without a classifier or key codec", src.Name)
	}
	for _, h := range src.Handlers {
		if h == nil || h.decl() == nil || h.decl().Err() != nil {
			continue // reported by compileSource
		}
		d := h.decl()
		if d.keyType() != f.keyType {
			c.fail("source %q: the classifier gives keys of type %s, type tag %d (%s) has key type %s",
				src.Name, f.keyType, d.Tag(), d.Name(), d.keyType())
		} else if f.keyCodec != nil && !stream.SameKeyCodec(f.keyCodec, d.keyCodec()) {
			c.fail("source %q: the classifier encodes keys with %T, type tag %d (%s) with %T; use one key codec",
				src.Name, f.keyCodec, d.Tag(), d.Name(), d.keyCodec())
		}
	}
	ps.foreign = f
	c.fp.add("foreign", src.Name, f.keyType.String())
}

// foreignChunk is how many records one goroutine classifies at least when
// a batch is classified on several.
const foreignChunk = 256

// classifyForeign classifies the new records of a batch of a foreign
// source in place (see the top of this file); for other sources it does
// nothing. Records below the checkpoint are left alone: prepare ignores
// them. Large batches are classified on up to the program's workers
// goroutines, each record by itself, so the outcome does not depend on how.
func (t *Task) classifyForeign(records []connector.Record) {
	f := t.src.foreign
	if f == nil || len(records) == 0 {
		return
	}
	workers := min(t.prog.workers, len(records)/foreignChunk)
	if workers <= 1 {
		t.classifyRange(f, records)
		return
	}
	var wg sync.WaitGroup
	per := (len(records) + workers - 1) / workers
	for lo := 0; lo < len(records); lo += per {
		part := records[lo:min(lo+per, len(records))]
		wg.Go(func() { t.classifyRange(f, part) })
	}
	wg.Wait()
}

func (t *Task) classifyRange(f *ForeignSpec, records []connector.Record) {
	var arena []byte // key bytes of the records, in chunks
	for i := range records {
		r := &records[i]
		if t.hasNext && r.Offset < t.next {
			continue
		}
		if r.Raw == nil {
			r.Raw = &connector.RawMessage{}
		}
		if r.HeaderErr != nil {
			// The source could not read the message's headers (or an
			// earlier attempt at this batch did not classify it): a
			// dead letter either way, for prepare.
			continue
		}
		if cap(arena)-len(arena) < connector.MaxKeyLen {
			arena = make([]byte, 0, max(4096, 16*(len(records)-i)))
		}
		m := stream.ForeignMessage{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
			ID: r.Raw.ID, Headers: r.Raw.Headers, Payload: r.Payload}
		c, err := runClassify(f, &m, arena[len(arena):])
		if err == nil {
			err = t.setForeignHeaders(r, c)
		}
		if err != nil {
			r.Headers = connector.Headers{TraceParent: r.Headers.TraceParent}
			r.HeaderErr = fmt.Errorf("%w: source %q partition %d offset %d: %w", stream.ErrUnclassified, t.src.name, r.Partition, r.Offset, err)
			continue
		}
		if n := len(c.key); n > 0 && unsafe.SliceData(c.key) == unsafe.SliceData(arena[len(arena):cap(arena)]) {
			arena = arena[:len(arena)+n] // the codec wrote into the arena
		}
	}
}

// runClassify calls the classifier, turning a panic into an error.
func runClassify(f *ForeignSpec, m *stream.ForeignMessage, buf []byte) (c foreignClass, err error) {
	defer func() {
		if p := recover(); p != nil {
			c, err = foreignClass{}, fmt.Errorf("the classifier panicked: %v", p)
		}
	}()
	return f.classify(m, buf)
}

// setForeignHeaders fills r's headers from its classification: the fence
// and algebra of the type as declared (the classifier's fence for FenceBy
// types), the sequence number when given. The traceparent the source found
// stays.
func (t *Task) setForeignHeaders(r *connector.Record, c foreignClass) error {
	if len(c.key) == 0 || len(c.key) > connector.MaxKeyLen {
		return fmt.Errorf("the key is %d bytes, want 1..%d", len(c.key), connector.MaxKeyLen)
	}
	o := c.ordering
	if o != 0 && !o.Valid() {
		return fmt.Errorf("type tag %d: invalid ordering %d", c.tag, uint8(o))
	}
	kind := algebra.NonAssociative
	if rt := t.src.routes[c.tag]; rt != nil {
		kind = rt.kind
		if rt.fence != 0 {
			o = rt.fence
		}
	}
	if o == 0 {
		o = planner.Relaxed
	}
	r.Headers = connector.Headers{Key: c.key[:len(c.key):len(c.key)], Tag: c.tag, Ordering: o, Algebra: kind,
		Seq: c.seq, HasSeq: c.seq != 0, TraceParent: r.Headers.TraceParent}
	return nil
}

// headerErrReason is the dead-letter reason of a record with HeaderErr
// set: unclassified for a foreign record its classifier refused, bad
// headers otherwise.
func headerErrReason(err error) deadletter.Reason {
	if errors.Is(err, stream.ErrUnclassified) {
		return deadletter.ReasonUnclassified
	}
	return deadletter.ReasonBadHeaders
}

// foreignDeadLetter gives the dead letter of a record of a foreign source
// the record's raw message, owned, so that a replay writes it back.
func (t *Task) foreignDeadLetter(d *deadletter.Letter, r *connector.Record) {
	if t.src.foreign == nil {
		return
	}
	d.Raw = r.Raw.Clone()
	if d.Raw == nil {
		d.Raw = &connector.RawMessage{}
	}
}

// Foreign reports whether the program's source named source is foreign.
func (p *Program) Foreign(source string) bool {
	ps := p.sources[source]
	return ps != nil && ps.foreign != nil
}
