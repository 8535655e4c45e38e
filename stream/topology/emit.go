package topology

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// To publishes what fn derives from the events of s to topic, exactly
// once (Kafka Streams' to). fn is called for every event of s, in log
// order per key and unreduced (what it publishes does not depend on how
// the log was batched), and calls emit for each event to publish, which
// out encodes: its strand headers (key, type, fence) and payload, so that
// another topology, or this one, can read the topic as a source.
//
// Exactly once: what emit is given for the records a batch applies is
// written in the batch's commit, with the table writes and the checkpoint,
// and published after it with a message id and a strand-origin header
// derived from its place in the outbox; a crash between commit and publish
// neither loses nor doubles a message, and a topology reading the topic
// applies a message published twice once (docs/design.md §11). Publishing
// never holds up or fails the events that emitted: the outbox retries with
// backoff, keeps the order per destination partition, and reports in
// Stats (OutboxPending, OutboxErrors) and the log.
//
// An error from fn fails its event like a handler's (the key is parked and
// retried, see WithRetry; a stream.Permanent error dead-letters the
// record); so does an event that out cannot encode, as a permanent error.
// A panic in fn is an error of its key. name identifies the step (unique
// in the topology); Open creates topic, if missing, with the partition
// count of s's source. To returns s for chaining.
func To[K, E, K2, E2 any](s *Stream[K, E], name, topic string, out *stream.Event[K2, E2], fn func(ctx context.Context, key K, e E, emit func(E2)) error) *Stream[K, E] {
	var outErr error
	if out != nil {
		outErr = out.Err()
	}
	n, ok := s.core().toCheck(name, topic, fn == nil, out == nil, outErr)
	if !ok {
		return s
	}
	n.outputs = append(n.outputs, topic)
	// hint is the size of the last envelope's key and payload: the next one
	// is encoded into a buffer of about that size.
	var hint atomic.Int64
	emitFn := func(ctx context.Context, key K, e E, _ []byte, envs []stream.Envelope, buf []byte) ([]stream.Envelope, []byte, error) {
		var encErr error
		err := fn(ctx, key, e, func(e2 E2) {
			if encErr != nil {
				return
			}
			var env stream.Envelope
			var err error
			env, buf, err = encodeEnvelope(out, e2, &hint, buf)
			if err != nil {
				encErr = err
				return
			}
			envs = append(envs, env)
		})
		if err == nil && encErr != nil {
			err = stream.Permanent(fmt.Errorf("encode an emitted event: %w", encErr))
		}
		return envs, buf, err
	}
	n.handlers = append(n.handlers, executor.Emit(s.decl, name, topic, executor.EmitTo, emitFn))
	return s
}

// emitChunk is the size of the buffers To and KeyBy encode envelopes into
// (executor.EmitFunc's buf): a few hundred envelopes share one allocation.
const emitChunk = 16 << 10

// spare returns buf if it has room for need more bytes, else a new buffer
// (buf's bytes stay where they are: envelopes hold them).
func spare(buf []byte, need int) []byte {
	if cap(buf)-len(buf) >= need {
		return buf
	}
	return make([]byte, 0, max(emitChunk, 4*need))
}

// appendTo appends v encoded by c after the end of buf, as
// stream.Event.AppendEnvelope does for a key and a payload: it returns the
// encoding (capacity capped) and buf grown over it, or, when the encoding
// outgrew buf's room, the encoding in an allocation of its own and buf as
// it was. KeyBy encodes new keys with it (the payload is forwarded as is).
func appendTo[T any](buf []byte, c stream.Codec[T], v T) (out, grown []byte, err error) {
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

// encodeEnvelope is d.AppendEnvelope(buf, e) with buf given room for the
// size hint holds (the last envelope's key and payload), which it updates:
// envelopes share buf's allocation instead of taking one each.
func encodeEnvelope[K, E any](d *stream.Event[K, E], e E, hint *atomic.Int64, buf []byte) (stream.Envelope, []byte, error) {
	env, buf, err := d.AppendEnvelope(spare(buf, int(hint.Load()+hint.Load()/8)+16), e)
	if err != nil {
		return env, buf, err
	}
	if n := int64(len(env.Headers.Key) + len(env.Payload)); n != hint.Load() {
		hint.Store(n)
	}
	return env, buf, nil
}

// KeyByOption configures a KeyBy step.
type KeyByOption interface {
	apply(*keyByOptions) error
}

// keyByOptionFunc adapts a function to KeyByOption.
type keyByOptionFunc func(*keyByOptions) error

func (f keyByOptionFunc) apply(c *keyByOptions) error { return f(c) }

type keyByOptions struct {
	topic string
	keys  []stream.Option
}

// WithKeyByTopic names the repartition topic of a KeyBy step; the default is
// "<stream>/<topology>-<step>-repartition" for a source "<stream>/<topic>"
// (an Iggy topic in the source's stream), "<topology>-<step>-repartition"
// for a source without a stream. An empty name is refused by Build.
func WithKeyByTopic(topic string) KeyByOption {
	return keyByOptionFunc(func(o *keyByOptions) error {
		if topic == "" {
			return fmt.Errorf("strand: topology.WithKeyByTopic: empty topic name")
		}
		o.topic = topic
		return nil
	})
}

// WithKeyByKeys sets the key codec of the new key; the default is
// stream.DefaultKeyCodec[K2](). Tables fed by the re-keyed stream must
// encode keys alike.
func WithKeyByKeys[K2 any](c stream.Codec[K2]) KeyByOption {
	return keyByOptionFunc(func(o *keyByOptions) error {
		if c == nil {
			return fmt.Errorf("strand: topology.WithKeyByKeys: nil codec")
		}
		o.keys = append(o.keys, stream.WithKeyCodec(c))
		return nil
	})
}

// KeyBy re-keys the events of s by key, a function of the event (Kafka
// Streams' selectKey followed by a repartition): it returns the same
// events keyed by K2, to Project into tables keyed by K2 or to use as any
// other stream. The events travel through a repartition topic that the
// topology owns: every event of s is published to it exactly once (as To
// does, through the outbox, with the new key's strand headers) and the
// topology reads the topic as a source of its own, which Open creates if
// missing (with the partition count of s's source) and Run runs with the
// others.
//
// Order: the events of one new key are applied in the order they were
// forwarded, and the events of one source key are forwarded in source
// order; so two events of one source key that get one new key are applied
// in their source order, and events of different source keys that share a
// new key are in the order their forwards happened to interleave. The
// type's fence and algebra hold on the new key.
//
// An event that key cannot key (an error, a panic, or a key that does not
// encode to 1..255 bytes) is dead-lettered with deadletter.ReasonKeyBy and is
// not applied to s's other handlers either. name identifies the step
// (unique in the topology).
func KeyBy[K, E, K2 any](s *Stream[K, E], name string, key func(E) (K2, error), opts ...KeyByOption) *Stream[K2, E] {
	var ck func(context.Context, E) (K2, error)
	if key != nil {
		ck = func(_ context.Context, e E) (K2, error) { return key(e) }
	}
	return keyBy(s, name, key, ck, opts)
}

// keyBy is KeyBy and KeyByContext: plain is the key function of the
// re-keyed declaration (nil for KeyByContext, whose keys the repartition
// topic's reader takes from the records' headers), key the step's.
func keyBy[K, E, K2 any](s *Stream[K, E], name string, plain func(E) (K2, error), key func(context.Context, E) (K2, error), opts []KeyByOption) *Stream[K2, E] {
	t := s.src.t
	if !s.check(fmt.Sprintf("KeyBy %q", name)) {
		return &Stream[K2, E]{src: Source[K2](t, "invalid KeyBy "+name), decl: nil}
	}
	n := s.node()
	where := fmt.Sprintf("source %q: type tag %d (%s): KeyBy %q", n.name, s.decl.Tag(), s.decl.Name(), name)
	var o keyByOptions
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(&o); err != nil {
			t.errs = append(t.errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	if key == nil {
		t.errs = append(t.errs, fmt.Errorf("%s has a nil key function", where))
		key = func(context.Context, E) (K2, error) { var k K2; return k, fmt.Errorf("no key function") }
	}
	trust := plain == nil
	if trust {
		plain = func(E) (K2, error) { var k K2; return k, nil } // never asked: the reader trusts the headers
	}
	if name == "" {
		t.errs = append(t.errs, fmt.Errorf("%s: a KeyBy step needs a name", where))
	}
	topic := o.topic
	if topic == "" {
		topic = repartitionTopic(t.name, n.name, name)
	}
	rekeyed := stream.Rekey(s.decl, func(e E) K2 { k, _ := plain(e); return k }, o.keys...)
	if err := rekeyed.Err(); err != nil {
		t.errs = append(t.errs, fmt.Errorf("%s: %w", where, err))
	}
	from := n.name
	emitFn := func(ctx context.Context, _ K, e E, payload []byte, envs []stream.Envelope, buf []byte) ([]stream.Envelope, []byte, error) {
		k, err := key(ctx, e)
		if err != nil {
			return envs, buf, err
		}
		env, buf, err := rekeyEnvelope(rekeyed, k, e, payload, buf)
		if err != nil {
			return envs, buf, err
		}
		return append(envs, env), buf, nil
	}
	n.outputs = append(n.outputs, topic)
	n.handlers = append(n.handlers, executor.Emit(s.decl, name, topic, executor.EmitKeyBy, emitFn))

	src := Source[K2](t, topic)
	sn := &t.sources[src.idx]
	if sn.feeder != "" && sn.feeder != from || len(sn.handlers) > 0 && sn.feeder == "" {
		t.errs = append(t.errs, fmt.Errorf("%s: repartition topic %q is already a source of the topology", where, topic))
	}
	sn.feeder = from
	sn.trustKeys = sn.trustKeys || trust
	return &Stream[K2, E]{src: src, decl: rekeyed}
}

// rekeyEnvelope is e under its new key, with the payload it came with (the
// declaration's payload codec is the source's): what the repartition topic
// carries.
func rekeyEnvelope[K2, E any](d *stream.Event[K2, E], k K2, e E, payload, buf []byte) (stream.Envelope, []byte, error) {
	if err := d.Err(); err != nil {
		return stream.Envelope{}, buf, err
	}
	kb, buf, err := appendTo(spare(buf, 32), d.KeyCodec(), k)
	if err != nil {
		return stream.Envelope{}, buf, fmt.Errorf("encode the new key: %w", err)
	}
	h := connector.Headers{Key: kb, Tag: d.Tag(), Ordering: d.Ordering(e), Algebra: d.Algebra().Kind()}
	if err := h.Validate(); err != nil {
		return stream.Envelope{}, buf, err
	}
	return stream.Envelope{Headers: h, Payload: payload}, buf, nil
}

// repartitionTopic is the default topic of a KeyBy step.
func repartitionTopic(topology, source, step string) string {
	name := topology + "-" + step + "-repartition"
	if i := strings.Index(source, "/"); i > 0 {
		return source[:i] + "/" + name
	}
	return name
}
