package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/strand-io/strand/internal/rowenc"
	"github.com/strand-io/strand/stream"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/strand-io/strand/internal/state"
)

// Limits of one publication round of dead letters.
const (
	deadLetterRoundMessages = 512
	deadLetterRoundBytes    = 4 << 20
)

// pendingDeadLetter is one committed dead-letter row of the processor's source.
type pendingDeadLetter struct {
	key    []byte
	letter stream.DeadLetter
}

var errStopRows = errors.New("stop")

// deadLetterRows reads the committed dead-letter rows of the processor's
// source in partition pt, in offset order: at most limit rows and about
// deadLetterRoundBytes of payload (limit 0: all).
func (p *Processor) deadLetterRows(ctx context.Context, pt uint32, limit int) ([]pendingDeadLetter, error) {
	prefix := rowenc.AppendString(nil, p.name)
	var out []pendingDeadLetter
	size := 0
	err := p.db.Rows(ctx, state.FamilyDeadLetters, pt, func(key, value []byte) error {
		if !bytes.HasPrefix(key, prefix) || len(key) != len(prefix)+8 {
			if len(out) > 0 {
				return errStopRows // past this source's rows
			}
			return nil
		}
		var d stream.DeadLetter
		if err := d.UnmarshalBinary(value); err != nil {
			return fmt.Errorf("stream: source %q partition %d: dead-letter row %x: %w", p.name, pt, key, err)
		}
		out = append(out, pendingDeadLetter{key: bytes.Clone(key), letter: d})
		size += len(d.Payload)
		if limit > 0 && (len(out) >= limit || size >= deadLetterRoundBytes) {
			return errStopRows
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopRows) {
		return nil, err
	}
	return out, nil
}

// deadLetterMessage is d.Message() made acceptable to any broker strand
// publishes to: header values of 1..255 bytes (an empty one, such as the
// error text of a dead letter without error, is left out; a longer one is
// cut at a UTF-8 boundary) and a non-empty payload (see
// stream.HeaderDLQEmptyPayload).
func deadLetterMessage(d stream.DeadLetter) stream.Message {
	m := d.Message()
	hs := m.Headers[:0]
	for _, f := range m.Headers {
		if len(f.Value) == 0 {
			continue
		}
		if len(f.Value) > stream.MaxKeyLen {
			v := f.Value[:stream.MaxKeyLen]
			for !utf8.Valid(v) && len(v) > stream.MaxKeyLen-utf8.UTFMax {
				v = v[:len(v)-1] // drop a cut rune
			}
			if !utf8.Valid(v) {
				v = f.Value[:stream.MaxKeyLen] // not text: cut anywhere
			}
			f.Value = v
		}
		hs = append(hs, f)
	}
	m.Headers = hs
	if len(m.Payload) == 0 {
		m.Headers = append(m.Headers, stream.Field{Name: stream.HeaderDLQEmptyPayload, Value: []byte("1")})
		m.Payload = []byte{0}
	}
	return m
}

// deadLetterOutbox publishes the committed dead-letter rows of a processor
// to its sink and deletes them once published (see Processor).
type deadLetterOutbox struct {
	p    *Processor
	sink stream.Sink
	wake chan struct{}

	mu    sync.Mutex
	dirty map[uint32]bool // partitions that may have rows to publish
	// unsure[pt]: rows of pt with offsets below it may have been published
	// already (by an earlier run, or by a failed Send), so they are checked
	// with the stream.SentChecker before being sent.
	unsure map[uint32]uint64
}

func newDeadLetterOutbox(p *Processor) *deadLetterOutbox {
	return &deadLetterOutbox{
		p: p, sink: p.opts.sink, wake: make(chan struct{}, 1),
		dirty: map[uint32]bool{}, unsure: map[uint32]uint64{},
	}
}

// start registers a partition whose checkpoint at Run is next: every row
// already committed has an offset below it.
func (o *deadLetterOutbox) start(pt uint32, next uint64) {
	o.mu.Lock()
	o.dirty[pt] = true
	o.unsure[pt] = next
	o.mu.Unlock()
}

// notify says that partition pt committed dead letters.
func (o *deadLetterOutbox) notify(pt uint32) {
	o.mu.Lock()
	o.dirty[pt] = true
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// fatalError marks an outbox error that must stop Run (a store failure or a
// hook); other errors (the sink's) are retried.
type fatalError struct{ err *PartitionError }

func (f fatalError) Error() string { return f.err.Error() }
func (f fatalError) Unwrap() error { return f.err }

// run publishes until the pipelines are done, then makes one last pass
// with drainCtx. It returns only fatal errors.
func (o *deadLetterOutbox) run(runCtx, drainCtx context.Context, pipelinesDone <-chan struct{}) error {
	lo, hi := o.p.opts.dlqBackoff[0], o.p.opts.dlqBackoff[1]
	wait := lo
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var retryC <-chan time.Time
		if runCtx.Err() == nil {
			err := o.drain(runCtx)
			var fe fatalError
			switch {
			case errors.As(err, &fe):
				return fe.err
			case err != nil && runCtx.Err() == nil:
				o.p.log.Warn("strand: publishing dead letters failed; retrying", "in", wait, "err", err)
				timer.Reset(wait)
				retryC = timer.C
				wait = min(wait*2, hi)
			case err == nil:
				wait = lo
			}
		}
		select {
		case <-o.wake:
		case <-retryC:
		case <-pipelinesDone:
			o.mu.Lock()
			for pt := range o.dirty {
				o.dirty[pt] = true
			}
			o.mu.Unlock()
			err := o.drain(drainCtx)
			var fe fatalError
			if errors.As(err, &fe) {
				return fe.err
			}
			if err != nil {
				o.p.log.Warn("strand: dead letters left in the store at shutdown; they are published on the next run", "err", err)
			}
			return nil
		}
	}
}

// drain publishes the rows of every dirty partition; it goes on with the
// other partitions when one fails and returns the first error.
func (o *deadLetterOutbox) drain(ctx context.Context) error {
	o.mu.Lock()
	var parts []uint32
	for pt, d := range o.dirty {
		if d {
			parts = append(parts, pt)
			o.dirty[pt] = false
		}
	}
	o.mu.Unlock()
	slices.Sort(parts)
	var first error
	for _, pt := range parts {
		err := o.drainPartition(ctx, pt)
		if err == nil {
			continue
		}
		o.mu.Lock()
		o.dirty[pt] = true
		o.mu.Unlock()
		if _, fatal := err.(fatalError); fatal {
			return err
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			return first
		}
	}
	return first
}

// drainPartition publishes and deletes the rows of partition pt, round by
// round, until none is left.
func (o *deadLetterOutbox) drainPartition(ctx context.Context, pt uint32) error {
	p := o.p
	h := &p.opts.hooks
	fatal := func(op stream.PartitionOp, offset uint64, err error) error {
		return fatalError{&PartitionError{Source: p.name, Partition: pt, Offset: offset, Op: op, Err: err}}
	}
	storeErr := func(op string, offset uint64, err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("stream: source %q partition %d: %s: %w", p.name, pt, op, err)
		}
		return fatal(stream.OpDeadLetters, offset, fmt.Errorf("%s: %w", op, err))
	}
	for {
		rows, err := p.deadLetterRows(ctx, pt, deadLetterRoundMessages)
		if err != nil {
			return storeErr("read dead letters", 0, err)
		}
		if len(rows) == 0 {
			return nil
		}
		first, last := rows[0].letter.Offset, rows[0].letter.Offset
		letters := make([]stream.DeadLetter, len(rows))
		msgs := make([]stream.Message, len(rows))
		for i, r := range rows {
			letters[i] = r.letter
			msgs[i] = deadLetterMessage(r.letter)
			first, last = min(first, r.letter.Offset), max(last, r.letter.Offset)
		}

		// Leave out what an earlier run or a failed Send already published.
		send := make([]bool, len(rows))
		for i := range send {
			send[i] = true
		}
		o.mu.Lock()
		unsure := o.unsure[pt]
		o.mu.Unlock()
		if p.checks != nil {
			var idx []int
			var check []stream.Message
			for i, r := range rows {
				if r.letter.Offset < unsure {
					idx = append(idx, i)
					check = append(check, msgs[i])
				}
			}
			if len(check) > 0 {
				sent, err := p.checks.Sent(ctx, check)
				if err == nil && len(sent) != len(check) {
					err = fmt.Errorf("stream.SentChecker returned %d answers for %d messages", len(sent), len(check))
				}
				if err != nil {
					p.update(pt, func(ps *stream.PartitionStats) { ps.PublishErrors++ })
					return fmt.Errorf("stream: source %q partition %d: check dead letters %d..%d already published: %w", p.name, pt, first, last, err)
				}
				for j, i := range idx {
					send[i] = !sent[j]
				}
			}
		}
		var outMsgs []stream.Message
		var outLetters []stream.DeadLetter
		for i := range rows {
			if send[i] {
				outMsgs = append(outMsgs, msgs[i])
				outLetters = append(outLetters, letters[i])
			}
		}

		if len(outMsgs) > 0 {
			// The rows' commit must be durable before anyone can see the
			// messages (NoSync stores).
			if err := p.db.SyncWAL(); err != nil {
				return storeErr("sync before publishing dead letters", first, err)
			}
			if h.BeforeDeadLetterSend != nil {
				if err := h.BeforeDeadLetterSend(pt, outLetters); err != nil {
					return fatal(stream.OpHook, first, fmt.Errorf("BeforeDeadLetterSend: %w", err))
				}
			}
			if err := o.sink.Send(ctx, outMsgs); err != nil {
				o.raiseUnsure(pt, last+1)
				p.update(pt, func(ps *stream.PartitionStats) { ps.PublishErrors++ })
				return fmt.Errorf("stream: source %q partition %d: publish %d dead letters (offsets %d..%d): %w", p.name, pt, len(outMsgs), first, last, err)
			}
			if h.AfterDeadLetterSend != nil {
				if err := h.AfterDeadLetterSend(pt, outLetters); err != nil {
					o.raiseUnsure(pt, last+1)
					return fatal(stream.OpHook, first, fmt.Errorf("AfterDeadLetterSend: %w", err))
				}
			}
		}

		tx := p.db.NewTxn()
		for _, r := range rows {
			tx.DeleteRow(state.FamilyDeadLetters, pt, r.key)
		}
		if err := tx.Commit(ctx); err != nil {
			o.raiseUnsure(pt, last+1)
			return storeErr("delete published dead letters", first, err)
		}
		p.update(pt, func(ps *stream.PartitionStats) { ps.Published += uint64(len(rows)) })
		if h.AfterDeadLetterDelete != nil {
			if err := h.AfterDeadLetterDelete(pt, letters); err != nil {
				return fatal(stream.OpHook, first, fmt.Errorf("AfterDeadLetterDelete: %w", err))
			}
		}
		if len(rows) < deadLetterRoundMessages {
			// A short round may have been cut by bytes: look again.
			more, err := p.deadLetterRows(ctx, pt, 1)
			if err != nil {
				return storeErr("read dead letters", 0, err)
			}
			if len(more) == 0 {
				return nil
			}
		}
	}
}

// raiseUnsure marks the rows of pt below next as possibly published.
func (o *deadLetterOutbox) raiseUnsure(pt uint32, next uint64) {
	o.mu.Lock()
	o.unsure[pt] = max(o.unsure[pt], next)
	o.mu.Unlock()
}
