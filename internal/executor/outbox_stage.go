package executor

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
)

// The outbox stage of a batch (docs/design.md §11): the Task's side of the
// outbox and origin rows whose layouts internal/rows defines. loadOutbox
// reads a partition's outbox sequence and applied origins, duplicate drops a
// message applied already, writeOutbox stages a batch's outbox rows and
// origins in its commit, applyOutbox takes them over once it committed.

// loadOutbox reads the partition's next outbox sequence number and the
// origins it applied.
func (t *Task) loadOutbox(ctx context.Context) error {
	t.outNext = 1
	if t.src.emits {
		v, ok, err := t.db.Row(state.FamilyOutbox, t.partition, rows.OutboxNextKey(t.src.name))
		if err != nil {
			return err
		}
		if ok {
			if len(v) != 8 {
				return fmt.Errorf("outbox sequence row of %d bytes", len(v))
			}
			t.outNext = binary.BigEndian.Uint64(v)
		}
		t.origin = rows.OriginStream(t.prog.name, t.src.name, t.partition)
	}
	prefix := rows.OriginsPrefix(t.src.name)
	err := t.db.Rows(ctx, state.FamilyOrigins, t.partition, func(key, value []byte) error {
		if bytes.HasPrefix(key, prefix) && len(key) == len(prefix)+rows.OriginLen && rows.IsReplayOrigin(key[len(prefix):]) {
			if t.replayed == nil {
				t.replayed = map[[rows.OriginLen]byte]struct{}{}
			}
			t.replayed[[rows.OriginLen]byte(key[len(prefix):])] = struct{}{}
			return nil
		}
		if !bytes.HasPrefix(key, prefix) || len(key) != len(prefix)+8 || len(value) != 8 {
			return nil
		}
		if t.origins == nil {
			t.origins = map[[8]byte]uint64{}
		}
		t.origins[[8]byte(key[len(prefix):])] = binary.BigEndian.Uint64(value)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read origins: %w", err)
	}
	return nil
}

// duplicate reports whether r, read from the log (not a parked row), is an
// outbox message this partition has applied already, and otherwise notes
// its origin in the batch.
func (b *batch) duplicate(r *connector.Record) bool {
	o := r.Headers.Origin
	if len(o) != rows.OriginLen {
		return false
	}
	if rows.IsReplayOrigin(o) {
		id := [rows.OriginLen]byte(o)
		if _, ok := b.t.replayed[id]; ok {
			return true
		}
		if slices.Contains(b.replays, id) {
			return true
		}
		b.replays = append(b.replays, id)
		return false
	}
	s, seq := [8]byte(o[:8]), binary.BigEndian.Uint64(o[8:])
	last, ok := b.origins[s]
	if !ok {
		last, ok = b.t.origins[s]
	}
	if ok && seq <= last {
		return true
	}
	if b.origins == nil {
		b.origins = map[[8]byte]uint64{}
	}
	b.origins[s] = seq
	return false
}

// writeOutbox writes what the applied records of b publish as outbox rows,
// in record order, and the origins b saw; the Task takes both over in
// applyStaged. The rows and the messages handed to the publisher share a
// few allocations per batch: a batch can stage tens of thousands of
// messages.
func (t *Task) writeOutbox(b *batch, res *Result) {
	for s, seq := range b.origins {
		key := rows.OriginKey(t.src.name, s[:])
		b.tx.PutRow(state.FamilyOrigins, t.partition, key, binary.BigEndian.AppendUint64(nil, seq))
	}
	for _, id := range b.replays {
		key := rows.OriginKey(t.src.name, id[:])
		b.tx.PutRow(state.FamilyOrigins, t.partition, key, binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())))
	}
	if b.emits == nil {
		return
	}
	// What timer handlers emitted comes first: they ran before the
	// batch's records (timers.go).
	groups := make([][]emitted, 0, len(b.records)+1)
	if len(b.timerEmits) > 0 && !b.replayingTimers() { // replayingTimers: replaymark.go
		groups = append(groups, b.timerEmits)
	}
	for i := range b.records {
		if b.status[i] == statusApplied && len(b.emits[i]) > 0 && !b.replayed(i) { // replayed: replaymark.go
			groups = append(groups, b.emits[i])
		}
	}
	n, size, seqs := 0, 0, 0
	var dests []string
	var perDest []int // messages per destination, then where each one's go next
	for _, g := range groups {
		for j := range g {
			em := &g[j]
			n++
			size += 32 + len(em.key) + len(em.payload)
			if em.hasSeq {
				seqs++
			}
			d := slices.Index(dests, em.dest)
			if d < 0 {
				d = len(dests)
				dests = append(dests, em.dest)
				perDest = append(perDest, 0)
			}
			perDest[d]++
		}
	}
	if n == 0 {
		return
	}
	// The messages, laid out per destination, each destination's in seq
	// order (sendRows hands them to the sinks as they are).
	at := 0
	for d, c := range perDest {
		perDest[d] = at
		at += c
	}
	msgs := make([]connector.Message, n)
	out := make([]OutboxRow, 0, n)
	arena := rows.NewMsgArena(n*4+seqs, n*rows.OriginLen+seqs*8+64)
	enc := rows.NewOutboxEncoder(size + (n/rows.OutboxRowMessages+1)*(64+len(dests)*64))
	var key []byte
	rowBytes := 0
	next := t.outNext
	endRow := func() {
		b.tx.AppendRow(state.FamilyOutbox, t.partition, key, enc.End())
		out[len(out)-1].Last = true
	}
	for _, g := range groups {
		for j := range g {
			em := &g[j]
			if key != nil && (enc.Count() == rows.OutboxRowMessages || rowBytes >= rows.OutboxRowBytes) {
				endRow()
				key = nil
			}
			if key == nil {
				key = rows.OutboxKey(t.src.name, next)
				enc.Begin(t.origin, dests)
				rowBytes = 0
			}
			h := em.headers()
			m, err := arena.Message(t.origin, next, &h, em.payload)
			if err != nil {
				// The emitting handler validated the envelope; a failure
				// here is a bug, and the batch must not commit.
				b.setFatal(fmt.Errorf("outbox message to %s: %w", em.dest, err))
				return
			}
			d := slices.Index(dests, em.dest)
			enc.Add(d, &h, em.payload)
			rowBytes += len(em.payload)
			mi := perDest[d]
			perDest[d]++
			msgs[mi] = m
			out = append(out, OutboxRow{Key: key, Seq: next, Dest: em.dest, Msgs: msgs, Index: mi, Size: len(m.Payload)})
			next++
		}
	}
	endRow()
	res.Outbox = out
	res.Emitted = len(out)
	b.tx.PutRow(state.FamilyOutbox, t.partition, rows.OutboxNextKey(t.src.name), binary.BigEndian.AppendUint64(nil, next))
	b.outNext = next
}

// OutboxRow is one outbox message a commit wrote (Result.Outbox): the
// message outbox publishes it from memory once the commit returned, without
// reading its row back.
type OutboxRow struct {
	Key  []byte // the key of the row holding the message; deleted once its Last message is published
	Seq  uint64 // the message's sequence number in the partition's outbox
	Dest string // the destination topic (To, KeyBy)
	// Msgs[Index] is the message: the messages of one commit share one
	// array, laid out per destination in seq order, so that a round of one
	// commit's messages is handed to each sink as a part of it, without a
	// copy.
	Msgs  []connector.Message
	Index int
	Size  int  // payload bytes
	Last  bool // the message ends its row
}

// applyOutbox takes over a committed batch's outbox sequence and origins.
func (t *Task) applyOutbox(b *batch) {
	if b.outNext != 0 {
		t.outNext = b.outNext
	}
	if len(b.origins) > 0 && t.origins == nil {
		t.origins = map[[8]byte]uint64{}
	}
	for s, seq := range b.origins {
		t.origins[s] = seq
	}
	if len(b.replays) > 0 && t.replayed == nil {
		t.replayed = map[[rows.OriginLen]byte]struct{}{}
	}
	for _, id := range b.replays {
		t.replayed[id] = struct{}{}
	}
}
