package iggytest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/internal/testrun"
)

func TestDurableUsersAndTokensSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	tg := durable(t, dir)
	root := tg.login(t)
	perms := &iggcon.Permissions{Global: iggcon.GlobalPermissions{ReadStreams: true},
		Streams: map[int]*iggcon.StreamPermissions{4: {SendMessages: true,
			Topics: map[int]*iggcon.TopicPermissions{2: {PollMessages: true}}}}}
	_, err := root.CreateUser("gone", "password", iggcon.Active, nil)
	must(t, err)
	alice, err := root.CreateUser("alice", "password", iggcon.Active, perms)
	must(t, err)
	must(t, root.DeleteUser(mustID("gone"))) // slot 1 freed, alice keeps 2
	bob, err := root.CreateUser("bob", "password", iggcon.Active, nil)
	must(t, err)
	inactive := iggcon.Inactive
	renamed := "bobby"
	must(t, root.UpdateUser(mustID("bob"), &renamed, &inactive))
	must(t, root.ChangePassword(mustID(uint32(0)), tg.pass, "new-root-pass"))
	_, err = root.CreateUser("gone-too", "password", iggcon.Active, nil)
	must(t, err)
	must(t, root.DeleteUser(mustID("gone-too"))) // slot 3 freed
	cli := tg.connect(t)
	_, err = cli.LoginUser("alice", "password")
	must(t, err)
	keep, err := cli.CreatePersonalAccessToken("keep", 0)
	must(t, err)
	drop, err := cli.CreatePersonalAccessToken("drop", 0)
	must(t, err)
	must(t, cli.DeletePersonalAccessToken("drop"))
	must(t, tg.srv.Close())

	// Nothing secret is stored in the clear.
	meta, err := os.ReadFile(filepath.Join(dir, "meta.log"))
	must(t, err)
	for _, secret := range []string{"password", "new-root-pass", keep.Token} {
		if containsBytes(meta, secret) {
			t.Fatalf("meta.log holds %q in the clear", secret)
		}
	}

	tg2 := durable(t, dir)
	_, err = tg2.connect(t).LoginUser("iggy", "iggy")
	wantErr(t, err, ierror.ErrInvalidCredentials)
	tg2.pass = "new-root-pass"
	root2 := tg2.login(t)
	users, err := root2.GetUsers()
	must(t, err)
	if len(users) != 3 || bob.Id != 1 || users[1].Id != bob.Id || users[2].Id != alice.Id || users[1].Username != "bobby" ||
		users[1].Status != iggcon.Inactive {
		t.Fatalf("restored users = %+v", users)
	}
	a, err := root2.GetUser(mustID("alice"))
	must(t, err)
	p := a.Permissions
	if p == nil || !p.Global.ReadStreams || p.Streams[4] == nil || !p.Streams[4].SendMessages ||
		p.Streams[4].Topics[2] == nil || !p.Streams[4].Topics[2].PollMessages {
		t.Fatalf("restored permissions = %+v", p)
	}
	who, err := tg2.connect(t).LoginWithPersonalAccessToken(keep.Token)
	must(t, err)
	if who.UserId != alice.Id {
		t.Fatalf("token login after restart: user %d, want %d", who.UserId, alice.Id)
	}
	_, err = tg2.connect(t).LoginWithPersonalAccessToken(drop.Token)
	wantErr(t, err, ierror.ErrResourceNotFound)
	_, err = tg2.connect(t).LoginUser("bobby", "password")
	wantErr(t, err, ierror.ErrUserInactive)
	// The next user takes the freed slot, as before the restart.
	c, err := root2.CreateUser("carol", "password", iggcon.Active, nil)
	must(t, err)
	if c.Id != 3 {
		t.Fatalf("new user id = %d, want the freed slot 3", c.Id)
	}
}

func containsBytes(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return true
		}
	}
	return false
}

func TestDurableConfiguredTokenSurvivesARootRecord(t *testing.T) {
	dir := t.TempDir()
	tg := durable(t, dir, WithPersonalAccessToken("configured-token"))
	root := tg.login(t)
	_, err := root.CreatePersonalAccessToken("mine", 0) // logs root's record
	must(t, err)
	must(t, tg.srv.Close())
	tg2 := durable(t, dir, WithPersonalAccessToken("configured-token"))
	if _, err := tg2.connect(t).LoginWithPersonalAccessToken("configured-token"); err != nil {
		t.Fatalf("configured token after restart: %v", err)
	}
	list, err := tg2.login(t).GetPersonalAccessTokens()
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("root's tokens = %+v", list)
	}
}

func TestTokenCleanerDeletesExpiredTokens(t *testing.T) {
	tg := embeddedTarget(t, WithTokenCleaner(20*time.Millisecond))
	tg.rawCreateToken(t, "short", uint64((50 * time.Millisecond).Microseconds()))
	tg.rawCreateToken(t, "long", 0)
	root := tg.login(t)
	testrun.WaitFor(t, 5*time.Second, func() error {
		list, err := root.GetPersonalAccessTokens()
		must(t, err)
		if len(list) != 1 || list[0].Name != "long" {
			return fmt.Errorf("expired token still listed: %+v", list)
		}
		return nil
	})
}
