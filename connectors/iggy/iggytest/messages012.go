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
	ids := sb.Topic.Append(sb.Stream.Append(nil))
	data := 0
	_, _ = wire.Frames(sb.Batch, func(_ *wire.BatchHeader, f *wire.Frame) error {
		data += len(f.Payload) + len(f.Headers)
		return nil
	})
	legacy := make([]byte, 0, wire.LegacySendSize(len(ids), int(h.Count), data))
	legacy = wire.AppendLegacySendHead(legacy, ids, pid, int(h.Count))
	end := uint32(0)
	_, _ = wire.Frames(sb.Batch, func(_ *wire.BatchHeader, f *wire.Frame) error {
		end += uint32(wire.LegacyMessageSize(len(f.Payload), len(f.Headers)))
		legacy = wire.AppendLegacyIndex(legacy, end)
		return nil
	})
	_, _ = wire.Frames(sb.Batch, func(bh *wire.BatchHeader, f *wire.Frame) error {
		legacy = wire.AppendLegacyMessage(legacy, &f.ID, bh.OriginTimestamp+uint64(f.TimestampDelta), f.Payload, f.Headers)
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
	pre, msgs, err := wire.ParseLegacyPollReply(p)
	if err != nil {
		c.s.log.Error("iggytest: cannot translate a legacy poll reply to 0.12.0", "err", err)
		return c.reply012(q, wire.StatusError, nil)
	}
	out := pre.Append(nil)
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].Timestamp == msgs[i].Timestamp && msgs[j].Offset == msgs[j-1].Offset+1 {
			j++
		}
		run := msgs[i:j]
		origin := run[0].OriginTimestamp
		for _, m := range run {
			origin = min(origin, m.OriginTimestamp)
		}
		var start int
		out, start = wire.BeginBatch(out)
		for _, m := range run {
			delta := m.OriginTimestamp - origin
			out = wire.AppendFrame(out, &m.ID, uint32(m.Offset-run[0].Offset), uint32(min(delta, 1<<32-1)), m.Payload, m.Headers)
		}
		wire.FinishBatch(out, start, origin, uint32(len(run)))
		wire.StampBatch(out[start:], uint64(pre.Partition), run[0].Offset, run[0].Timestamp)
		i = j
	}
	return c.reply012(q, 0, out)
}
