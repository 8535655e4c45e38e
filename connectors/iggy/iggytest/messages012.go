package iggytest

import (
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// partitionOp012 answers SendMessages and the consumer-offset writes.
func (c *conn) partitionOp012(q *wire.RequestHeader, body []byte) error {
	switch q.Operation {
	case wire.OpSendMessages:
		return c.send012(q, body)
	case wire.OpStoreOffset:
		so, err := wire.ParseStoreOffset(body, wire.V012)
		if err != nil {
			return c.reply012(q, wire.StatusInvalidFormat, nil)
		}
		return c.passThrough012(q, CmdStoreConsumerOffset, so.Append(nil, wire.Legacy), func([]byte) ([]byte, error) { return nil, nil })
	case wire.OpDeleteOffset:
		ref, _, err := wire.ParseOffsetRef(body, wire.V012, true)
		if err != nil {
			return c.reply012(q, wire.StatusInvalidFormat, nil)
		}
		return c.passThrough012(q, CmdDeleteConsumerOffset, ref.Append(nil), func([]byte) ([]byte, error) { return nil, nil })
	}
	return c.reply012(q, wire.StatusInvalidCommand, nil)
}

// send012 admits a batch as server 0.10 does (explicit partition, frame
// and batch checksums, message count, partition context), appends it
// through the legacy handler, and confirms where it landed. A request
// number this client had committed already is a retry: it gets an empty
// success and nothing is appended again.
func (c *conn) send012(q *wire.RequestHeader, body []byte) error {
	d := c.s.v012.client(q.Client)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.committed(q.Request) {
		return c.reply012(q, 0, nil)
	}
	sb, err := wire.ParseSendBody(body)
	if err != nil {
		return c.reply012(q, wire.StatusInvalidFormat, nil)
	}
	if sb.Kind != 2 || len(sb.Value) != 4 {
		// Server 0.10 routes explicit partitions only (the client
		// resolves balanced and key partitioning).
		return c.reply012(q, wire.StatusInvalidCommand, nil)
	}
	pid := uint32(sb.Value[0]) | uint32(sb.Value[1])<<8 | uint32(sb.Value[2])<<16 | uint32(sb.Value[3])<<24
	if err := wire.VerifyBatch(sb.Batch); err != nil {
		return c.reply012(q, statusOf(err, wire.StatusInvalidFormat), nil)
	}
	h, _ := wire.ParseBatchHeader(sb.Batch)
	if h.Count != sb.Count || h.Count == 0 {
		return c.reply012(q, wire.StatusInvalidMessagesCount, nil)
	}
	if err := c.authed(); err != nil {
		return c.reply012(q, statusOf(err, wire.StatusUnauthenticated), nil)
	}
	if q.Context.Incarnation != 0 {
		inc, st := c.incarnation(sb.Stream, sb.Topic, pid)
		if st != 0 {
			return c.reply012(q, st, nil)
		}
		if inc != q.Context.Incarnation {
			return c.reply012(q, wire.StatusHistoryUnavailable, nil)
		}
	}
	// The 0.8 body in one pass: the index and the messages are written
	// into their own regions of a buffer sized from the batch (a legacy
	// message is its frame plus 16 header bytes).
	ids := sb.Topic.Append(sb.Stream.Append(nil))
	n := int(h.Count)
	data := int(h.Length) - wire.BatchHeaderSize - n*wire.FrameHeaderSize
	legacy := wire.AppendLegacySendHead(make([]byte, 0, wire.LegacySendSize(len(ids), n, data)), ids, pid, n)
	index := len(legacy)
	legacy = legacy[:index+n*wire.LegacyIndexSize]
	end, i := uint32(0), 0
	_, _ = wire.Frames(sb.Batch, func(bh *wire.BatchHeader, f *wire.Frame) error {
		legacy = wire.AppendLegacyMessage(legacy, &f.ID, bh.OriginTimestamp+uint64(f.TimestampDelta), f.Payload, f.Headers)
		end += uint32(wire.LegacyMessageSize(len(f.Payload), len(f.Headers)))
		wire.AppendLegacyIndex(legacy[index+i*wire.LegacyIndexSize:index+i*wire.LegacyIndexSize], end)
		i++
		return nil
	})
	st, _, err := c.legacy(CmdSendMessages, legacy)
	if err != nil {
		return err
	}
	if st != 0 {
		return c.reply012(q, st, nil)
	}
	d.commit(q.Request)
	conf := wire.Confirmation{Partition: pid, BaseOffset: c.v012.base}
	c.s.mu.RLock()
	if stm, t, err := c.s.resolveTopic(toIdent(sb.Stream), toIdent(sb.Topic)); err == nil {
		conf.Stream, conf.Topic = stm.id, t.id
	}
	c.s.mu.RUnlock()
	return c.reply012(q, 0, wire.AppendConfirmations(nil, []wire.Confirmation{conf}))
}

// poll012 answers PollMessages (same request layout in both protocols)
// with the polled messages re-framed as 0.10 batches: one batch per run of
// messages that share their append timestamp (a batch has one), stamped
// and sealed as the server stores them. The reply uses the 16-byte prefix
// of the 0.9 form (no partition context; design §7).
func (c *conn) poll012(q *wire.RequestHeader, body []byte) error {
	st, p, err := c.legacy(CmdPollMessages, body)
	if err != nil {
		return err
	}
	if st != 0 || len(p) == 0 {
		return c.reply012(q, st, p)
	}
	pre, err := wire.ParsePollPrefix(p)
	if err != nil {
		return c.reply012(q, wire.StatusError, nil)
	}
	v := c.v012
	out := pre.Append(v.poll[:0])
	msgs := p[wire.PollPrefixSize:]
	n := uint32(0)
	for len(msgs) > 0 {
		// Find the run: consecutive offsets with one timestamp.
		first, k, err := wire.NextLegacyMessage(msgs)
		if err != nil {
			c.s.log.Error("iggytest: cannot translate a legacy poll reply to 0.12.0", "err", err)
			return c.reply012(q, wire.StatusError, nil)
		}
		origin, count, runEnd := first.OriginTimestamp, uint32(1), k
		for prev := first.Offset; runEnd < len(msgs); count++ {
			m, k, err := wire.NextLegacyMessage(msgs[runEnd:])
			if err != nil || m.Timestamp != first.Timestamp || m.Offset != prev+1 {
				break
			}
			origin, prev, runEnd = min(origin, m.OriginTimestamp), m.Offset, runEnd+k
		}
		var start int
		out, start = wire.BeginBatch(out)
		for run := msgs[:runEnd]; len(run) > 0; {
			m, k, _ := wire.NextLegacyMessage(run)
			out = wire.AppendFrame(out, &m.ID, uint32(m.Offset-first.Offset), uint32(min(m.OriginTimestamp-origin, 1<<32-1)), m.Payload, m.Headers)
			run = run[k:]
		}
		wire.FinishStoredBatch(out, start, uint64(pre.Partition), first.Offset, first.Timestamp, origin, count)
		msgs = msgs[runEnd:]
		n += count
	}
	if n != pre.Count {
		c.s.log.Error("iggytest: a legacy poll reply claims another count", "count", pre.Count, "messages", n)
		return c.reply012(q, wire.StatusError, nil)
	}
	if cap(out) <= 4<<20 {
		v.poll = out[:0]
	}
	return c.reply012(q, 0, out)
}
