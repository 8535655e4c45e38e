package stream

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// ErrBadDeclaration is wrapped by every error about an event declaration:
// a mistyped or repeated option, an invalid fence, a key type without a key
// codec. Such a declaration never panics; it refuses to encode (Envelope)
// and a topology that uses it refuses to build.
var ErrBadDeclaration = errors.New("strand: bad event declaration")

// Keyed is implemented by event types that know their key.
type Keyed[K any] interface{ Key() K }

// Event is the declaration of one event type E with key type K: its type
// tag, how to find and encode its key, how to encode its payload, the
// fence it puts into its key's stream and the algebra its runs obey. The
// same declaration serves the publisher (it implements Encoder[E]) and the
// consumer (topology.On), so both sides agree by construction.
//
// A declaration is immutable and safe for concurrent use. Declare it once,
// as a package-level variable:
//
//	var Deposits = stream.Declare[AccountID, Deposited](2,
//		stream.WithReduce(algebra.Sum(Deposited.GetAmount, Deposited.WithAmount)))
type Event[K, E any] struct {
	tag     planner.Tag
	name    string
	key     func(E) K
	keys    Codec[K]
	payload Codec[E]
	fence   planner.Ordering // the static fence; unused when fenceBy is set
	fenceBy func(E) planner.Ordering
	alg     algebra.Algebra[E]
	seq     func(E) uint64 // Sequence; nil when the type is unsequenced
	err     error
}

// Declare declares event type E, which knows its key through its Key
// method, under type tag tag. Without options the event is Relaxed,
// NonAssociative, JSON-encoded and uses DefaultKeyCodec[K].
//
// Declare never panics: problems (a mistyped option, an invalid fence, a
// key type with no ready-made codec and no KeyCodec option) are recorded,
// reported by Err, returned by Envelope and refused by topology Build, each
// naming the tag and the problem.
func Declare[K any, E Keyed[K]](tag planner.Tag, opts ...Option) *Event[K, E] {
	return declare(tag, func(e E) K { return e.Key() }, opts)
}

// DeclareFunc declares event type E under type tag tag, with key as the
// function that finds an event's key. It is Declare for types that have no
// Key method (types of other packages, or types keyed in several ways).
func DeclareFunc[K, E any](tag planner.Tag, key func(E) K, opts ...Option) *Event[K, E] {
	return declare(tag, key, opts)
}

func declare[K, E any](tag planner.Tag, key func(E) K, opts []Option) *Event[K, E] {
	d := &Event[K, E]{tag: tag, name: reflect.TypeFor[E]().String(), key: key, fence: planner.Relaxed}
	o := collectOptions(opts)
	c := declCheck{keyNil: key == nil}
	// The type-dependent steps only: each option's type assertion. The
	// checks and the error messages are declCheck's, compiled once.
	if o.fenceBy != nil {
		fn, ok := o.fenceBy.(func(E) planner.Ordering)
		c.fenceBy = assertResult(ok, fn == nil)
		d.fenceBy = fn
	}
	if o.seq != nil {
		fn, ok := o.seq.(func(E) uint64)
		c.seq = assertResult(ok, fn == nil)
		d.seq = fn
	}
	if o.reduce != nil {
		a, ok := o.reduce.(algebra.Algebra[E])
		c.reduce = assertResult(ok, false)
		d.alg = a
	}
	if o.payload != nil {
		pc, ok := o.payload.(Codec[E])
		c.payload = assertResult(ok, false)
		d.payload = pc
	} else {
		d.payload = JSON[E]()
	}
	if o.keys != nil {
		kc, ok := o.keys.(Codec[K])
		c.keys = assertResult(ok, false)
		d.keys = kc
	} else {
		kc, err := DefaultKeyCodec[K]()
		c.keyErr = err
		d.keys = kc
	}
	if o.fenceSet {
		d.fence = o.fence
	}
	d.err = c.finish(tag, d.name, &o, reflect.TypeFor[K])
	return d
}

// collectOptions applies opts to fresh declOptions, recording a nil one.
func collectOptions(opts []Option) declOptions {
	var o declOptions
	for _, opt := range opts {
		if opt == nil {
			o.fail("nil option")
			continue
		}
		opt.apply(&o)
	}
	return o
}

// assertion is the outcome of an option's type assertion in declare.
type assertion uint8

const (
	assertOK assertion = iota
	assertWrongType
	assertNilFunc
)

func assertResult(ok, isNil bool) assertion {
	switch {
	case !ok:
		return assertWrongType
	case isNil:
		return assertNilFunc
	}
	return assertOK
}

// declCheck is what declare learnt with the declaration's types; finish
// turns it into the declaration's error without them, so that the checks
// and their messages are compiled once rather than for every event type.
type declCheck struct {
	keyNil                              bool
	fenceBy, seq, reduce, payload, keys assertion
	keyErr                              error // DefaultKeyCodec's
}

// finish returns the declaration's error (wrapping ErrBadDeclaration), or
// nil. keyType is only called for a message.
func (c *declCheck) finish(tag planner.Tag, name string, o *declOptions, keyType func() reflect.Type) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	errs = append(errs, o.errs...)
	if c.keyNil {
		fail("key function is nil")
	}
	switch c.fenceBy {
	case assertWrongType:
		fail("stream.WithFenceBy takes %T, want func(%s) planner.Ordering", o.fenceBy, name)
	case assertNilFunc:
		fail("stream.WithFenceBy function is nil")
	}
	if o.fenceSet && o.fenceBy != nil {
		fail("both stream.WithFence and stream.WithFenceBy given; choose one")
	}
	switch c.seq {
	case assertWrongType:
		fail("stream.WithSequence takes %T, want func(%s) uint64", o.seq, name)
	case assertNilFunc:
		fail("stream.WithSequence function is nil")
	}
	if c.reduce == assertWrongType {
		fail("stream.WithReduce takes %T, want algebra.Algebra[%s]", o.reduce, name)
	}
	if c.payload == assertWrongType {
		fail("stream.WithPayload takes a codec of type %T, which does not encode %s", o.payload, name)
	}
	if c.keys == assertWrongType {
		fail("stream.WithKeyCodec takes a codec of type %T, which does not encode key type %s", o.keys, keyType())
	}
	if c.keyErr != nil {
		errs = append(errs, c.keyErr)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: type tag %d (%s): %w", ErrBadDeclaration, tag, name, errors.Join(errs...))
	}
	return nil
}

// Option configures an event declaration. Options are checked against the
// declaration's types when Declare runs; a mistyped one is recorded as an
// error of the declaration, never a panic.
type Option interface{ apply(*declOptions) }

type declOptions struct {
	fence    planner.Ordering
	fenceSet bool
	fenceBy  any // func(E) planner.Ordering
	reduce   any // algebra.Algebra[E]
	payload  any // Codec[E]
	keys     any // Codec[K]
	seq      any // func(E) uint64
	errs     []error
}

func (o *declOptions) fail(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf(format, args...))
}

type optionFunc func(*declOptions)

func (f optionFunc) apply(o *declOptions) { f(o) }

// WithFence gives every event of the type the same ordering: Relaxed (the
// default), Acquire, Release or AcqRel. An invalid value makes the
// declaration fail.
func WithFence(o planner.Ordering) Option {
	return optionFunc(func(d *declOptions) {
		if d.fenceSet {
			d.fail("stream.WithFence given twice")
		}
		if !o.Valid() {
			d.fail("stream.WithFence(%d): not one of Relaxed, Acquire, Release, AcqRel", uint8(o))
		}
		d.fence, d.fenceSet = o, true
	})
}

// WithFenceBy lets each event choose its ordering, for a type that models
// several transitions (a status change that is sometimes a barrier). The
// publisher calls fn for every event and writes the result into its
// strand-props header; the consumer plans from that header and never calls
// fn. fn must return a valid ordering; Envelope refuses an event for which
// it does not.
func WithFenceBy[E any](fn func(E) planner.Ordering) Option {
	return optionFunc(func(d *declOptions) {
		if d.fenceBy != nil {
			d.fail("stream.WithFenceBy given twice")
		}
		if fn == nil {
			d.fenceBy = (func(E) planner.Ordering)(nil)
			return
		}
		d.fenceBy = fn
	})
}

// WithReduce sets the algebra of the type: the law its runs obey and so how a
// run is reduced before its handlers see it (algebra.Sum, algebra.Fold,
// algebra.Dedup, ...). The default is algebra.None: runs are applied as
// they are. A wrong law silently corrupts state; check a combine function
// with the algebra package's law checkers.
func WithReduce[E any](a algebra.Algebra[E]) Option {
	return optionFunc(func(d *declOptions) {
		if d.reduce != nil {
			d.fail("stream.WithReduce given twice")
		}
		d.reduce = a
	})
}

// WithPayload sets the payload codec of the type; the default is JSON[E]().
func WithPayload[E any](c Codec[E]) Option {
	return optionFunc(func(d *declOptions) {
		if d.payload != nil {
			d.fail("stream.WithPayload given twice")
		}
		if c == nil {
			d.fail("stream.WithPayload codec is nil")
			return
		}
		d.payload = c
	})
}

// WithKeyCodec sets the key codec of the type; the default is
// DefaultKeyCodec[K](). Every declaration and table with the same key type
// in one topology must encode keys alike; Build checks what it can.
func WithKeyCodec[K any](c Codec[K]) Option {
	return optionFunc(func(d *declOptions) {
		if d.keys != nil {
			d.fail("stream.WithKeyCodec given twice")
		}
		if c == nil {
			d.fail("stream.WithKeyCodec codec is nil")
			return
		}
		d.keys = c
	})
}

// WithSequence gives each event of the type its sequence number within its
// key: 1-based, and one sequence per key across every sequenced type of a
// source (an account's openings, deposits and closings share one count).
// The publisher calls fn for every event and writes the number into the
// strand-seq header (Envelope refuses 0); a consumer whose source has
// Resequence on (topology.SourceNode.Resequence) applies the events of the
// type in that order, from the header alone, whatever order the log has
// them in (docs/design.md §10). Without Resequence the header is carried
// and ignored.
func WithSequence[E any](fn func(E) uint64) Option {
	return optionFunc(func(d *declOptions) {
		if d.seq != nil {
			d.fail("stream.WithSequence given twice")
		}
		if fn == nil {
			d.seq = (func(E) uint64)(nil)
			return
		}
		d.seq = fn
	})
}

// Sequenced reports whether the type was declared with Sequence.
func (d *Event[K, E]) Sequenced() bool { return d.seq != nil }

// Seq returns the sequence number of e (Sequence), and false when the type
// is unsequenced.
func (d *Event[K, E]) Seq(e E) (uint64, bool) {
	if d.seq == nil {
		return 0, false
	}
	return d.seq(e), true
}

// Tag returns the type tag.
func (d *Event[K, E]) Tag() planner.Tag { return d.tag }

// Name returns the Go name of the event type, for messages and metrics.
func (d *Event[K, E]) Name() string { return d.name }

// Err returns the problems recorded when the declaration was made, wrapped
// in ErrBadDeclaration, or nil.
func (d *Event[K, E]) Err() error { return d.err }

// Key returns the key of e.
func (d *Event[K, E]) Key(e E) K { return d.key(e) }

// KeyCodec returns the key codec of the declaration.
func (d *Event[K, E]) KeyCodec() Codec[K] { return d.keys }

// PayloadCodec returns the payload codec of the declaration.
func (d *Event[K, E]) PayloadCodec() Codec[E] { return d.payload }

// Algebra returns the algebra of the type.
func (d *Event[K, E]) Algebra() algebra.Algebra[E] { return d.alg }

// Ordering returns the fence of e: the static one, or FenceBy's answer.
func (d *Event[K, E]) Ordering(e E) planner.Ordering {
	if d.fenceBy != nil {
		return d.fenceBy(e)
	}
	return d.fence
}

// StaticOrdering returns the fence every event of the type has, and false
// when the type chooses its fence per event with FenceBy.
func (d *Event[K, E]) StaticOrdering() (planner.Ordering, bool) {
	return d.fence, d.fenceBy == nil
}

// Decode decodes one payload with the declaration's payload codec. The
// error wraps ErrCodec when the codec's does, and names the type tag.
func (d *Event[K, E]) Decode(payload []byte) (e E, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero E
			e, err = zero, codecPanicErr(d.tag, d.name, p)
		}
	}()
	e, err = d.payload.Decode(payload)
	if err != nil {
		return e, envelopeErr(d.tag, d.name, "", err)
	}
	return e, nil
}

// Envelope encodes e for publishing: key bytes, type tag, ordering and
// algebra kind in the strand headers, and the encoded payload. It returns
// an error (and publishes nothing) when the declaration is bad, the key
// encodes to 0 or more than connector.MaxKeyLen bytes, FenceBy returns an
// invalid ordering, the type is sequenced and Sequence gives 0, or the
// payload does not encode. The key and the payload are a fresh allocation.
func (d *Event[K, E]) Envelope(e E) (Envelope, error) {
	env, _, err := d.AppendEnvelope(make([]byte, 0, 64), e)
	return env, err
}

// AppendEnvelope is Envelope with the key and the payload encoded after the
// end of buf, which it returns grown over them: a step that emits many
// events encodes them into a few shared buffers. The envelope's key and
// payload have no room after them (an append to one never writes into the
// other, nor into what buf holds next); when an encoding outgrows buf's
// room, it gets an allocation of its own and buf is returned as it was
// before it. On an error buf's contents are unchanged.
func (d *Event[K, E]) AppendEnvelope(buf []byte, e E) (Envelope, []byte, error) {
	if d.err != nil {
		return Envelope{}, buf, d.err
	}
	key, grown, err := appendEncoded(buf, d.keys, d.key(e))
	if err != nil {
		return Envelope{}, buf, envelopeErr(d.tag, d.name, "encode key", err)
	}
	h := connector.Headers{Key: key, Tag: d.tag, Ordering: d.Ordering(e), Algebra: d.alg.Kind()}
	if err := h.Validate(); err != nil {
		return Envelope{}, buf, envelopeErr(d.tag, d.name, "", err)
	}
	if d.seq != nil {
		if h.Seq, h.HasSeq = d.seq(e), true; h.Seq == 0 {
			return Envelope{}, buf, seqZeroErr(d.tag, d.name)
		}
	}
	payload, grown, err := appendEncoded(grown, d.payload, e)
	if err != nil {
		return Envelope{}, buf, envelopeErr(d.tag, d.name, "encode payload", err)
	}
	return Envelope{Headers: h, Payload: payload}, grown, nil
}

// envelopeErr is an error of AppendEnvelope: not generic, so that its
// formatting is compiled once, not once per event type.
func envelopeErr(tag planner.Tag, name, step string, err error) error {
	if step == "" {
		return fmt.Errorf("type tag %d (%s): %w", tag, name, err)
	}
	return fmt.Errorf("type tag %d (%s): %s: %w", tag, name, step, err)
}

func seqZeroErr(tag planner.Tag, name string) error {
	return fmt.Errorf("type tag %d (%s): %w: sequence number 0 (sequence numbers start at 1)", tag, name, ErrBadSequence)
}

// appendEncoded appends v encoded by c after the end of buf and returns the
// encoding (capacity capped) and buf grown over it; when the encoding
// outgrew buf's room, it is an allocation of its own and buf is returned as
// it was.
func appendEncoded[T any](buf []byte, c Codec[T], v T) (enc, grown []byte, err error) {
	n := len(buf)
	w, err := c.Append(buf[n:n], v)
	if err != nil {
		return nil, buf, err
	}
	w = w[:len(w):len(w)]
	if len(w) > 0 && cap(buf) > n && &w[0] == &buf[:n+1][n] {
		return w, buf[:n+len(w)], nil
	}
	return w, buf, nil
}

func codecPanicErr(tag planner.Tag, name string, p any) error {
	return fmt.Errorf("type tag %d (%s): %w: codec panicked: %v", tag, name, ErrCodec, p)
}

// Record encodes e as the record at offset of partition, as a source would
// deliver it: the test driver and benchmarks use it to feed topologies
// without a broker.
func (d *Event[K, E]) Record(partition uint32, offset uint64, e E) (connector.Record, error) {
	env, err := d.Envelope(e)
	if err != nil {
		return connector.Record{}, err
	}
	return connector.Record{Partition: partition, Offset: offset, Headers: env.Headers, Payload: env.Payload}, nil
}

var _ Encoder[struct{}] = (*Event[string, struct{}])(nil)

// Rekey returns a declaration of the events of d under another key: the
// same type tag, payload codec, fence and algebra, with key as the key
// function and keys of type K2 (DefaultKeyCodec[K2], or the KeyCodec
// option; the only option Rekey takes). It is what topology.KeyBy declares
// for the events it forwards, and what a publisher of re-keyed events can
// use. The sequence (Sequence) is not kept: it numbers events within
// their old key. An error of d is an error of the result.
func Rekey[K2, K, E any](d *Event[K, E], key func(E) K2, opts ...Option) *Event[K2, E] {
	if d == nil {
		return &Event[K2, E]{name: reflect.TypeFor[E]().String(),
			err: fmt.Errorf("%w: Rekey of a nil declaration", ErrBadDeclaration)}
	}
	var o declOptions
	for _, opt := range opts {
		if opt == nil {
			o.fail("nil option")
			continue
		}
		opt.apply(&o)
	}
	r := &Event[K2, E]{tag: d.tag, name: d.name, key: key, payload: d.payload,
		fence: d.fence, fenceBy: d.fenceBy, alg: d.alg}
	errs := append([]error(nil), o.errs...)
	if o.fenceSet || o.fenceBy != nil || o.reduce != nil || o.payload != nil || o.seq != nil {
		errs = append(errs, errors.New("Rekey takes only KeyCodec: the fence, algebra and payload codec are the declaration's"))
	}
	if key == nil {
		errs = append(errs, errors.New("key function is nil"))
	}
	if o.keys != nil {
		c, ok := o.keys.(Codec[K2])
		if !ok {
			errs = append(errs, fmt.Errorf("KeyCodec takes a codec of type %T, which does not encode key type %s", o.keys, reflect.TypeFor[K2]()))
		}
		r.keys = c
	} else {
		c, err := DefaultKeyCodec[K2]()
		if err != nil {
			errs = append(errs, err)
		}
		r.keys = c
	}
	if d.err != nil {
		errs = append(errs, d.err)
	}
	if len(errs) > 0 {
		r.err = fmt.Errorf("%w: type tag %d (%s) re-keyed: %w", ErrBadDeclaration, d.tag, d.name, errors.Join(errs...))
	}
	return r
}
