package iggytest

import (
	"testing"
	"time"

	binaryserialization "github.com/apache/iggy/foreign/go/binary_serialization"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"pgregory.net/rapid"
)

func genPermissions(t *rapid.T) *permissions {
	p := &permissions{}
	for i := range p.global {
		p.global[i] = rapid.Bool().Draw(t, "g")
	}
	for _, sid := range rapid.SliceOfNDistinct(rapid.Uint32Range(0, 1<<31), 0, 6, func(v uint32) uint32 { return v }).Draw(t, "streams") {
		sp := streamPerms{id: sid}
		for i := range sp.f {
			sp.f[i] = rapid.Bool().Draw(t, "s")
		}
		for _, tid := range rapid.SliceOfNDistinct(rapid.Uint32Range(0, 1<<31), 0, 5, func(v uint32) uint32 { return v }).Draw(t, "topics") {
			tp := topicPerms{id: tid}
			for i := range tp.f {
				tp.f[i] = rapid.Bool().Draw(t, "t")
			}
			sp.topics = upsertTopic(sp.topics, tp)
		}
		p.streams = upsertStream(p.streams, sp)
	}
	return p
}

// TestGoldenUserRepliesDecodeInTheSDK checks GetUser/GetUsers/token list
// replies against the SDK's own decoders, for arbitrary users and
// permissions.
func TestGoldenUserRepliesDecodeInTheSDK(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		u := &user{id: rapid.Uint32().Draw(t, "id"), name: genName(t, "user"), status: rapid.Uint8Range(1, 2).Draw(t, "status"),
			createdAt: rapid.Uint64().Draw(t, "created")}
		if rapid.Bool().Draw(t, "hasPerms") {
			u.perms = genPermissions(t)
		}
		got, err := binaryserialization.DeserializeUser(appendUserDetails(nil, u))
		if err != nil {
			t.Fatal(err)
		}
		wantStatus := iggcon.Active
		if u.status == userInactive {
			wantStatus = iggcon.Inactive
		}
		if got.Id != u.id || got.Username != u.name || got.CreatedAt != u.createdAt || got.Status != wantStatus {
			t.Fatalf("user %+v decoded as %+v", u, got.UserInfo)
		}
		if (u.perms == nil) != (got.Permissions == nil) {
			t.Fatalf("permissions presence: %v vs %v", u.perms, got.Permissions)
		}
		if u.perms != nil {
			g := got.Permissions.Global
			if [globalFlags]bool{g.ManageServers, g.ReadServers, g.ManageUsers, g.ReadUsers, g.ManageStreams, g.ReadStreams,
				g.ManageTopics, g.ReadTopics, g.PollMessages, g.SendMessages} != u.perms.global {
				t.Fatalf("global %+v vs %v", g, u.perms.global)
			}
			if len(got.Permissions.Streams) != len(u.perms.streams) {
				t.Fatalf("%d streams decoded, %d sent", len(got.Permissions.Streams), len(u.perms.streams))
			}
			for _, sp := range u.perms.streams {
				gs := got.Permissions.Streams[int(sp.id)]
				if gs == nil || [streamFlags]bool{gs.ManageStream, gs.ReadStream, gs.ManageTopics, gs.ReadTopics, gs.PollMessages, gs.SendMessages} != sp.f ||
					len(gs.Topics) != len(sp.topics) {
					t.Fatalf("stream %d: %+v vs %+v", sp.id, gs, sp)
				}
				for _, tp := range sp.topics {
					gt := gs.Topics[int(tp.id)]
					if gt == nil || [topicFlags]bool{gt.ManageTopic, gt.ReadTopic, gt.PollMessages, gt.SendMessages} != tp.f {
						t.Fatalf("topic %d/%d: %+v vs %+v", sp.id, tp.id, gt, tp)
					}
				}
			}
		}
		// The SDK's own encoding of the decoded permissions is what the
		// broker decodes back.
		if got.Permissions != nil {
			b, err := got.Permissions.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			d := decoder{b: b}
			back := d.permissions()
			if d.st != 0 || d.off != len(b) || string(encoder(nil).permissions(back)) != string(encoder(nil).permissions(u.perms)) {
				t.Fatalf("SDK-encoded permissions do not decode to the same set")
			}
		}
		// Users and tokens lists.
		others := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) *user {
			return &user{id: rapid.Uint32().Draw(t, "id"), name: genName(t, "u"), status: rapid.Uint8Range(1, 2).Draw(t, "st")}
		}), 1, 5).Draw(t, "users")
		var e encoder
		for _, o := range others {
			e = appendUserHeader(e, o)
		}
		list, err := binaryserialization.DeserializeUsers(e)
		if err != nil || len(list) != len(others) {
			t.Fatalf("users list: %v, %d of %d", err, len(list), len(others))
		}
		var te encoder
		n := rapid.IntRange(1, 5).Draw(t, "tokens")
		for i := 0; i < n; i++ {
			te = te.name(genName(t, "tok")).u64(rapid.Uint64Range(0, uint64(time.Now().UnixMicro())).Draw(t, "exp"))
		}
		toks, err := binaryserialization.DeserializeAccessTokens(te)
		if err != nil || len(toks) != n {
			t.Fatalf("tokens list: %v, %d of %d", err, len(toks), n)
		}
	})
}

// TestGoldenStatsDecodeInTheSDK checks the GetStats reply layout.
func TestGoldenStatsDecodeInTheSDK(t *testing.T) {
	tg := embeddedTarget(t)
	cli := tg.login(t)
	sid, tid := tg.newTopic(t, cli, 2)
	_, err := cli.CreateConsumerGroup(sid, tid, "g")
	must(t, err)
	st, err := cli.GetStats()
	must(t, err)
	if st.StreamsCount != 1 || st.TopicsCount != 1 || st.PartitionsCount != 2 || st.SegmentsCount != 2 ||
		st.ConsumerGroupsCount != 1 || st.IggyServerSemver != serverSemver || st.ThreadsCount == 0 || st.RunTime > uint64(time.Minute.Microseconds()) {
		t.Fatalf("stats = %+v", st)
	}
}
