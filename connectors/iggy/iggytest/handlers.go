package iggytest

import (
	"sort"
	"time"
)

// dispatch executes one request and writes its response. The order of
// checks in every handler follows server 0.8.0: the payload is decoded
// first (a malformed payload answers 3 or 4 even when not logged in), then
// the session must be authenticated (40), then entities are resolved.
func (c *conn) dispatch(cmd Command, p []byte) error {
	switch cmd {
	case CmdPing:
		if !c.sess.stale.Load() {
			c.sess.lastBeat.Store(time.Now().UnixNano())
		}
		return c.writeOK(c.wbuf[:8])
	case CmdLoginUser:
		return c.replyLogin(c.loginUser(p))
	case CmdLoginWithPersonalAccessToken:
		return c.replyLogin(c.loginToken(p))
	case CmdLogoutUser:
		return c.reply(c.logout())
	case CmdGetClusterMetadata:
		return c.reply(c.clusterMetadata())
	case CmdGetMe:
		return c.reply(c.getMe())
	case CmdGetClient:
		return c.reply(c.getClient(p))
	case CmdGetClients:
		return c.reply(c.getClients())
	case CmdCreateStream:
		return c.reply(c.createStream(p))
	case CmdGetStream:
		return c.reply(c.getStream(p))
	case CmdGetStreams:
		return c.reply(c.getStreams())
	case CmdDeleteStream:
		return c.reply(c.deleteStream(p))
	case CmdUpdateStream:
		return c.reply(c.updateStream(p))
	case CmdPurgeStream:
		return c.reply(c.purgeStream(p))
	case CmdCreateTopic:
		return c.reply(c.createTopic(p))
	case CmdGetTopic:
		return c.reply(c.getTopic(p))
	case CmdGetTopics:
		return c.reply(c.getTopics(p))
	case CmdDeleteTopic:
		return c.reply(c.deleteTopic(p))
	case CmdUpdateTopic:
		return c.reply(c.updateTopic(p))
	case CmdPurgeTopic:
		return c.reply(c.purgeTopic(p))
	case CmdCreatePartitions:
		return c.reply(c.createPartitions(p))
	case CmdDeletePartitions:
		return c.reply(c.deletePartitions(p))
	case CmdSendMessages:
		return c.reply(c.sendMessages(p))
	case CmdPollMessages:
		return c.pollMessages(p)
	case CmdStoreConsumerOffset:
		return c.reply(c.storeOffset(p))
	case CmdGetConsumerOffset:
		return c.reply(c.getOffset(p))
	case CmdDeleteConsumerOffset:
		return c.reply(c.deleteOffset(p))
	case CmdCreateConsumerGroup:
		return c.reply(c.createGroup(p))
	case CmdGetConsumerGroup:
		return c.reply(c.getGroup(p))
	case CmdGetConsumerGroups:
		return c.reply(c.getGroups(p))
	case CmdDeleteConsumerGroup:
		return c.reply(c.deleteGroup(p))
	case CmdJoinConsumerGroup:
		return c.reply(c.joinGroup(p))
	case CmdLeaveConsumerGroup:
		return c.reply(c.leaveGroup(p))
	case CmdGetUser:
		return c.reply(c.getUser(p))
	case CmdGetUsers:
		return c.reply(c.getUsers())
	case CmdCreateUser:
		return c.reply(c.createUser(p))
	case CmdDeleteUser:
		return c.reply(c.deleteUser(p))
	case CmdUpdateUser:
		return c.reply(c.updateUser(p))
	case CmdUpdatePermissions:
		return c.reply(c.updatePermissions(p))
	case CmdChangePassword:
		return c.reply(c.changePassword(p))
	case CmdGetPersonalAccessTokens:
		return c.reply(c.getTokens())
	case CmdCreatePersonalAccessToken:
		return c.reply(c.createToken(p))
	case CmdDeletePersonalAccessToken:
		return c.reply(c.deleteToken(p))
	case CmdGetStats:
		return c.reply(c.getStats())
	default:
		return c.writeStatus(StatusInvalidCommand)
	}
}

var (
	errInvalidCommand = statusError(StatusInvalidCommand)
	errUnauth         = statusError(StatusUnauthenticated)
	errStreamNF       = statusError(StatusStreamIDNotFound)
	errTopicNF        = statusError(StatusTopicIDNotFound)
	errGroupNF        = statusError(StatusConsumerGroupIDNotFound)
	errPartitionNF    = statusError(StatusPartitionNotFound)
	errMemberNF       = statusError(StatusConsumerGroupMemberNotFound)
)

func decodeErr(d *decoder) error {
	if d.st != 0 {
		return statusError(d.st)
	}
	return nil
}

func (c *conn) authed() error {
	if c.sess.stale.Load() {
		return statusError(StatusStaleClient)
	}
	if c.sess.userID.Load() < 0 {
		return errUnauth
	}
	return nil
}

// admit ends a request's prologue once its payload is decoded: a payload
// that did not decode is rejected before the login check, as the server does.
func (c *conn) admit(d *decoder) error {
	if err := decodeErr(d); err != nil {
		return err
	}
	return c.authed()
}

// ok returns the response buffer with the header space reserved.
func (c *conn) ok() encoder { return encoder(c.wbuf[:8]) }

// --- session ----------------------------------------------------------------

func (c *conn) logout() ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	c.sess.userID.Store(-1)
	return c.ok(), nil
}

func (c *conn) appendClientDetails(e encoder, s *session) encoder {
	e = appendClientHeader(e, s)
	for _, g := range s.groups {
		e = e.u32(g.stream).u32(g.topic).u32(g.group)
	}
	return e
}

func (c *conn) getMe() ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	return c.appendClientDetails(c.ok(), c.sess), nil
}

func (c *conn) getClient(p []byte) ([]byte, error) {
	d := decoder{b: p}
	id := d.u32()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	if err := c.canNow(permServerInfo); err != nil {
		return nil, err
	}
	if id == 0 {
		return nil, statusError(StatusInvalidClientID)
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	s := c.s.clients[id]
	if s == nil {
		return c.ok(), nil // server: empty OK (the v0.8.0 SDK panics decoding it)
	}
	return c.appendClientDetails(c.ok(), s), nil
}

func (c *conn) getClients() ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	if err := c.can(permServerInfo, 0, 0); err != nil {
		return nil, err
	}
	ids := make([]uint32, 0, len(c.s.clients))
	for id := range c.s.clients {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	e := c.ok()
	for _, id := range ids {
		e = appendClientHeader(e, c.s.clients[id])
	}
	return e, nil
}

// --- resolution (callers hold s.mu) ------------------------------------------

func (s *Server) findStream(id ident) *stream {
	if id.isName {
		return s.streamNames[id.name]
	}
	return s.streams.get(id.num)
}

func (st *stream) findTopic(id ident) *topic {
	if id.isName {
		return st.byName[id.name]
	}
	return st.topics.get(id.num)
}

func (t *topic) findGroup(id ident) *group {
	if id.isName {
		return t.groupByName[id.name]
	}
	return t.groups.get(id.num)
}

func (s *Server) resolveTopic(sid, tid ident) (*stream, *topic, error) {
	st := s.findStream(sid)
	if st == nil {
		return nil, nil, errStreamNF
	}
	t := st.findTopic(tid)
	if t == nil {
		return st, nil, errTopicNF
	}
	return st, t, nil
}

func (s *Server) resolveGroup(sid, tid, gid ident) (*stream, *topic, *group, error) {
	st, t, err := s.resolveTopic(sid, tid)
	if err != nil {
		return nil, nil, nil, err
	}
	g := t.findGroup(gid)
	if g == nil {
		return nil, nil, nil, errGroupNF
	}
	return st, t, g, nil
}

// withStream, withTopic and withGroup serve the requests whose payload is
// just the entity's identifiers: decode them, admit the request, then resolve
// the entity under the write lock (not found is an error) and run fn there.

func (c *conn) withStream(p []byte, pm perm, fn func(s *Server, st *stream) ([]byte, error)) ([]byte, error) {
	d := decoder{b: p}
	sid := d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.findStream(sid)
	if st == nil {
		return nil, errStreamNF
	}
	if err := c.can(pm, st.id, 0); err != nil {
		return nil, err
	}
	return fn(s, st)
}

func (c *conn) withTopic(p []byte, pm perm, fn func(s *Server, st *stream, t *topic) ([]byte, error)) ([]byte, error) {
	d := decoder{b: p}
	sid, tid := d.ident(), d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st, t, err := s.resolveTopic(sid, tid)
	if err != nil {
		return nil, err
	}
	if err := c.can(pm, st.id, t.id); err != nil {
		return nil, err
	}
	return fn(s, st, t)
}

func (c *conn) withGroup(p []byte, pm perm, fn func(s *Server, st *stream, t *topic, g *group) ([]byte, error)) ([]byte, error) {
	d := decoder{b: p}
	sid, tid, gid := d.ident(), d.ident(), d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st, t, g, err := s.resolveGroup(sid, tid, gid)
	if err != nil {
		return nil, err
	}
	if err := c.can(pm, st.id, t.id); err != nil {
		return nil, err
	}
	return fn(s, st, t, g)
}

// --- streams ------------------------------------------------------------------

func (c *conn) createStream(p []byte) ([]byte, error) {
	d := decoder{b: p}
	name := d.name()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := c.can(permCreateStream, 0, 0); err != nil {
		return nil, err
	}
	if s.streamNames[name] != nil {
		return nil, statusError(StatusStreamNameAlreadyExists)
	}
	op := metaOp{kind: opCreateStream, stream: s.nextStreamID(), createdAt: nowMicros(), name: name}
	if err := s.logOp(&op); err != nil {
		return nil, err
	}
	st := s.applyCreateStream(&op)
	return appendStreamHeader(c.ok(), st), nil
}

func (s *Server) nextStreamID() uint32 {
	if k := len(s.streams.free); k > 0 {
		return uint32(s.streams.free[k-1])
	}
	return uint32(len(s.streams.items))
}

func (c *conn) getStream(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid := d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	st := c.s.findStream(sid)
	if st == nil {
		return c.ok(), nil
	}
	if err := c.can(permGetStream, st.id, 0); err != nil {
		return nil, err
	}
	e := appendStreamHeader(c.ok(), st)
	st.topics.each(func(_ uint32, t *topic) { e = appendTopicHeader(e, t) })
	return e, nil
}

func (c *conn) getStreams() ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	if err := c.can(permGetStreams, 0, 0); err != nil {
		return nil, err
	}
	e := c.ok()
	c.s.streams.each(func(_ uint32, st *stream) { e = appendStreamHeader(e, st) })
	return e, nil
}

func (c *conn) deleteStream(p []byte) ([]byte, error) {
	return c.withStream(p, permManageStream, func(s *Server, st *stream) ([]byte, error) {
		op := metaOp{kind: opDeleteStream, stream: st.id}
		if err := s.logOp(&op); err != nil {
			return nil, err
		}
		s.applyDeleteStream(&op)
		return c.ok(), nil
	})
}

func (c *conn) updateStream(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid := d.ident()
	name := d.name()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.findStream(sid)
	if st == nil {
		return nil, errStreamNF
	}
	if err := c.can(permManageStream, st.id, 0); err != nil {
		return nil, err
	}
	if st.name == name {
		return c.ok(), nil
	}
	if o := s.streamNames[name]; o != nil && o != st {
		return nil, statusError(StatusStreamNameAlreadyExists)
	}
	op := metaOp{kind: opUpdateStream, stream: st.id, name: name}
	if err := s.logOp(&op); err != nil {
		return nil, err
	}
	s.applyUpdateStream(&op)
	return c.ok(), nil
}

func (c *conn) purgeStream(p []byte) ([]byte, error) {
	return c.withStream(p, permManageStream, func(s *Server, st *stream) ([]byte, error) {
		var err error
		st.topics.each(func(_ uint32, t *topic) {
			if e := s.purgeTopicLocked(t); e != nil && err == nil {
				err = e
			}
		})
		if err != nil {
			return nil, err
		}
		return c.ok(), nil
	})
}

// --- topics -------------------------------------------------------------------

func (c *conn) createTopic(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid := d.ident()
	nparts := d.u32()
	compression := d.u8()
	expiry := d.u64()
	maxSize := d.u64()
	replication := d.u8()
	name := d.name()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	if nparts > maxPartitionsPerReq {
		return nil, statusError(StatusTooManyPartitions)
	}
	if compression != 1 && compression != 2 {
		return nil, errInvalidCommand
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.findStream(sid)
	if st == nil {
		return nil, errStreamNF
	}
	if err := c.can(permCreateTopic, st.id, 0); err != nil {
		return nil, err
	}
	if maxSize == 0 {
		maxSize = ^uint64(0) // server default: unlimited
	} else if maxSize < uint64(s.cfg.segmentBytes) {
		return nil, statusError(StatusInvalidTopicSize)
	}
	if expiry == 0 {
		expiry = ^uint64(0) // server default: never expire
	}
	if replication == 0 {
		replication = 1
	}
	if st.byName[name] != nil {
		return nil, statusError(StatusTopicNameAlreadyExists)
	}
	tid := uint32(len(st.topics.items))
	if k := len(st.topics.free); k > 0 {
		tid = uint32(st.topics.free[k-1])
	}
	s.nextUID++
	op := metaOp{kind: opCreateTopic, stream: st.id, topic: tid, uid: s.nextUID, createdAt: nowMicros(),
		count: nparts, compression: compression, replication: replication, expiry: expiry, maxSize: maxSize, name: name}
	if err := s.logOp(&op); err != nil {
		return nil, err
	}
	t, err := s.applyCreateTopic(&op)
	if err != nil {
		return nil, err
	}
	e := appendTopicHeader(c.ok(), t)
	for _, pt := range t.partitions {
		e = e.u32(pt.id).u64(pt.createdAt).u32(0).u64(0).u64(0).u64(0)
	}
	return e, nil
}

func (c *conn) getTopic(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid, tid := d.ident(), d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	st, t, err := c.s.resolveTopic(sid, tid)
	if err != nil {
		return c.ok(), nil
	}
	if err := c.can(permGetTopic, st.id, t.id); err != nil {
		return nil, err
	}
	e := appendTopicHeader(c.ok(), t)
	for _, pt := range t.partitions {
		e = appendPartitionInfo(e, pt)
	}
	return e, nil
}

func (c *conn) getTopics(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid := d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	e := c.ok()
	if st := c.s.findStream(sid); st != nil {
		if err := c.can(permGetTopics, st.id, 0); err != nil {
			return nil, err
		}
		st.topics.each(func(_ uint32, t *topic) { e = appendTopicHeader(e, t) })
	}
	return e, nil
}

func (c *conn) deleteTopic(p []byte) ([]byte, error) {
	return c.withTopic(p, permManageTopic, func(s *Server, st *stream, t *topic) ([]byte, error) {
		op := metaOp{kind: opDeleteTopic, stream: st.id, topic: t.id}
		if err := s.logOp(&op); err != nil {
			return nil, err
		}
		s.applyDeleteTopic(&op)
		return c.ok(), nil
	})
}

func (c *conn) updateTopic(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid, tid := d.ident(), d.ident()
	compression := d.u8()
	expiry := d.u64()
	maxSize := d.u64()
	replication := d.u8()
	name := d.name()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	if compression != 1 && compression != 2 {
		return nil, errInvalidCommand
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st, t, err := s.resolveTopic(sid, tid)
	if err != nil {
		return nil, err
	}
	if err := c.can(permManageTopic, st.id, t.id); err != nil {
		return nil, err
	}
	if t.name != name {
		if o := st.byName[name]; o != nil && o != t {
			return nil, statusError(StatusTopicNameAlreadyExists)
		}
	}
	if replication == 0 {
		replication = 1
	}
	op := metaOp{kind: opUpdateTopic, stream: st.id, topic: t.id, compression: compression,
		replication: replication, expiry: expiry, maxSize: maxSize, name: name}
	if err := s.logOp(&op); err != nil {
		return nil, err
	}
	s.applyUpdateTopic(&op)
	return c.ok(), nil
}

func (c *conn) purgeTopic(p []byte) ([]byte, error) {
	return c.withTopic(p, permManageTopic, func(s *Server, _ *stream, t *topic) ([]byte, error) {
		if err := s.purgeTopicLocked(t); err != nil {
			return nil, err
		}
		return c.ok(), nil
	})
}

func (s *Server) purgeTopicLocked(t *topic) error {
	for _, p := range t.partitions {
		p.mu.Lock()
		segs := p.segs
		p.purgeLocked()
		var err error
		if p.disk != nil {
			err = p.disk.purge(segs)
		}
		p.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// --- partitions ---------------------------------------------------------------

func (c *conn) createPartitions(p []byte) ([]byte, error) {
	return c.changePartitions(p, true)
}

func (c *conn) deletePartitions(p []byte) ([]byte, error) {
	return c.changePartitions(p, false)
}

func (c *conn) changePartitions(p []byte, create bool) ([]byte, error) {
	d := decoder{b: p}
	sid, tid := d.ident(), d.ident()
	n := d.u32()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	if n == 0 || (create && n > maxPartitionsPerReq) {
		return nil, statusError(StatusTooManyPartitions)
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st, t, err := s.resolveTopic(sid, tid)
	if err != nil {
		return nil, err
	}
	if err := c.can(permManageTopic, st.id, t.id); err != nil {
		return nil, err
	}
	op := metaOp{kind: opCreatePartitions, stream: st.id, topic: t.id, count: n, createdAt: nowMicros()}
	if !create {
		if int(n) > len(t.partitions) {
			return nil, statusError(StatusInvalidPartitionsCount)
		}
		op.kind = opDeletePartitions
	}
	if err := s.logOp(&op); err != nil {
		return nil, err
	}
	if create {
		if err := s.applyCreatePartitions(&op); err != nil {
			return nil, err
		}
	} else {
		s.applyDeletePartitions(&op)
	}
	return c.ok(), nil
}

// --- consumer groups ------------------------------------------------------------

func (c *conn) createGroup(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid, tid := d.ident(), d.ident()
	name := d.name()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st, t, err := s.resolveTopic(sid, tid)
	if err != nil {
		return nil, err
	}
	if err := c.can(permGetTopic, st.id, t.id); err != nil {
		return nil, err
	}
	if t.groupByName[name] != nil {
		return nil, statusError(StatusConsumerGroupNameAlreadyExists)
	}
	gid := uint32(len(t.groups.items))
	if k := len(t.groups.free); k > 0 {
		gid = uint32(t.groups.free[k-1])
	}
	op := metaOp{kind: opCreateGroup, stream: st.id, topic: t.id, group: gid, name: name}
	if err := s.logOp(&op); err != nil {
		return nil, err
	}
	g := s.applyCreateGroup(&op)
	return appendGroupHeader(c.ok(), g), nil
}

func (c *conn) getGroup(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid, tid, gid := d.ident(), d.ident(), d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	st, t, g, err := c.s.resolveGroup(sid, tid, gid)
	if err != nil {
		return c.ok(), nil
	}
	if err := c.can(permGetTopic, st.id, t.id); err != nil {
		return nil, err
	}
	e := appendGroupHeader(c.ok(), g)
	g.members.each(func(_ uint32, m *member) {
		e = e.u32(m.id).u32(uint32(len(m.parts)))
		for _, pid := range m.parts {
			e = e.u32(pid)
		}
	})
	return e, nil
}

func (c *conn) getGroups(p []byte) ([]byte, error) {
	d := decoder{b: p}
	sid, tid := d.ident(), d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	e := c.ok()
	if st, t, err := c.s.resolveTopic(sid, tid); err == nil {
		if err := c.can(permGetTopic, st.id, t.id); err != nil {
			return nil, err
		}
		t.groups.each(func(_ uint32, g *group) { e = appendGroupHeader(e, g) })
	}
	return e, nil
}

func (c *conn) deleteGroup(p []byte) ([]byte, error) {
	return c.withGroup(p, permGetTopic, func(s *Server, st *stream, t *topic, g *group) ([]byte, error) {
		op := metaOp{kind: opDeleteGroup, stream: st.id, topic: t.id, group: g.id}
		if err := s.logOp(&op); err != nil {
			return nil, err
		}
		if err := s.applyDeleteGroup(&op); err != nil {
			return nil, err
		}
		return c.ok(), nil
	})
}

func (c *conn) joinGroup(p []byte) ([]byte, error) {
	return c.withGroup(p, permGetTopic, func(s *Server, st *stream, t *topic, g *group) ([]byte, error) {
		// The server first drops members whose client is gone (the broker
		// removes them on disconnect, so normally there are none), without
		// rebalancing.
		g.members.each(func(slot uint32, m *member) {
			if s.clients[m.clientID] == nil {
				g.members.remove(slot)
			}
		})
		if g.memberOf(c.sess.clientID) == nil {
			next := uint32(0)
			g.members.each(func(_ uint32, m *member) {
				if m.id+1 > next {
					next = m.id + 1
				}
			})
			m := &member{id: next, clientID: c.sess.clientID}
			m.slot = uint32(g.members.insert(m))
			g.rebalanceCooperative(nowMicros())
		}
		completeRevocationsLocked(t, g)
		ref := groupRef{st.id, t.id, g.id}
		for _, r := range c.sess.groups {
			if r == ref {
				return c.ok(), nil
			}
		}
		c.sess.groups = append(c.sess.groups, ref)
		return c.ok(), nil
	})
}

func (c *conn) leaveGroup(p []byte) ([]byte, error) {
	return c.withGroup(p, permGetTopic, func(_ *Server, st *stream, t *topic, g *group) ([]byte, error) {
		if !leaveGroupLocked(t, g, c.sess.clientID) {
			return nil, errMemberNF
		}
		ref := groupRef{st.id, t.id, g.id}
		refs := c.sess.groups[:0]
		for _, r := range c.sess.groups {
			if r != ref {
				refs = append(refs, r)
			}
		}
		c.sess.groups = refs
		return c.ok(), nil
	})
}

// leaveGroupLocked removes the client's member from g: a full rebalance,
// and the group forgets what it polled from the leaver's partitions.
func leaveGroupLocked(t *topic, g *group, clientID uint32) bool {
	m := g.memberOf(clientID)
	if m == nil {
		return false
	}
	left := append([]uint32(nil), m.parts...)
	g.members.remove(m.slot)
	g.rebalanceFull()
	forgetPolled(t, g.id, left)
	return true
}

// removeSession forgets a closed connection: it leaves every consumer group
// it had joined (full rebalance of each), as the server does on disconnect.
func (s *Server) removeSession(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaveAllGroupsLocked(sess)
	if s.clients[sess.clientID] == sess {
		delete(s.clients, sess.clientID)
	}
}

// leaveAllGroupsLocked removes sess from every consumer group it joined.
func (s *Server) leaveAllGroupsLocked(sess *session) {
	for _, r := range sess.groups {
		st := s.streams.get(r.stream)
		if st == nil {
			continue
		}
		t := st.topics.get(r.topic)
		if t == nil {
			continue
		}
		if g := t.groups.get(r.group); g != nil {
			leaveGroupLocked(t, g, sess.clientID)
		}
	}
	sess.groups = nil
}

// dropGroupRefsLocked removes references to deleted groups from sessions.
func (s *Server) dropGroupRefsLocked(match func(groupRef) bool) {
	for _, sess := range s.clients {
		refs := sess.groups[:0]
		for _, r := range sess.groups {
			if !match(r) {
				refs = append(refs, r)
			}
		}
		sess.groups = refs
	}
}
