package iggytest

import (
	"errors"

	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// The binary protocol 0.12.0 requests, translated to the legacy handlers:
// a request's body is rewritten into its 0.8 form where the layouts differ,
// executed by the same code that serves 0.8 clients (so both protocols see
// one state and one set of rules), and the legacy reply is rewritten into
// the 0.10 form.

func toIdent(id wire.Identifier) ident {
	if id.Kind == wire.IDString {
		return ident{name: id.Str, isName: true}
	}
	return ident{num: id.Num}
}

// read012 answers a NonReplicated request (reads, Ping, lookups).
func (c *conn) read012(q *wire.RequestHeader, body []byte) error {
	switch q.Code {
	case wire.CodePing, wire.CodeGetClusterMetadata, wire.CodeGetMe, wire.CodeGetClients,
		wire.CodeGetConsumerOffset, wire.CodeGetStats:
		// Same layouts in both protocols (GetMe/GetClients/GetStats: the
		// 0.10 layouts are not published; the 0.8 ones are kept).
		return c.passThrough012(q, Command(q.Code), body, nil)
	case wire.CodePollMessages:
		return c.poll012(q, body)
	case wire.CodeGetStream:
		return c.passThrough012(q, CmdGetStream, body, func(p []byte) ([]byte, error) {
			s, ok, err := wire.ParseStream(p, wire.Legacy)
			if err != nil || !ok {
				return nil, err
			}
			out := wire.AppendStream(nil, &s, wire.V012)
			for i := range s.Topics {
				out = wire.AppendTopic(out, &s.Topics[i], wire.V012)
			}
			return out, nil
		})
	case wire.CodeGetStreams:
		return c.passThrough012(q, CmdGetStreams, body, func(p []byte) ([]byte, error) {
			ss, err := wire.ParseStreams(p, wire.Legacy)
			var out []byte
			for i := range ss {
				out = wire.AppendStream(out, &ss[i], wire.V012)
			}
			return out, err
		})
	case wire.CodeGetTopic:
		return c.passThrough012(q, CmdGetTopic, body, topic012)
	case wire.CodeGetTopics:
		return c.passThrough012(q, CmdGetTopics, body, func(p []byte) ([]byte, error) {
			ts, err := wire.ParseTopics(p, wire.Legacy)
			return wire.AppendTopics(nil, ts, wire.V012), err
		})
	case wire.CodeGetPartitionRoute:
		return c.route012(q, body)
	}
	return c.reply012(q, wire.StatusInvalidCommand, nil)
}

// topic012 rewrites a legacy topic reply (header and partitions) into the
// 0.10 form, whose partitions carry their context: the incarnation is the
// partition's creation time, which changes when a partition id is reused.
func topic012(p []byte) ([]byte, error) {
	t, ok, err := wire.ParseTopic(p, wire.Legacy)
	if err != nil || !ok {
		return nil, err
	}
	out := wire.AppendTopic(nil, &t, wire.V012)
	for i := range t.Partitions {
		pi := t.Partitions[i]
		pi.Context = wire.PartitionContext{Incarnation: max(pi.CreatedAt, 1)}
		out = wire.AppendPartition(out, &pi, wire.V012)
	}
	return out, nil
}

// passThrough012 runs cmd with the legacy body and answers its reply,
// rewritten by conv when given. A framed operation's reply gets its result
// section; its rejection is a result entry (a committed rejection), except
// a missing login (header status 40).
func (c *conn) passThrough012(q *wire.RequestHeader, cmd Command, body []byte, conv func([]byte) ([]byte, error)) error {
	st, p, err := c.legacy(cmd, body)
	if err != nil {
		return err
	}
	if st == 0 && conv != nil && len(p) > 0 {
		if p, err = conv(p); err != nil {
			c.s.log.Error("iggytest: cannot translate a legacy reply to 0.12.0", "command", cmd, "err", err)
			return c.reply012(q, wire.StatusError, nil)
		}
	}
	if !q.Operation.Framed() {
		return c.reply012(q, st, p)
	}
	if st == wire.StatusUnauthenticated || st == wire.StatusStaleClient {
		return c.reply012(q, st, nil)
	}
	if st != 0 {
		return c.reply012(q, 0, wire.AppendResultError(nil, st))
	}
	return c.reply012(q, 0, append(wire.AppendResultOK(nil), p...))
}

// statusOf returns the status a decoding error asks for, else def.
func statusOf(err error, def wire.Status) wire.Status {
	var st wire.Status
	if errors.As(err, &st) {
		return st
	}
	return def
}

// metadata012 answers a replicated metadata operation.
func (c *conn) metadata012(q *wire.RequestHeader, body []byte) error {
	switch q.Operation {
	case wire.OpCreateStream:
		cs, err := wire.ParseCreateStream(body, wire.V012)
		if err != nil {
			return c.reply012(q, statusOf(err, wire.StatusInvalidFormat), nil)
		}
		return c.passThrough012(q, CmdCreateStream, cs.Append(nil, wire.Legacy), func(p []byte) ([]byte, error) {
			s, _, err := wire.ParseStream(p, wire.Legacy)
			return wire.AppendStream(nil, &s, wire.V012), err
		})
	case wire.OpCreateTopic:
		ct, err := wire.ParseCreateTopic(body, wire.V012)
		if err != nil {
			return c.reply012(q, statusOf(err, wire.StatusInvalidFormat), nil)
		}
		return c.passThrough012(q, CmdCreateTopic, ct.Append(nil, wire.Legacy), topic012)
	case wire.OpDeleteStream, wire.OpDeleteTopic, wire.OpCreatePartitions, wire.OpDeletePartitions,
		wire.OpDeleteGroup, wire.OpJoinGroup, wire.OpLeaveGroup:
		return c.passThrough012(q, Command(wire.CodeOf(q.Operation)), body, func([]byte) ([]byte, error) { return nil, nil })
	}
	return c.reply012(q, wire.StatusInvalidCommand, nil)
}

// route012 answers GetPartitionRoute: this node is every partition's
// primary; the context names the partition's incarnation.
func (c *conn) route012(q *wire.RequestHeader, body []byte) error {
	r, err := wire.ParsePartitionRoute(body)
	if err != nil {
		return c.reply012(q, wire.StatusInvalidFormat, nil)
	}
	if err := c.authed(); err != nil {
		return c.reply012(q, statusOf(err, wire.StatusUnauthenticated), nil)
	}
	inc, st := c.incarnation(r.Stream, r.Topic, r.Partition)
	if st != 0 {
		return c.reply012(q, st, nil)
	}
	return c.reply012(q, 0, wire.PartitionContext{Incarnation: inc}.Append(nil))
}

// incarnation returns a partition's incarnation (its creation time).
func (c *conn) incarnation(sid, tid wire.Identifier, pid uint32) (uint64, wire.Status) {
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, t, err := s.resolveTopic(toIdent(sid), toIdent(tid))
	if err == nil {
		err = c.can(permPoll, st.id, t.id)
		if err != nil {
			err = c.can(permSend, st.id, t.id)
		}
	}
	if err != nil {
		return 0, statusOf(err, wire.StatusError)
	}
	if int(pid) >= len(t.partitions) {
		return 0, wire.StatusPartitionNotFound
	}
	return max(t.partitions[pid].createdAt, 1), 0
}

// statusError → wire.Status for errors.As in statusOf.
func (e statusError) As(target any) bool {
	if p, ok := target.(*wire.Status); ok {
		*p = wire.Status(e)
		return true
	}
	return false
}
