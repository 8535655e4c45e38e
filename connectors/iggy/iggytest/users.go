package iggytest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sort"
	"time"
)

// Users, permissions and personal access tokens, as server 0.8.0 keeps
// them: users live in a slab (ids are 0-based and reused, the root user is
// id 0), every user has an optional permission set (global flags plus
// per-stream and per-topic flags) and up to 100 personal access tokens.
// Passwords and tokens are kept only as salted SHA-256 hashes.

// Limits of server 0.8.0 for users and tokens.
const (
	minTokenNameLength = 3
	maxTokenNameLength = 30
	maxTokensPerUser   = 100 // server config personal_access_token.max_tokens_per_user
	tokenRandomBytes   = 50  // raw token: 50 random bytes, standard base64

	userActive   uint8 = 1
	userInactive uint8 = 2
)

// Global permission flags, in wire order.
const (
	gManageServers = iota
	gReadServers
	gManageUsers
	gReadUsers
	gManageStreams
	gReadStreams
	gManageTopics
	gReadTopics
	gPollMessages
	gSendMessages
	globalFlags
)

// Stream permission flags, in wire order.
const (
	sManageStream = iota
	sReadStream
	sManageTopics
	sReadTopics
	sPollMessages
	sSendMessages
	streamFlags
)

// Topic permission flags, in wire order.
const (
	tManageTopic = iota
	tReadTopic
	tPollMessages
	tSendMessages
	topicFlags
)

type permissions struct {
	global  [globalFlags]bool
	streams []streamPerms // sorted by id, unique
}

type streamPerms struct {
	id     uint32
	f      [streamFlags]bool
	topics []topicPerms // sorted by id, unique
}

type topicPerms struct {
	id uint32
	f  [topicFlags]bool
}

func rootPermissions() *permissions {
	p := &permissions{}
	for i := range p.global {
		p.global[i] = true
	}
	return p
}

func (sp *streamPerms) topic(id uint32) *topicPerms {
	for i := range sp.topics {
		if sp.topics[i].id == id {
			return &sp.topics[i]
		}
	}
	return nil
}

// decodePermissions reads a WirePermissions. Booleans are any non-zero
// byte; a stream or topic listed twice keeps its last entry, as the
// server's map does.
func (d *decoder) permissions() *permissions {
	p := &permissions{}
	for i := range p.global {
		p.global[i] = d.u8() != 0
	}
	if d.u8() != 0 {
		for d.st == 0 {
			sp := streamPerms{id: d.u32()}
			for i := range sp.f {
				sp.f[i] = d.u8() != 0
			}
			if d.u8() != 0 {
				for d.st == 0 {
					tp := topicPerms{id: d.u32()}
					for i := range tp.f {
						tp.f[i] = d.u8() != 0
					}
					sp.topics = upsertTopic(sp.topics, tp)
					if d.u8() == 0 {
						break
					}
				}
			}
			p.streams = upsertStream(p.streams, sp)
			if d.u8() == 0 {
				break
			}
		}
	}
	return p
}

func upsertStream(list []streamPerms, sp streamPerms) []streamPerms {
	i := sort.Search(len(list), func(i int) bool { return list[i].id >= sp.id })
	if i < len(list) && list[i].id == sp.id {
		list[i] = sp
		return list
	}
	list = append(list, streamPerms{})
	copy(list[i+1:], list[i:])
	list[i] = sp
	return list
}

func upsertTopic(list []topicPerms, tp topicPerms) []topicPerms {
	i := sort.Search(len(list), func(i int) bool { return list[i].id >= tp.id })
	if i < len(list) && list[i].id == tp.id {
		list[i] = tp
		return list
	}
	list = append(list, topicPerms{})
	copy(list[i+1:], list[i:])
	list[i] = tp
	return list
}

// optPermissions reads [has u8][len u32][permissions] (has == 1 only, as
// the server reads it); a length that disagrees with the decoded size is
// InvalidFormat.
func (d *decoder) optPermissions() *permissions {
	if d.u8() != 1 {
		return nil
	}
	n := int(d.u32())
	if d.st != 0 {
		return nil
	}
	start := d.off
	p := d.permissions()
	if d.st == 0 && d.off-start != n {
		d.fail(StatusInvalidFormat)
	}
	return p
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (e encoder) permissions(p *permissions) encoder {
	for _, f := range p.global {
		e = e.u8(boolByte(f))
	}
	e = e.u8(boolByte(len(p.streams) > 0))
	for i, sp := range p.streams {
		e = e.u32(sp.id)
		for _, f := range sp.f {
			e = e.u8(boolByte(f))
		}
		e = e.u8(boolByte(len(sp.topics) > 0))
		for j, tp := range sp.topics {
			e = e.u32(tp.id)
			for _, f := range tp.f {
				e = e.u8(boolByte(f))
			}
			e = e.u8(boolByte(j < len(sp.topics)-1))
		}
		e = e.u8(boolByte(i < len(p.streams)-1))
	}
	return e
}

type user struct {
	id        uint32
	name      string
	status    uint8
	createdAt uint64
	salt      []byte
	hash      []byte // sha256(salt || password)
	perms     *permissions
	tokens    []*accessToken // sorted by name
}

type accessToken struct {
	name     string
	hash     [32]byte // sha256 of the raw token
	expiryAt uint64   // microseconds since the epoch; 0 never expires
}

func hashPassword(salt []byte, password string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(password))
	return h.Sum(nil)
}

func (u *user) setPassword(password string) {
	u.salt = make([]byte, 16)
	_, _ = rand.Read(u.salt)
	u.hash = hashPassword(u.salt, password)
}

func (u *user) checkPassword(password string) bool {
	return subtle.ConstantTimeCompare(hashPassword(u.salt, password), u.hash) == 1
}

func (u *user) token(name string) (int, *accessToken) {
	for i, t := range u.tokens {
		if t.name == name {
			return i, t
		}
	}
	return -1, nil
}

// encodeUser is a user's whole record in the metadata log.
func (e encoder) user(u *user) encoder {
	e = e.u32(u.id).name(u.name).u8(u.status).u64(u.createdAt)
	e = e.u8(uint8(len(u.salt)))
	e = append(e, u.salt...)
	e = e.u8(uint8(len(u.hash)))
	e = append(e, u.hash...)
	if u.perms == nil {
		e = e.u8(0)
	} else {
		e = e.u8(1).permissions(u.perms)
	}
	e = e.u32(uint32(len(u.tokens)))
	for _, t := range u.tokens {
		e = e.name(t.name)
		e = append(e, t.hash[:]...)
		e = e.u64(t.expiryAt)
	}
	return e
}

func (d *decoder) user() *user {
	u := &user{id: d.u32(), name: d.name(), status: d.u8(), createdAt: d.u64()}
	u.salt = append([]byte(nil), d.bytes(int(d.u8()))...)
	u.hash = append([]byte(nil), d.bytes(int(d.u8()))...)
	if d.u8() == 1 {
		u.perms = d.permissions()
	}
	n := int(d.u32())
	if d.st != 0 || n > len(d.b) {
		d.fail(StatusInvalidCommand)
		return nil
	}
	for i := 0; i < n && d.st == 0; i++ {
		t := &accessToken{name: d.name()}
		copy(t.hash[:], d.bytes(32))
		t.expiryAt = d.u64()
		u.tokens = append(u.tokens, t)
	}
	if d.st != 0 {
		return nil
	}
	return u
}

func (u *user) clone() *user {
	c := *u
	c.tokens = append([]*accessToken(nil), u.tokens...)
	return &c
}

// --- users, lookup and permission index (callers hold s.mu) ---------------------

func (s *Server) addRootUser() {
	root := &user{id: 0, name: s.cfg.user, status: userActive, createdAt: nowMicros(), perms: rootPermissions()}
	root.setPassword(s.cfg.pass)
	if s.cfg.token != "" {
		root.tokens = []*accessToken{{name: "iggytest", hash: sha256.Sum256([]byte(s.cfg.token))}}
	}
	s.putUser(root)
}

// ensureConfiguredToken gives the root user the WithPersonalAccessToken
// token again when a logged root record replaced it on replay.
func (s *Server) ensureConfiguredToken() {
	root := s.users.get(0)
	if s.cfg.token == "" || root == nil {
		return
	}
	h := sha256.Sum256([]byte(s.cfg.token))
	for _, t := range root.tokens {
		if t.hash == h {
			return
		}
	}
	nu := root.clone()
	if i, _ := nu.token("iggytest"); i >= 0 {
		nu.tokens = append(nu.tokens[:i:i], nu.tokens[i+1:]...)
	}
	nu.tokens = append(nu.tokens, &accessToken{name: "iggytest", hash: h})
	sort.Slice(nu.tokens, func(i, j int) bool { return nu.tokens[i].name < nu.tokens[j].name })
	s.putUser(nu)
}

// putUser inserts or replaces u and rebuilds its permission index.
func (s *Server) putUser(u *user) {
	if old := s.users.get(u.id); old != nil {
		delete(s.userNames, old.name)
	}
	s.users.insertAt(int(u.id), u)
	s.userNames[u.name] = u
	s.indexPermissions(u)
}

func (s *Server) removeUser(id uint32) {
	u := s.users.get(id)
	if u == nil {
		return
	}
	delete(s.userNames, u.name)
	s.users.remove(id)
	s.indexPermissions(&user{id: id})
}

// indexPermissions mirrors the server's per-(user, stream) permission
// index: it is rebuilt from a user's permissions when they change, and a
// stream's entries are dropped when the stream is deleted (the user's
// stored permissions keep them, as on the server).
func (s *Server) indexPermissions(u *user) {
	for k := range s.streamPerms {
		if uint32(k>>32) == u.id {
			delete(s.streamPerms, k)
		}
	}
	if u.perms == nil {
		return
	}
	for i := range u.perms.streams {
		sp := &u.perms.streams[i]
		s.streamPerms[permKey(u.id, sp.id)] = sp
	}
}

func (s *Server) forgetStreamPermissions(sid uint32) {
	for k := range s.streamPerms {
		if uint32(k) == sid {
			delete(s.streamPerms, k)
		}
	}
}

func permKey(uid, sid uint32) uint64 { return uint64(uid)<<32 | uint64(sid) }

func (s *Server) findUser(id ident) *user {
	if id.isName {
		return s.userNames[id.name]
	}
	return s.users.get(id.num)
}

func (s *Server) nextUserID() uint32 {
	if k := len(s.users.free); k > 0 {
		return uint32(s.users.free[k-1])
	}
	return uint32(len(s.users.items))
}

var errUnauthorized = statusError(StatusUnauthorized)

// perm is one of server 0.8.0's permission rules.
type perm uint8

const (
	permServerInfo perm = iota + 1 // stats, clients
	permReadUsers
	permManageUsers
	permGetStreams
	permCreateStream
	permGetStream    // stream
	permManageStream // stream: update, delete, purge
	permGetTopics    // stream
	permCreateTopic  // stream
	permGetTopic     // topic; also consumer groups
	permManageTopic  // topic: update, delete, purge, partitions
	permPoll         // topic; also consumer offsets
	permSend         // topic
)

// allowed reports whether user uid may do what p guards on stream sid and
// topic tid, as server 0.8.0's metadata permission checks decide.
func (s *Server) allowed(uid uint32, p perm, sid, tid uint32) bool {
	u := s.users.get(uid)
	if u == nil || u.perms == nil {
		return false
	}
	g := &u.perms.global
	any := func(fs ...int) bool {
		for _, f := range fs {
			if g[f] {
				return true
			}
		}
		return false
	}
	sp := s.streamPerms[permKey(uid, sid)]
	sany := func(fs ...int) bool {
		if sp == nil {
			return false
		}
		for _, f := range fs {
			if sp.f[f] {
				return true
			}
		}
		return false
	}
	tany := func(fs ...int) bool {
		if sp == nil {
			return false
		}
		tp := sp.topic(tid)
		if tp == nil {
			return false
		}
		for _, f := range fs {
			if tp.f[f] {
				return true
			}
		}
		return false
	}
	switch p {
	case permServerInfo:
		return any(gManageServers, gReadServers)
	case permReadUsers:
		return any(gManageUsers, gReadUsers)
	case permManageUsers:
		return any(gManageUsers)
	case permGetStreams:
		return any(gManageStreams, gReadStreams)
	case permCreateStream:
		return any(gManageStreams)
	case permGetStream:
		return any(gManageStreams, gReadStreams) || sany(sManageStream, sReadStream)
	case permManageStream:
		return any(gManageStreams) || sany(sManageStream)
	case permGetTopics:
		return any(gManageStreams, gReadStreams, gManageTopics, gReadTopics) ||
			sany(sManageStream, sReadStream, sManageTopics, sReadTopics)
	case permCreateTopic:
		return any(gManageStreams, gManageTopics) || sany(sManageStream, sManageTopics)
	case permGetTopic:
		return any(gManageStreams, gReadStreams, gManageTopics, gReadTopics) ||
			sany(sManageStream, sReadStream, sManageTopics, sReadTopics) || tany(tManageTopic, tReadTopic)
	case permManageTopic:
		return any(gManageStreams, gManageTopics) || sany(sManageStream, sManageTopics) || tany(tManageTopic)
	case permPoll:
		return any(gPollMessages, gManageStreams, gReadStreams, gManageTopics, gReadTopics) ||
			sany(sPollMessages, sManageStream, sReadStream, sManageTopics, sReadTopics) ||
			tany(tManageTopic, tReadTopic, tPollMessages)
	case permSend:
		return any(gSendMessages, gManageStreams, gManageTopics) ||
			sany(sSendMessages, sManageStream, sManageTopics) || tany(tManageTopic, tSendMessages)
	}
	return false
}

// uid is the logged-in user of the connection (callers checked authed).
func (c *conn) uid() uint32 { return uint32(c.sess.userID.Load()) }

// can checks the connection's user against p; callers hold s.mu.
func (c *conn) can(p perm, sid, tid uint32) error {
	if !c.s.allowed(c.uid(), p, sid, tid) {
		return errUnauthorized
	}
	return nil
}

// canNow takes the read lock for a check that needs no entity.
func (c *conn) canNow(p perm) error {
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	return c.can(p, 0, 0)
}

// logUser logs u's whole record (create and every change).
func (s *Server) logUser(u *user) error {
	return s.logOp(&metaOp{kind: opPutUser, blob: encoder(nil).user(u)})
}

// --- handlers -------------------------------------------------------------------

func appendUserHeader(e encoder, u *user) encoder {
	return e.u32(u.id).u64(u.createdAt).u8(u.status).name(u.name)
}

func appendUserDetails(e encoder, u *user) encoder {
	e = appendUserHeader(e, u)
	if u.perms == nil {
		return e.u32(0)
	}
	pb := encoder(nil).permissions(u.perms)
	e = e.u8(1).u32(uint32(len(pb)))
	return append(e, pb...)
}

func (c *conn) getUser(p []byte) ([]byte, error) {
	d := decoder{b: p}
	id := d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	u := s.findUser(id)
	if u == nil {
		return c.ok(), nil
	}
	if u.id != c.uid() {
		if err := c.can(permReadUsers, 0, 0); err != nil {
			return nil, err
		}
	}
	return appendUserDetails(c.ok(), u), nil
}

func (c *conn) getUsers() ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := c.can(permReadUsers, 0, 0); err != nil {
		return nil, err
	}
	e := c.ok()
	s.users.each(func(_ uint32, u *user) { e = appendUserHeader(e, u) })
	return e, nil
}

func validUsername(n string) bool { return len(n) >= minUsernameLength && len(n) <= maxUsernameLength }
func validPassword(p string) bool { return len(p) >= minPasswordLength && len(p) <= maxPasswordLength }

func (c *conn) createUser(p []byte) ([]byte, error) {
	d := decoder{b: p}
	name := d.name()
	pass := d.str(int(d.u8()))
	status := d.u8()
	perms := d.optPermissions()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := c.can(permManageUsers, 0, 0); err != nil {
		return nil, err
	}
	if !validUsername(name) {
		return nil, statusError(StatusInvalidUsername)
	}
	if !validPassword(pass) {
		return nil, statusError(StatusInvalidPassword)
	}
	if status != userActive && status != userInactive {
		return nil, errInvalidCommand
	}
	if s.userNames[name] != nil {
		return nil, statusError(StatusUserAlreadyExists)
	}
	u := &user{id: s.nextUserID(), name: name, status: status, createdAt: nowMicros(), perms: perms}
	u.setPassword(pass)
	if err := s.logUser(u); err != nil {
		return nil, err
	}
	s.putUser(u)
	return appendUserDetails(c.ok(), u), nil
}

func (c *conn) deleteUser(p []byte) ([]byte, error) {
	d := decoder{b: p}
	id := d.ident()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := c.can(permManageUsers, 0, 0); err != nil {
		return nil, err
	}
	u := s.findUser(id)
	if u == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	if u.id == 0 {
		return nil, statusError(StatusCannotDeleteUser)
	}
	if err := s.logOp(&metaOp{kind: opDeleteUser, count: u.id}); err != nil {
		return nil, err
	}
	s.removeUser(u.id)
	// The server forgets the user's clients: their sessions are no longer
	// logged in.
	for _, sess := range s.clients {
		sess.userID.CompareAndSwap(int64(u.id), -1)
	}
	return c.ok(), nil
}

func (c *conn) updateUser(p []byte) ([]byte, error) {
	d := decoder{b: p}
	id := d.ident()
	var name string
	hasName := d.u8() == 1
	if hasName {
		name = d.name()
	}
	var status uint8
	hasStatus := d.u8() == 1
	if hasStatus {
		status = d.u8()
	}
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := c.can(permManageUsers, 0, 0); err != nil {
		return nil, err
	}
	if hasName && !validUsername(name) {
		return nil, statusError(StatusInvalidUsername)
	}
	if hasStatus && status != userActive && status != userInactive {
		return nil, errInvalidCommand
	}
	u := s.findUser(id)
	if u == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	nu := u.clone()
	if hasName {
		if o := s.userNames[name]; o != nil && o != u {
			return nil, statusError(StatusUserAlreadyExists)
		}
		nu.name = name
	}
	if hasStatus {
		nu.status = status
	}
	if err := s.logUser(nu); err != nil {
		return nil, err
	}
	s.putUser(nu)
	return c.ok(), nil
}

func (c *conn) updatePermissions(p []byte) ([]byte, error) {
	d := decoder{b: p}
	id := d.ident()
	perms := d.optPermissions()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := c.can(permManageUsers, 0, 0); err != nil {
		return nil, err
	}
	u := s.findUser(id)
	if u == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	if u.id == 0 {
		return nil, statusError(StatusCannotChangePermissions)
	}
	nu := u.clone()
	nu.perms = perms
	if err := s.logUser(nu); err != nil {
		return nil, err
	}
	s.putUser(nu)
	return c.ok(), nil
}

func (c *conn) changePassword(p []byte) ([]byte, error) {
	d := decoder{b: p}
	id := d.ident()
	cur := d.str(int(d.u8()))
	next := d.str(int(d.u8()))
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	if !validPassword(cur) || !validPassword(next) {
		return nil, statusError(StatusInvalidPassword)
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.findUser(id)
	if u == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	if u.id != c.uid() {
		if err := c.can(permManageUsers, 0, 0); err != nil {
			return nil, err
		}
	}
	if !u.checkPassword(cur) {
		return nil, statusError(StatusInvalidCredentials)
	}
	nu := u.clone()
	nu.setPassword(next)
	if err := s.logUser(nu); err != nil {
		return nil, err
	}
	s.putUser(nu)
	return c.ok(), nil
}

func (c *conn) loginUser(p []byte) ([]byte, error) {
	d := decoder{b: p}
	name := d.name()
	pass := d.str(int(d.u8()))
	if vlen := int(d.u32()); vlen > 0 {
		d.str(vlen)
	}
	if clen := int(d.u32()); clen > 0 {
		d.str(clen)
	}
	if err := decodeErr(&d); err != nil {
		return nil, err
	}
	if !validUsername(name) {
		return nil, statusError(StatusInvalidUsername)
	}
	if !validPassword(pass) {
		return nil, statusError(StatusInvalidPassword)
	}
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	u := s.userNames[name]
	if u == nil {
		return nil, statusError(StatusInvalidCredentials)
	}
	if u.status != userActive {
		return nil, statusError(StatusUserInactive)
	}
	if !u.checkPassword(pass) {
		return nil, statusError(StatusInvalidCredentials)
	}
	c.sess.userID.Store(int64(u.id))
	return c.ok().u32(u.id), nil
}

func (c *conn) loginToken(p []byte) ([]byte, error) {
	d := decoder{b: p}
	raw := d.name()
	if err := decodeErr(&d); err != nil {
		return nil, err
	}
	h := sha256.Sum256([]byte(raw))
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	var owner *user
	var tok *accessToken
	s.users.each(func(_ uint32, u *user) {
		for _, t := range u.tokens {
			if owner == nil && subtle.ConstantTimeCompare(t.hash[:], h[:]) == 1 {
				owner, tok = u, t
			}
		}
	})
	if tok == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	if tok.expiryAt != 0 && tok.expiryAt <= nowMicros() {
		return nil, statusError(StatusPersonalAccessTokenExpired)
	}
	if owner.status != userActive {
		return nil, statusError(StatusUserInactive)
	}
	c.sess.userID.Store(int64(owner.id))
	return c.ok().u32(owner.id), nil
}

func (c *conn) getTokens() ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	u := s.users.get(c.uid())
	if u == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	e := c.ok()
	for _, t := range u.tokens {
		e = e.name(t.name).u64(t.expiryAt)
	}
	return e, nil
}

func (c *conn) createToken(p []byte) ([]byte, error) {
	d := decoder{b: p}
	name := d.name()
	expiry := d.u64()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	if len(name) < minTokenNameLength || len(name) > maxTokenNameLength {
		return nil, statusError(StatusInvalidPersonalAccessTokenName)
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users.get(c.uid())
	if u == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	if len(u.tokens) >= maxTokensPerUser {
		return nil, statusError(StatusPersonalAccessTokensLimitReached)
	}
	if _, t := u.token(name); t != nil {
		return nil, statusError(StatusPersonalAccessTokenAlreadyExists)
	}
	var rb [tokenRandomBytes]byte
	_, _ = rand.Read(rb[:])
	raw := base64.StdEncoding.EncodeToString(rb[:])
	t := &accessToken{name: name, hash: sha256.Sum256([]byte(raw))}
	// 0 is the server default and u64::MAX never: both never expire.
	// An expiry past the end of the clock (now + expiry overflows) never
	// comes either: it must not wrap around into the past.
	if now := nowMicros(); expiry != 0 && expiry != ^uint64(0) && expiry <= ^uint64(0)-now {
		t.expiryAt = now + expiry
	}
	nu := u.clone()
	i := sort.Search(len(nu.tokens), func(i int) bool { return nu.tokens[i].name >= name })
	nu.tokens = append(nu.tokens, nil)
	copy(nu.tokens[i+1:], nu.tokens[i:])
	nu.tokens[i] = t
	if err := s.logUser(nu); err != nil {
		return nil, err
	}
	s.putUser(nu)
	return c.ok().name(raw), nil
}

func (c *conn) deleteToken(p []byte) ([]byte, error) {
	d := decoder{b: p}
	name := d.name()
	if err := c.admit(&d); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users.get(c.uid())
	if u == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	i, t := u.token(name)
	if t == nil {
		return nil, statusError(StatusResourceNotFound)
	}
	nu := u.clone()
	nu.tokens = append(nu.tokens[:i:i], nu.tokens[i+1:]...)
	if err := s.logUser(nu); err != nil {
		return nil, err
	}
	s.putUser(nu)
	return c.ok(), nil
}

// WithTokenCleaner sets how often expired personal access tokens are
// deleted (server 0.8.0's personal_access_token.cleaner: enabled, every
// minute, which is the default here too). Until then an expired token is
// still listed, and refused at login with status 54. d < 0 turns the
// cleaner off; 0 keeps the default.
func WithTokenCleaner(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d != 0 {
			c.tokenCleaner = d
		}
	})
}

func (s *Server) tokenCleanerLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.tokenCleaner)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
			s.deleteExpiredTokens(nowMicros())
		}
	}
}

// deleteExpiredTokens removes the tokens expired at now from every user.
func (s *Server) deleteExpiredTokens(now uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []*user
	s.users.each(func(_ uint32, u *user) {
		for _, t := range u.tokens {
			if t.expiryAt != 0 && t.expiryAt <= now {
				changed = append(changed, u)
				return
			}
		}
	})
	for _, u := range changed {
		nu := u.clone()
		nu.tokens = nu.tokens[:0:0]
		for _, t := range u.tokens {
			if t.expiryAt == 0 || t.expiryAt > now {
				nu.tokens = append(nu.tokens, t)
			}
		}
		if err := s.logUser(nu); err != nil {
			s.log.Error("iggytest: log token cleanup failed", "user", u.id, "err", err)
			return
		}
		s.putUser(nu)
	}
}
