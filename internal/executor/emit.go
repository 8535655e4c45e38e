package executor

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// EmitMode says what an error of an emitting handler's function means.
type EmitMode uint8

const (
	// EmitTo: the function is a topology.To step; its error fails the run
	// like a handler's (the key is parked and retried; a Permanent error
	// dead-letters the record).
	EmitTo EmitMode = iota + 1
	// EmitKeyBy: the function gives the event its new key
	// (topology.KeyBy); an error means the event cannot be forwarded at
	// all, and the record is dead-lettered with deadletter.ReasonKeyBy.
	EmitKeyBy
)

// String returns "to" or "key-by".
func (m EmitMode) String() string {
	switch m {
	case EmitTo:
		return "to"
	case EmitKeyBy:
		return "key-by"
	}
	return fmt.Sprintf("emit-mode(%d)", uint8(m))
}

// EmitFunc derives from one event of key the envelopes it publishes,
// appended to out; payload is the event's encoded payload as the record
// carried it (a KeyBy forwards it as is). It sees every event of a run, in
// log order, unreduced: what it publishes does not depend on how the log
// was batched. Envelopes may alias payload.
//
// buf is where the function may encode the envelopes' keys and payloads,
// so that a batch's envelopes share a few allocations: it appends to buf
// only (never writing into buf[:len(buf)], which earlier envelopes hold),
// or replaces it with a buffer of its own, and returns it; the bytes it
// appended stay the envelopes' for good.
type EmitFunc[K, E any] func(ctx context.Context, key K, e E, payload []byte, out []stream.Envelope, buf []byte) ([]stream.Envelope, []byte, error)

// Emit returns a handler that publishes what fn derives from each event of
// ev to the topic dest, exactly once: the envelopes of the records a batch
// applies are written as outbox rows in the batch's commit and published
// after it (docs/design.md §11). step names the handler in errors, metrics
// and message origins; it must be unique in the topology.
func Emit[K, E any](ev *stream.Event[K, E], step, dest string, mode EmitMode, fn EmitFunc[K, E]) Handler {
	return &emitHandler[K, E]{ev: ev, step: step, dest: dest, mode: mode, fn: fn}
}

type emitHandler[K, E any] struct {
	ev   *stream.Event[K, E]
	step string
	dest string
	mode EmitMode
	fn   EmitFunc[K, E]
	// bufs holds *emitBuf: the buffers the function encodes into, one
	// per run in progress. They are only ever appended to, so a buffer
	// goes back to the pool with its bytes still the envelopes'.
	bufs sync.Pool
}

// emitBuf is the buffer of an EmitFunc.
type emitBuf struct{ b []byte }

func (h *emitHandler[K, E]) decl() declaration {
	if h.ev == nil {
		return nil
	}
	return typedDecl[K, E]{h.ev}
}

func (h *emitHandler[K, E]) info() handlerInfo {
	return handlerInfo{kind: "emit", name: h.step, dest: h.dest, mode: h.mode,
		tableType: reflect.TypeFor[E]().String()}
}

// emitted is one envelope a record publishes to a destination: what the
// outbox keeps of it (its strand headers but the trace context and origin,
// which outbox messages do not carry, and its payload). A batch holds one
// per record and step: it is kept small.
type emitted struct {
	dest     string
	key      []byte
	payload  []byte
	seq      uint64
	tag      planner.Tag
	ordering planner.Ordering
	algebra  algebra.Kind
	hasSeq   bool
}

// emittedOf is env published to dest.
func emittedOf(dest string, env *stream.Envelope) emitted {
	h := &env.Headers
	return emitted{dest: dest, key: h.Key, payload: env.Payload, seq: h.Seq, tag: h.Tag,
		ordering: h.Ordering, algebra: h.Algebra, hasSeq: h.HasSeq}
}

// headers returns the strand headers of e.
func (e *emitted) headers() connector.Headers {
	return connector.Headers{Key: e.key, Tag: e.tag, Ordering: e.ordering, Algebra: e.algebra, Seq: e.seq, HasSeq: e.hasSeq}
}

// callEmit calls an emitting function and turns a panic into an error.
func callEmit[K, E any](ctx context.Context, h *emitHandler[K, E], key K, e E, payload []byte, out []stream.Envelope, buf []byte) (res []stream.Envelope, resBuf []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, resBuf, err = out, buf, fmt.Errorf("panic: %v", p)
		}
	}()
	return h.fn(ctx, key, e, payload, out, buf)
}

// emit runs the run's emitting handlers over its decoded events, KeyBy
// steps first, and stages what they publish per record (b.emits). A KeyBy
// step that cannot key an event dead-letters its record (ReasonKeyBy) and
// drops it from the run; under BlockPoisonedKey the rest of the run is blocked
// (block is set and the events after it are dropped, still pending). A To
// step that fails at an event cuts the run before it: the events before
// are applied, and fail says where the run stopped. Envelopes staged for
// records that end up not applied are never written.
func (r *eventRunner[K, E]) emit(rc *runCtx, key K, buf *runBuf[E]) (block error, fail *runResult) {
	b := rc.b
	// Each record's envelopes go in a slice of its own, carved from one
	// allocation for the run with room for one per step (a record that
	// emits more grows its own slice only).
	per := len(r.emits)
	arena := make([]emitted, len(buf.events)*per)
	for j, i := range buf.idx {
		b.emits[i] = arena[j*per : j*per : (j+1)*per]
	}
	for _, h := range r.emits {
		eb, _ := h.bufs.Get().(*emitBuf)
		if eb == nil {
			eb = &emitBuf{}
		}
		// Each step sees the events the steps before it kept: a record
		// dead-lettered or cut off by one is not emitted by the next.
		kept := 0
		j := 0
		for ; j < len(buf.events); j++ {
			i := buf.idx[j]
			out, eBuf, err := callEmit(rc.ctx, h, key, buf.events[j], b.records[i].Payload, buf.env[:0], eb.b)
			buf.env, eb.b = out[:0], eBuf
			if err != nil && h.mode == EmitKeyBy {
				b.deadLetter(i, deadletter.ReasonKeyBy, fmt.Errorf("%w: KeyBy %q: type tag %d (%s): %w", ErrKeyBy, h.step, r.ev.Tag(), r.ev.Name(), err))
				if b.poison == stream.BlockPoisonedKey {
					block = err
					break // the rest is blocked, still pending
				}
				continue
			}
			if err != nil {
				fail = &runResult{end: runFailed, err: fmt.Errorf("To %q: %w", h.step, err), at: i}
				break // the rest is not applied this time
			}
			for k := range out {
				b.emits[i] = append(b.emits[i], emittedOf(h.dest, &out[k]))
			}
			clear(out)
			buf.events[kept], buf.idx[kept] = buf.events[j], i
			kept++
		}
		h.bufs.Put(eb)
		clear(buf.events[kept:])
		buf.events, buf.idx = buf.events[:kept], buf.idx[:kept]
	}
	return block, fail
}
