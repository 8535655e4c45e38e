package iggytest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"
)

// The user, permission, token and stats scenarios join the shared table,
// so they run against the embedded broker and, with STRAND_IGGY_ADDR,
// against a real server.
func init() { scenarios = append(scenarios, userScenarios...) }

const testPassword = "secret-pass"

// newUser creates a user (deleted when the test ends) and returns its name
// and id.
func (tg target) newUser(t testing.TB, cli iggcon.Client, perms *iggcon.Permissions) (string, uint32) {
	t.Helper()
	name := userName(t)
	u, err := cli.CreateUser(name, testPassword, iggcon.Active, perms)
	must(t, err)
	t.Cleanup(func() { _ = tg.login(t).DeleteUser(mustID(name)) })
	return name, u.Id
}

// userName is a unique user name short enough for the server (3..50).
func userName(t testing.TB) string {
	name := uniqueName(t, "u")
	if len(name) > maxUsernameLength-2 {
		name = name[len(name)-maxUsernameLength+2:]
	}
	return name
}

// loginAs returns a client logged in as name with testPassword.
func (tg target) loginAs(t testing.TB, name string) iggcon.Client {
	t.Helper()
	cli := tg.connect(t)
	if _, err := cli.LoginUser(name, testPassword); err != nil {
		t.Fatalf("login as %q: %v", name, err)
	}
	return cli
}

// rawCreateToken creates a token of the root user with an expiry in
// microseconds exactly as given (the v0.8.0 SDK shifts its u32 expiry into
// the high half of the wire field, so it cannot ask for a short one).
func (tg target) rawCreateToken(t testing.TB, name string, expiry uint64) string {
	t.Helper()
	p := append([]byte{byte(len(name))}, name...)
	p = binary.LittleEndian.AppendUint64(p, expiry)
	st, body := tg.rawCall(t, CmdCreatePersonalAccessToken, p)
	if st != 0 || len(body) < 1 || len(body) != 1+int(body[0]) {
		t.Fatalf("create token %q: status %d, body %x", name, st, body)
	}
	return string(body[1:])
}

// op is one command a permission scenario tries as a restricted user.
type op struct {
	name string
	run  func(cli iggcon.Client) error
}

// fixture is the stream, topic and group the permission scenarios act on,
// created by root with one message in partition 0.
type fixture struct {
	sid, tid     uint32
	sname, tname string
	gname        string
}

func (tg target) permFixture(t *testing.T, root iggcon.Client) fixture {
	t.Helper()
	sname, sidID := tg.newStream(t, root)
	st, err := root.GetStream(sidID)
	must(t, err)
	tname := uniqueName(t, "t")
	tp, err := root.CreateTopic(sidID, tname, 1, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	_, err = root.CreateConsumerGroup(sidID, mustID(tname), "g")
	must(t, err)
	must(t, root.SendMessages(sidID, mustID(tname), iggcon.PartitionId(0), msgs(t, "m", 1)))
	return fixture{sid: st.Id, tid: tp.Id, sname: sname, tname: tname, gname: "g"}
}

// permOps are the commands every permission rule guards. None of them
// changes the fixture when allowed, so that one user can try them all.
func permOps(t *testing.T, tg target, f fixture) []op {
	s, tp, g := mustID(f.sid), mustID(f.tid), mustID(f.gname)
	single := iggcon.NewSingleConsumer(mustID("perm-consumer"))
	return []op{
		{"GetStreams", func(c iggcon.Client) error { _, err := c.GetStreams(); return err }},
		{"GetStream", func(c iggcon.Client) error { _, err := c.GetStream(s); return err }},
		{"CreateStream", func(c iggcon.Client) error {
			name := uniqueName(t, "ps")
			_, err := c.CreateStream(name)
			if err == nil {
				_ = tg.login(t).DeleteStream(mustID(name))
			}
			return err
		}},
		{"UpdateStream", func(c iggcon.Client) error { return c.UpdateStream(s, f.sname) }},
		{"GetTopics", func(c iggcon.Client) error { _, err := c.GetTopics(s); return err }},
		{"GetTopic", func(c iggcon.Client) error { _, err := c.GetTopic(s, tp); return err }},
		{"CreateTopic", func(c iggcon.Client) error {
			name := uniqueName(t, "pt")
			_, err := c.CreateTopic(s, name, 1, iggcon.CompressionAlgorithmNone, 0, 0, nil)
			if err == nil {
				_ = tg.login(t).DeleteTopic(s, mustID(name))
			}
			return err
		}},
		{"UpdateTopic", func(c iggcon.Client) error {
			return c.UpdateTopic(s, tp, f.tname, iggcon.CompressionAlgorithmNone, 0, 0, nil)
		}},
		{"GetConsumerGroups", func(c iggcon.Client) error { _, err := c.GetConsumerGroups(s, tp); return err }},
		{"JoinLeaveConsumerGroup", func(c iggcon.Client) error {
			if err := c.JoinConsumerGroup(s, tp, g); err != nil {
				return err
			}
			return c.LeaveConsumerGroup(s, tp, g)
		}},
		{"SendMessages", func(c iggcon.Client) error {
			// A second message only: offsets and counts are not asserted.
			return c.SendMessages(s, tp, iggcon.PartitionId(0), msgs(t, "p", 1))
		}},
		{"PollMessages", func(c iggcon.Client) error {
			_, err := c.PollMessages(s, tp, single, iggcon.FirstPollingStrategy(), 1, false, u32p(0))
			return err
		}},
		{"StoreConsumerOffset", func(c iggcon.Client) error { return c.StoreConsumerOffset(single, s, tp, 0, u32p(0)) }},
		{"GetConsumerOffset", func(c iggcon.Client) error { _, err := c.GetConsumerOffset(single, s, tp, u32p(0)); return err }},
		{"GetUsers", func(c iggcon.Client) error { _, err := c.GetUsers(); return err }},
		{"GetStats", func(c iggcon.Client) error { _, err := c.GetStats(); return err }},
		{"GetClients", func(c iggcon.Client) error { _, err := c.GetClients(); return err }},
	}
}

// permCase is a permission set and the commands of permOps it allows; all
// others must be refused with Unauthorized.
type permCase struct {
	name    string
	perms   func(f fixture) *iggcon.Permissions
	allowed []string
}

var (
	readOps  = []string{"GetStream", "GetTopics", "GetTopic", "GetConsumerGroups", "JoinLeaveConsumerGroup"}
	pollOps  = []string{"PollMessages", "StoreConsumerOffset", "GetConsumerOffset"}
	withPoll = func(ops ...[]string) []string { return slices.Concat(append(ops, pollOps)...) }
)

var permCases = []permCase{
	{"no permissions at all", func(fixture) *iggcon.Permissions { return nil }, nil},
	{"all flags false", func(fixture) *iggcon.Permissions { return &iggcon.Permissions{} }, nil},
	{"global read_servers", func(fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadServers: true}}
	}, []string{"GetStats", "GetClients"}},
	{"global read_users", func(fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadUsers: true}}
	}, []string{"GetUsers"}},
	{"global read_streams", func(fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadStreams: true}}
	}, withPoll([]string{"GetStreams"}, readOps)},
	{"global manage_streams", func(fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Global: iggcon.GlobalPermissions{ManageStreams: true}}
	}, withPoll([]string{"GetStreams", "CreateStream", "UpdateStream", "CreateTopic", "UpdateTopic", "SendMessages"}, readOps)},
	{"global read_topics", func(fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadTopics: true}}
	}, withPoll([]string{"GetTopics", "GetTopic", "GetConsumerGroups", "JoinLeaveConsumerGroup"})},
	{"global manage_topics", func(fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Global: iggcon.GlobalPermissions{ManageTopics: true}}
	}, withPoll([]string{"GetTopics", "GetTopic", "GetConsumerGroups", "JoinLeaveConsumerGroup", "CreateTopic", "UpdateTopic", "SendMessages"})},
	{"global poll_messages", func(fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Global: iggcon.GlobalPermissions{PollMessages: true}}
	}, pollOps},
	{"global send_messages", func(fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Global: iggcon.GlobalPermissions{SendMessages: true}}
	}, []string{"SendMessages"}},
	{"stream read_stream", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {ReadStream: true}}}
	}, withPoll(readOps)},
	{"stream manage_stream", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {ManageStream: true}}}
	}, withPoll(readOps, []string{"UpdateStream", "CreateTopic", "UpdateTopic", "SendMessages"})},
	{"stream manage_topics", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {ManageTopics: true}}}
	}, withPoll([]string{"GetTopics", "GetTopic", "GetConsumerGroups", "JoinLeaveConsumerGroup", "CreateTopic", "UpdateTopic", "SendMessages"})},
	{"stream poll_messages", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {PollMessages: true}}}
	}, pollOps},
	{"stream send_messages", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {SendMessages: true}}}
	}, []string{"SendMessages"}},
	{"topic read_topic", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {
			Topics: map[int]*iggcon.TopicPermissions{int(f.tid): {ReadTopic: true}}}}}
	}, withPoll([]string{"GetTopic", "GetConsumerGroups", "JoinLeaveConsumerGroup"})},
	{"topic manage_topic", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {
			Topics: map[int]*iggcon.TopicPermissions{int(f.tid): {ManageTopic: true}}}}}
	}, withPoll([]string{"GetTopic", "GetConsumerGroups", "JoinLeaveConsumerGroup", "UpdateTopic", "SendMessages"})},
	{"topic poll_messages", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {
			Topics: map[int]*iggcon.TopicPermissions{int(f.tid): {PollMessages: true}}}}}
	}, pollOps},
	{"topic send_messages", func(f fixture) *iggcon.Permissions {
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {
			Topics: map[int]*iggcon.TopicPermissions{int(f.tid): {SendMessages: true}}}}}
	}, []string{"SendMessages"}},
	{"everything, but on another stream and topic", func(f fixture) *iggcon.Permissions {
		all := &iggcon.StreamPermissions{ManageStream: true, ReadStream: true, ManageTopics: true, ReadTopics: true,
			PollMessages: true, SendMessages: true}
		same := &iggcon.StreamPermissions{Topics: map[int]*iggcon.TopicPermissions{int(f.tid) + 1: {
			ManageTopic: true, ReadTopic: true, PollMessages: true, SendMessages: true}}}
		return &iggcon.Permissions{Streams: map[int]*iggcon.StreamPermissions{int(f.sid) + 1: all, int(f.sid): same}}
	}, nil},
}

var userScenarios = []scenario{
	{"users: every user and token command needs a login first", func(t *testing.T, tg target) {
		cli := tg.connect(t)
		u := "someone"
		checks := map[string]error{}
		_, checks["GetUser"] = cli.GetUser(mustID(uint32(0)))
		_, checks["GetUsers"] = cli.GetUsers()
		_, checks["CreateUser"] = cli.CreateUser("someone", "password", iggcon.Active, nil)
		checks["DeleteUser"] = cli.DeleteUser(mustID("someone"))
		checks["UpdateUser"] = cli.UpdateUser(mustID("someone"), &u, nil)
		checks["UpdatePermissions"] = cli.UpdatePermissions(mustID("someone"), &iggcon.Permissions{})
		checks["ChangePassword"] = cli.ChangePassword(mustID("someone"), "password", "password2")
		_, checks["GetPersonalAccessTokens"] = cli.GetPersonalAccessTokens()
		_, checks["CreatePersonalAccessToken"] = cli.CreatePersonalAccessToken("tok", 0)
		checks["DeletePersonalAccessToken"] = cli.DeletePersonalAccessToken("tok")
		_, checks["GetStats"] = cli.GetStats()
		_, checks["GetClients"] = cli.GetClients()
		_, checks["GetClient"] = cli.GetClient(1)
		_, checks["GetClusterMetadata"] = cli.GetClusterMetadata()
		for name, err := range checks {
			if !errors.Is(err, ierror.ErrUnauthenticated) {
				t.Errorf("%s before login: %v, want Unauthenticated", name, err)
			}
		}
	}},
	{"users: create, get by id and name, list, update, delete", func(t *testing.T, tg target) {
		root := tg.login(t)
		perms := &iggcon.Permissions{
			Global: iggcon.GlobalPermissions{ReadStreams: true, PollMessages: true},
			Streams: map[int]*iggcon.StreamPermissions{
				7: {ManageStream: true, Topics: map[int]*iggcon.TopicPermissions{3: {SendMessages: true}, 1: {ReadTopic: true}}},
				2: {PollMessages: true},
			},
		}
		name := userName(t)
		created, err := root.CreateUser(name, testPassword, iggcon.Active, perms)
		must(t, err)
		t.Cleanup(func() { _ = tg.login(t).DeleteUser(mustID(name)) })
		if created.Username != name || created.Status != iggcon.Active || created.CreatedAt == 0 || created.Permissions == nil {
			t.Fatalf("created user = %+v", created)
		}
		_, err = root.CreateUser(name, testPassword, iggcon.Active, nil)
		wantErr(t, err, ierror.ErrUserAlreadyExists)
		byID, err := root.GetUser(mustID(created.Id))
		must(t, err)
		byName, err := root.GetUser(mustID(name))
		must(t, err)
		if byID.Id != created.Id || byName.Id != created.Id || byName.Username != name {
			t.Fatalf("get user: by id %+v, by name %+v", byID, byName)
		}
		p := byName.Permissions
		if p == nil || !p.Global.ReadStreams || !p.Global.PollMessages || p.Global.ManageServers || len(p.Streams) != 2 ||
			!p.Streams[7].ManageStream || p.Streams[7].ReadStream || !p.Streams[7].Topics[3].SendMessages ||
			!p.Streams[7].Topics[1].ReadTopic || !p.Streams[2].PollMessages || len(p.Streams[2].Topics) != 0 {
			t.Fatalf("permissions read back = %+v", p)
		}
		all, err := root.GetUsers()
		must(t, err)
		if !slices.ContainsFunc(all, func(u iggcon.UserInfo) bool { return u.Id == created.Id && u.Username == name }) ||
			!slices.ContainsFunc(all, func(u iggcon.UserInfo) bool { return u.Id == 0 && u.Username == tg.user }) {
			t.Fatalf("users = %+v", all)
		}
		renamed := name + "-r"
		inactive := iggcon.Inactive
		must(t, root.UpdateUser(mustID(name), &renamed, &inactive))
		t.Cleanup(func() { _ = tg.login(t).DeleteUser(mustID(renamed)) })
		got, err := root.GetUser(mustID(created.Id))
		must(t, err)
		if got.Username != renamed || got.Status != iggcon.Inactive {
			t.Fatalf("updated user = %+v", got)
		}
		_, err = root.GetUser(mustID(name))
		wantErr(t, err, ierror.ErrResourceNotFound)
		rootName := tg.user
		wantErr(t, root.UpdateUser(mustID(renamed), &rootName, nil), ierror.ErrUserAlreadyExists)
		wantErr(t, root.UpdateUser(mustID(name), &renamed, nil), ierror.ErrResourceNotFound)
		must(t, root.UpdatePermissions(mustID(renamed), nil))
		got, err = root.GetUser(mustID(renamed))
		must(t, err)
		if got.Permissions != nil {
			t.Fatalf("permissions after clearing = %+v", got.Permissions)
		}
		must(t, root.DeleteUser(mustID(renamed)))
		_, err = root.GetUser(mustID(created.Id))
		wantErr(t, err, ierror.ErrResourceNotFound)
		wantErr(t, root.DeleteUser(mustID(renamed)), ierror.ErrResourceNotFound)
		wantErr(t, root.UpdatePermissions(mustID(renamed), nil), ierror.ErrResourceNotFound)
		wantErr(t, root.ChangePassword(mustID(renamed), testPassword, "other-pass"), ierror.ErrResourceNotFound)
	}},
	{"users: validation of names, passwords and the root user", func(t *testing.T, tg target) {
		root := tg.login(t)
		_, err := root.CreateUser("ab", testPassword, iggcon.Active, nil)
		wantErr(t, err, ierror.ErrInvalidUsername)
		_, err = root.CreateUser(string(make([]byte, 51)), testPassword, iggcon.Active, nil)
		wantErr(t, err, ierror.ErrInvalidUsername)
		_, err = root.CreateUser(userName(t), "ab", iggcon.Active, nil)
		wantErr(t, err, ierror.ErrInvalidPassword)
		name, _ := tg.newUser(t, root, nil)
		short := "ab"
		wantErr(t, root.UpdateUser(mustID(name), &short, nil), ierror.ErrInvalidUsername)
		wantErr(t, root.ChangePassword(mustID(name), testPassword, "ab"), ierror.ErrInvalidPassword)
		wantErr(t, root.DeleteUser(mustID(uint32(0))), ierror.ErrCannotDeleteUser)
		wantErr(t, root.DeleteUser(mustID(tg.user)), ierror.ErrCannotDeleteUser)
		wantErr(t, root.UpdatePermissions(mustID(uint32(0)), nil), ierror.ErrCannotChangePermissions)
	}},
	{"users: inactive users cannot log in, passwords change", func(t *testing.T, tg target) {
		root := tg.login(t)
		name, id := tg.newUser(t, root, nil)
		cli := tg.loginAs(t, name)
		me, err := cli.GetUser(mustID(id)) // one's own user needs no permission
		must(t, err)
		if me.Username != name {
			t.Fatalf("own user = %+v", me)
		}
		_, err = cli.GetUser(mustID(uint32(0)))
		wantErr(t, err, ierror.ErrUnauthorized)
		wantErr(t, cli.ChangePassword(mustID(id), "wrong-pass", "new-pass"), ierror.ErrInvalidCredentials)
		must(t, cli.ChangePassword(mustID(id), testPassword, "new-pass"))
		_, err = tg.connect(t).LoginUser(name, testPassword)
		wantErr(t, err, ierror.ErrInvalidCredentials)
		if _, err := tg.connect(t).LoginUser(name, "new-pass"); err != nil {
			t.Fatalf("login with the new password: %v", err)
		}
		// Changing another user's password needs manage_users.
		other, _ := tg.newUser(t, root, nil)
		wantErr(t, cli.ChangePassword(mustID(other), testPassword, "x-pass"), ierror.ErrUnauthorized)
		must(t, root.ChangePassword(mustID(name), "new-pass", testPassword))
		inactive := iggcon.Inactive
		must(t, root.UpdateUser(mustID(name), nil, &inactive))
		_, err = tg.connect(t).LoginUser(name, testPassword)
		wantErr(t, err, ierror.ErrUserInactive)
		active := iggcon.Active
		must(t, root.UpdateUser(mustID(name), nil, &active))
		tg.loginAs(t, name)
	}},
	{"users: a user without manage_users cannot manage users", func(t *testing.T, tg target) {
		root := tg.login(t)
		name, _ := tg.newUser(t, root, &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadUsers: true}})
		victim, _ := tg.newUser(t, root, nil)
		cli := tg.loginAs(t, name)
		if _, err := cli.GetUser(mustID(victim)); err != nil {
			t.Fatalf("read_users: GetUser: %v", err)
		}
		_, err := cli.CreateUser(userName(t), testPassword, iggcon.Active, nil)
		wantErr(t, err, ierror.ErrUnauthorized)
		wantErr(t, cli.DeleteUser(mustID(victim)), ierror.ErrUnauthorized)
		n := "renamed"
		wantErr(t, cli.UpdateUser(mustID(victim), &n, nil), ierror.ErrUnauthorized)
		wantErr(t, cli.UpdatePermissions(mustID(victim), &iggcon.Permissions{}), ierror.ErrUnauthorized)
		// manage_users is checked before the user is looked up.
		wantErr(t, cli.DeleteUser(mustID("no-such-user")), ierror.ErrUnauthorized)
	}},
	{"permissions: every command is allowed or refused as server 0.8.0 decides", func(t *testing.T, tg target) {
		root := tg.login(t)
		f := tg.permFixture(t, root)
		ops := permOps(t, tg, f)
		for _, pc := range permCases {
			t.Run(pc.name, func(t *testing.T) {
				name, _ := tg.newUser(t, root, pc.perms(f))
				cli := tg.loginAs(t, name)
				for _, o := range ops {
					err := o.run(cli)
					if slices.Contains(pc.allowed, o.name) {
						if err != nil {
							t.Errorf("%s: %v, want allowed", o.name, err)
						}
					} else if !errors.Is(err, ierror.ErrUnauthorized) {
						t.Errorf("%s: %v, want Unauthorized", o.name, err)
					}
				}
			})
		}
	}},
	{"permissions: denials come after not-found, destructive commands are refused", func(t *testing.T, tg target) {
		root := tg.login(t)
		f := tg.permFixture(t, root)
		name, _ := tg.newUser(t, root, &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadStreams: true}})
		cli := tg.loginAs(t, name)
		s, tp := mustID(f.sid), mustID(f.tid)
		wantErr(t, cli.DeleteStream(s), ierror.ErrUnauthorized)
		wantErr(t, cli.DeleteTopic(s, tp), ierror.ErrUnauthorized)
		wantErr(t, cli.CreatePartitions(s, tp, 1), ierror.ErrUnauthorized)
		wantErr(t, cli.DeletePartitions(s, tp, 1), ierror.ErrUnauthorized)
		wantErr(t, cli.DeleteConsumerOffset(iggcon.NewSingleConsumer(mustID("c")), s, tp, u32p(0)), ierror.ErrConsumerOffsetNotFound)
		// Missing entities are reported as missing, not as forbidden.
		wantErr(t, cli.DeleteStream(mustID(uniqueName(t, "none"))), ierror.ErrStreamIdNotFound)
		wantErr(t, cli.DeleteTopic(s, mustID(uniqueName(t, "none"))), ierror.ErrTopicIdNotFound)
		_, err := cli.GetConsumerGroup(s, tp, mustID("missing"))
		wantErr(t, err, ierror.ErrConsumerGroupIdNotFound)
		st, err := root.GetStream(s)
		must(t, err)
		if len(st.Topics) != 1 || st.Topics[0].PartitionsCount != 1 {
			t.Fatalf("stream after refused commands = %+v", st)
		}
		// No permission at all: the group is refused before its members are.
		none, _ := tg.newUser(t, root, nil)
		wantErr(t, tg.loginAs(t, none).DeleteConsumerGroup(s, tp, mustID(f.gname)), ierror.ErrUnauthorized)
		_, err = tg.loginAs(t, none).GetStream(mustID(uniqueName(t, "none")))
		wantErr(t, err, ierror.ErrStreamIdNotFound)
	}},
	{"permissions: changes apply to logged-in sessions at once", func(t *testing.T, tg target) {
		root := tg.login(t)
		f := tg.permFixture(t, root)
		name, _ := tg.newUser(t, root, nil)
		cli := tg.loginAs(t, name)
		_, err := cli.GetStream(mustID(f.sid))
		wantErr(t, err, ierror.ErrUnauthorized)
		must(t, root.UpdatePermissions(mustID(name), &iggcon.Permissions{
			Streams: map[int]*iggcon.StreamPermissions{int(f.sid): {ReadStream: true}}}))
		_, err = cli.GetStream(mustID(f.sid))
		must(t, err)
		must(t, root.UpdatePermissions(mustID(name), nil))
		_, err = cli.GetStream(mustID(f.sid))
		wantErr(t, err, ierror.ErrUnauthorized)
	}},
	{"permissions: deleting a stream drops the stream permissions that named it", func(t *testing.T, tg target) {
		if !tg.embedded() {
			t.Skip("needs a fresh server: relies on the stream id being reused")
		}
		root := tg.login(t)
		st, err := root.CreateStream("doomed")
		must(t, err)
		name, _ := tg.newUser(t, root, &iggcon.Permissions{
			Streams: map[int]*iggcon.StreamPermissions{int(st.Id): {ReadStream: true}}})
		cli := tg.loginAs(t, name)
		_, err = cli.GetStream(mustID(st.Id))
		must(t, err)
		must(t, root.DeleteStream(mustID(st.Id)))
		again, err := root.CreateStream("reborn")
		must(t, err)
		if again.Id != st.Id {
			t.Fatalf("stream id %d not reused (got %d)", st.Id, again.Id)
		}
		_, err = cli.GetStream(mustID(again.Id))
		wantErr(t, err, ierror.ErrUnauthorized)
		u, err := root.GetUser(mustID(name)) // the user's record keeps them
		must(t, err)
		if u.Permissions == nil || u.Permissions.Streams[int(st.Id)] == nil {
			t.Fatalf("stored permissions = %+v", u.Permissions)
		}
	}},
	{"tokens: create, list, log in with, delete", func(t *testing.T, tg target) {
		root := tg.login(t)
		name, id := tg.newUser(t, root, &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadStreams: true}})
		cli := tg.loginAs(t, name)
		_, err := cli.GetPersonalAccessTokens()
		wantErr(t, err, ierror.ErrEmptyMessagePayload) // SDK: an empty list is an error
		raw, err := cli.CreatePersonalAccessToken("first", 0)
		must(t, err)
		if len(raw.Token) != 68 {
			t.Fatalf("token %q: %d characters, want 68 (50 bytes, base64)", raw.Token, len(raw.Token))
		}
		_, err = cli.CreatePersonalAccessToken("second", 1) // 1 << 32 µs on the wire: ~71 min
		must(t, err)
		_, err = cli.CreatePersonalAccessToken("first", 0)
		wantErr(t, err, ierror.ErrPersonalAccessTokenAlreadyExists)
		_, err = cli.CreatePersonalAccessToken("ab", 0)
		wantErr(t, err, ierror.ErrInvalidPersonalAccessTokenName)
		_, err = cli.CreatePersonalAccessToken(string(make([]byte, 31)), 0)
		wantErr(t, err, ierror.ErrInvalidPersonalAccessTokenName)
		list, err := cli.GetPersonalAccessTokens()
		must(t, err)
		if len(list) != 2 {
			t.Fatalf("tokens = %+v", list)
		}
		for _, tok := range list {
			switch tok.Name {
			case "first":
				if tok.Expiry == nil || !tok.Expiry.Equal(time.Unix(0, 0)) {
					t.Fatalf("never-expiring token expiry = %v, want the zero wire value", tok.Expiry)
				}
			case "second":
				// The SDK reads the microseconds as nanoseconds.
				want := uint64(time.Now().UnixMicro()) + 1<<32
				got := uint64(tok.Expiry.UnixNano())
				if got > want || got+uint64(time.Minute.Microseconds()) < want {
					t.Fatalf("expiring token expiry = %d µs, want about %d", got, want)
				}
			default:
				t.Fatalf("unexpected token %+v", tok)
			}
		}
		// Other users' lists are their own.
		rootTokens, _ := root.GetPersonalAccessTokens()
		if slices.ContainsFunc(rootTokens, func(p iggcon.PersonalAccessTokenInfo) bool { return p.Name == "second" }) {
			t.Fatalf("root sees another user's tokens: %+v", rootTokens)
		}
		viaToken := tg.connect(t)
		who, err := viaToken.LoginWithPersonalAccessToken(raw.Token)
		must(t, err)
		if who.UserId != id {
			t.Fatalf("token login: user %d, want %d", who.UserId, id)
		}
		_, err = viaToken.GetStreams() // the token's user's permissions apply
		must(t, err)
		_, err = viaToken.GetUsers()
		wantErr(t, err, ierror.ErrUnauthorized)
		must(t, cli.DeletePersonalAccessToken("first"))
		wantErr(t, cli.DeletePersonalAccessToken("first"), ierror.ErrResourceNotFound)
		_, err = tg.connect(t).LoginWithPersonalAccessToken(raw.Token)
		wantErr(t, err, ierror.ErrResourceNotFound)
		_, err = tg.connect(t).LoginWithPersonalAccessToken("not-a-token")
		wantErr(t, err, ierror.ErrResourceNotFound)
	}},
	{"tokens: an expired token is refused, a token of an inactive user too", func(t *testing.T, tg target) {
		name := uniqueName(t, "exp")
		if len(name) > maxTokenNameLength-2 {
			name = name[len(name)-maxTokenNameLength+2:]
		}
		raw := tg.rawCreateToken(t, name, uint64((300 * time.Millisecond).Microseconds()))
		t.Cleanup(func() { _ = tg.login(t).DeletePersonalAccessToken(name) })
		if _, err := tg.connect(t).LoginWithPersonalAccessToken(raw); err != nil {
			t.Fatalf("fresh token: %v", err)
		}
		time.Sleep(400 * time.Millisecond) // past the token's expiry on the server's clock (a real server's too)
		_, err := tg.connect(t).LoginWithPersonalAccessToken(raw)
		// Expired until the server's token cleaner (every minute) deletes
		// it; a fresh embedded broker has not run it yet.
		if tg.embedded() || !errors.Is(err, ierror.ErrResourceNotFound) {
			wantErr(t, err, ierror.ErrPersonalAccessTokenExpired)
		}
		// u64::MAX never expires.
		never := tg.rawCreateToken(t, name+"-n", ^uint64(0))
		t.Cleanup(func() { _ = tg.login(t).DeletePersonalAccessToken(name + "-n") })
		if _, err := tg.connect(t).LoginWithPersonalAccessToken(never); err != nil {
			t.Fatalf("never-expiring token: %v", err)
		}
		root := tg.login(t)
		uname, _ := tg.newUser(t, root, nil)
		cli := tg.loginAs(t, uname)
		tok, err := cli.CreatePersonalAccessToken("mine", 0)
		must(t, err)
		inactive := iggcon.Inactive
		must(t, root.UpdateUser(mustID(uname), nil, &inactive))
		_, err = tg.connect(t).LoginWithPersonalAccessToken(tok.Token)
		wantErr(t, err, ierror.ErrUserInactive)
	}},
	{"tokens: at most 100 per user", func(t *testing.T, tg target) {
		root := tg.login(t)
		name, _ := tg.newUser(t, root, nil)
		cli := tg.loginAs(t, name)
		for i := 0; i < maxTokensPerUser; i++ {
			_, err := cli.CreatePersonalAccessToken(fmt.Sprintf("tok-%03d", i), 0)
			must(t, err)
		}
		_, err := cli.CreatePersonalAccessToken("one-too-many", 0)
		wantErr(t, err, ierror.ErrPersonalAccessTokensLimitReached)
	}},
	{"users: deleting a user logs its sessions out", func(t *testing.T, tg target) {
		root := tg.login(t)
		name, _ := tg.newUser(t, root, &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadStreams: true}})
		cli := tg.loginAs(t, name)
		_, err := cli.GetStreams()
		must(t, err)
		must(t, root.DeleteUser(mustID(name)))
		_, err = cli.GetStreams()
		if err == nil {
			t.Fatal("a deleted user's session still works")
		}
	}},
	{"stats: counts and server identity", func(t *testing.T, tg target) {
		root := tg.login(t)
		sid, tid := tg.newTopic(t, root, 3)
		_, err := root.CreateConsumerGroup(sid, tid, "g")
		must(t, err)
		must(t, root.SendMessages(sid, tid, iggcon.PartitionId(1), msgs(t, "m", 5)))
		st, err := root.GetStats()
		must(t, err)
		if st.StreamsCount < 1 || st.TopicsCount < 1 || st.PartitionsCount < 3 || st.MessagesCount < 5 ||
			st.ConsumerGroupsCount < 1 || st.ClientsCount < 1 || st.ProcessId == 0 || st.StartTime == 0 ||
			st.IggyServerSemver == 0 || st.IggyServerVersion == "" {
			t.Fatalf("stats = %+v", st)
		}
		if tg.embedded() && (st.StreamsCount != 1 || st.PartitionsCount != 3 || st.MessagesCount != 5 ||
			st.IggyServerVersion != "0.8.0" || st.IggyServerSemver != 8000 || st.MessagesSizeBytes == 0) {
			t.Fatalf("stats of a fresh broker = %+v", st)
		}
	}},
}
