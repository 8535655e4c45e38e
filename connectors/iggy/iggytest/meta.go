package iggytest

import (
	"errors"
)

// metaOp is one change of the broker's metadata. Handlers validate a
// request, log the op (with a data directory) and apply it; opening a data
// directory replays the logged ops through the same apply functions.
type metaOp struct {
	kind        uint8
	stream      uint32
	topic       uint32
	group       uint32
	uid         uint64
	createdAt   uint64
	count       uint32
	compression uint8
	replication uint8
	expiry      uint64
	maxSize     uint64
	name        string
	blob        []byte // opPutUser: the user's whole record
}

const (
	opCreateStream uint8 = iota + 1
	opDeleteStream
	opUpdateStream
	opCreateTopic
	opDeleteTopic
	opUpdateTopic
	opCreatePartitions
	opDeletePartitions
	opCreateGroup
	opDeleteGroup
	opPutUser    // create or change a user (blob: its record)
	opDeleteUser // count: the user id
)

func (op *metaOp) encode(e encoder) encoder {
	e = e.u8(op.kind).u32(op.stream).u32(op.topic).u32(op.group).u64(op.uid).u64(op.createdAt)
	e = e.u32(op.count).u8(op.compression).u8(op.replication).u64(op.expiry).u64(op.maxSize)
	e = e.name(op.name)
	if op.kind >= opPutUser {
		e = e.u32(uint32(len(op.blob)))
		e = append(e, op.blob...)
	}
	return e
}

var errBadOp = errors.New("malformed metadata record")

func decodeOp(b []byte) (metaOp, error) {
	d := decoder{b: b}
	op := metaOp{kind: d.u8(), stream: d.u32(), topic: d.u32(), group: d.u32(), uid: d.u64(), createdAt: d.u64(),
		count: d.u32(), compression: d.u8(), replication: d.u8(), expiry: d.u64(), maxSize: d.u64()}
	n := int(d.u8())
	op.name = string(d.bytes(n))
	if op.kind >= opPutUser {
		op.blob = d.bytes(int(d.u32()))
	}
	if d.st != 0 || d.off != len(b) || op.kind < opCreateStream || op.kind > opDeleteUser {
		return op, errBadOp
	}
	return op, nil
}

// logOp appends op to the metadata log of a durable broker. Callers hold
// s.mu for writing.
func (s *Server) logOp(op *metaOp) error {
	if s.disk == nil || s.disk.replaying {
		return nil
	}
	return s.disk.appendMeta(op)
}

func (s *Server) applyCreateStream(op *metaOp) *stream {
	st := &stream{id: op.stream, name: op.name, createdAt: op.createdAt, byName: map[string]*topic{}}
	s.streams.insertAt(int(op.stream), st)
	s.streamNames[op.name] = st
	return st
}

func (s *Server) applyUpdateStream(op *metaOp) {
	st := s.streams.get(op.stream)
	if st == nil {
		return
	}
	delete(s.streamNames, st.name)
	st.name = op.name
	s.streamNames[op.name] = st
}

func (s *Server) applyDeleteStream(op *metaOp) {
	st := s.streams.get(op.stream)
	if st == nil {
		return
	}
	st.topics.each(func(_ uint32, t *topic) { s.dropTopicData(t) })
	s.dropGroupRefsLocked(func(r groupRef) bool { return r.stream == op.stream })
	delete(s.streamNames, st.name)
	s.streams.remove(op.stream)
	s.forgetStreamPermissions(op.stream)
}

func (s *Server) applyCreateTopic(op *metaOp) (*topic, error) {
	st := s.streams.get(op.stream)
	if st == nil {
		return nil, errStreamNF
	}
	t := &topic{id: op.topic, uid: op.uid, name: op.name, createdAt: op.createdAt, expiry: op.expiry,
		compression: op.compression, maxSize: op.maxSize, replication: op.replication, groupByName: map[string]*group{}}
	if op.uid > s.nextUID {
		s.nextUID = op.uid
	}
	st.topics.insertAt(int(op.topic), t)
	st.byName[op.name] = t
	if err := s.addPartitions(t, op.count, op.createdAt); err != nil {
		return nil, err
	}
	return t, nil
}

// opTopic finds the stream and topic a logged operation names, by number.
func (s *Server) opTopic(op *metaOp) (*stream, *topic, error) {
	st := s.streams.get(op.stream)
	if st == nil {
		return nil, nil, errStreamNF
	}
	t := st.topics.get(op.topic)
	if t == nil {
		return st, nil, errTopicNF
	}
	return st, t, nil
}

func (s *Server) applyUpdateTopic(op *metaOp) {
	st, t, _ := s.opTopic(op)
	if t == nil {
		return
	}
	delete(st.byName, t.name)
	t.name, t.compression, t.replication, t.expiry, t.maxSize = op.name, op.compression, op.replication, op.expiry, op.maxSize
	st.byName[t.name] = t
}

func (s *Server) applyDeleteTopic(op *metaOp) {
	st, t, _ := s.opTopic(op)
	if t == nil {
		return
	}
	s.dropTopicData(t)
	s.dropGroupRefsLocked(func(r groupRef) bool { return r.stream == op.stream && r.topic == op.topic })
	delete(st.byName, t.name)
	st.topics.remove(op.topic)
}

// dropTopicData marks the topic's partitions deleted and removes its files.
func (s *Server) dropTopicData(t *topic) {
	for _, p := range t.partitions {
		p.mu.Lock()
		p.deleted = true
		p.closeFilesLocked()
		p.batches, p.segs = nil, nil
		if p.disk != nil {
			_ = p.disk.close()
			p.disk = nil
		}
		p.mu.Unlock()
	}
	if s.disk != nil {
		if s.disk.replaying {
			s.disk.deleted[t.uid] = true // its directory may outlive a crash
		} else {
			s.disk.removeTopicDir(t.uid)
		}
	}
}

func (s *Server) addPartitions(t *topic, n uint32, createdAt uint64) error {
	for i := uint32(0); i < n; i++ {
		p := newPartition(uint32(len(t.partitions)), createdAt)
		p.segBytes, p.cache = s.cfg.segmentBytes, s.cache
		if s.disk != nil && !s.disk.replaying {
			pd, err := s.disk.createPartition(t.uid, p.id)
			if err != nil {
				return err
			}
			p.disk = pd
		}
		t.partitions = append(t.partitions, p)
	}
	t.groups.each(func(_ uint32, g *group) {
		g.nparts = uint32(len(t.partitions))
		g.rebalanceFull()
		forgetPolled(t, g.id, nil)
	})
	return nil
}

func (s *Server) applyCreatePartitions(op *metaOp) error {
	_, t, err := s.opTopic(op)
	if err != nil {
		return err
	}
	return s.addPartitions(t, op.count, op.createdAt)
}

func (s *Server) applyDeletePartitions(op *metaOp) {
	_, t, _ := s.opTopic(op)
	if t == nil {
		return
	}
	n := int(op.count)
	if n > len(t.partitions) {
		n = len(t.partitions)
	}
	keep := len(t.partitions) - n
	for _, p := range t.partitions[keep:] {
		p.mu.Lock()
		p.deleted = true
		p.closeFilesLocked()
		p.batches, p.segs = nil, nil
		if p.disk != nil {
			p.disk.remove()
			p.disk = nil
		}
		p.mu.Unlock()
	}
	clear(t.partitions[keep:])
	t.partitions = t.partitions[:keep]
	t.groups.each(func(_ uint32, g *group) {
		g.nparts = uint32(keep)
		g.rebalanceFull()
		forgetPolled(t, g.id, nil)
	})
}

func (s *Server) applyCreateGroup(op *metaOp) *group {
	_, t, _ := s.opTopic(op)
	if t == nil {
		return nil
	}
	g := &group{id: op.group, name: op.name, nparts: uint32(len(t.partitions))}
	t.groups.insertAt(int(op.group), g)
	t.groupByName[op.name] = g
	return g
}

func (s *Server) applyDeleteGroup(op *metaOp) error {
	_, t, _ := s.opTopic(op)
	if t == nil {
		return nil
	}
	g := t.groups.get(op.group)
	if g == nil {
		return nil
	}
	var err error
	for _, p := range t.partitions {
		p.mu.Lock()
		if _, ok := p.groupOffsets[g.id]; ok {
			delete(p.groupOffsets, g.id)
			if p.disk != nil && !s.disk.replaying {
				if e := p.disk.logOffset(offDelGroup, uint64(g.id), 0); e != nil && err == nil {
					err = e
				}
			}
		}
		p.mu.Unlock()
	}
	s.dropGroupRefsLocked(func(r groupRef) bool {
		return r.stream == op.stream && r.topic == op.topic && r.group == op.group
	})
	delete(t.groupByName, g.name)
	t.groups.remove(op.group)
	return err
}

func (s *Server) applyOp(op *metaOp) error {
	switch op.kind {
	case opCreateStream:
		s.applyCreateStream(op)
	case opDeleteStream:
		s.applyDeleteStream(op)
	case opUpdateStream:
		s.applyUpdateStream(op)
	case opCreateTopic:
		_, err := s.applyCreateTopic(op)
		return err
	case opDeleteTopic:
		s.applyDeleteTopic(op)
	case opUpdateTopic:
		s.applyUpdateTopic(op)
	case opCreatePartitions:
		return s.applyCreatePartitions(op)
	case opDeletePartitions:
		s.applyDeletePartitions(op)
	case opCreateGroup:
		s.applyCreateGroup(op)
	case opDeleteGroup:
		return s.applyDeleteGroup(op)
	case opPutUser:
		d := decoder{b: op.blob}
		u := d.user()
		if u == nil || d.off != len(op.blob) {
			return errBadOp
		}
		s.putUser(u)
	case opDeleteUser:
		s.removeUser(op.count)
	}
	return nil
}
