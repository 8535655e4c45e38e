package iggytest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client"
	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/internal/testrun"
)

// keepPinging pings through cli every d until the test ends.
func keepPinging(t *testing.T, cli iggcon.Client, d time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = cli.Ping()
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

func TestHeartbeatDropsSilentClientsFromGroups(t *testing.T) {
	tg := embeddedTarget(t, WithHeartbeat(150*time.Millisecond))
	alive, silent := tg.login(t), tg.login(t)
	keepPinging(t, alive, 30*time.Millisecond)
	sid, tid := tg.newTopic(t, alive, 4)
	_, err := alive.CreateConsumerGroup(sid, tid, "g")
	must(t, err)
	must(t, alive.JoinConsumerGroup(sid, tid, mustID("g")))
	must(t, silent.JoinConsumerGroup(sid, tid, mustID("g")))
	g, err := alive.GetConsumerGroup(sid, tid, mustID("g"))
	must(t, err)
	if g.MembersCount != 2 {
		t.Fatalf("group before = %+v", g)
	}
	testrun.WaitFor(t, 5*time.Second, func() error {
		g, err = alive.GetConsumerGroup(sid, tid, mustID("g"))
		must(t, err)
		if g.MembersCount != 1 {
			return fmt.Errorf("silent member never dropped: %+v", g)
		}
		return nil
	})
	if len(g.Members) != 1 || g.Members[0].PartitionsCount != 4 {
		t.Fatalf("survivor's assignment = %+v", g)
	}
	clients, err := alive.GetClients()
	must(t, err)
	if len(clients) != 1 {
		t.Fatalf("clients after the silent one was dropped = %+v", clients)
	}
	// A stale session's ping still works; anything needing a login ends it.
	must(t, silent.Ping())
	_, err = silent.GetStreams()
	wantErr(t, err, ierror.ErrStaleClient)
	if _, err := silent.GetStreams(); err == nil {
		t.Fatal("a stale client's connection was not closed")
	}
	// The living client was never affected.
	_, err = alive.PollMessages(sid, tid, iggcon.NewGroupConsumer(mustID("g")), iggcon.NextPollingStrategy(), 1, false, nil)
	must(t, err)
}

func TestHeartbeatOffByDefault(t *testing.T) {
	tg := embeddedTarget(t)
	cli := tg.login(t)
	time.Sleep(50 * time.Millisecond) // pacing: a window in which a heartbeat check would drop the client
	_, err := cli.GetStreams()
	must(t, err)
}

func TestTLSListener(t *testing.T) {
	cert, key, err := WriteSelfSignedCert(t.TempDir())
	must(t, err)
	srv, err := NewServer(WithTLS(cert, key))
	must(t, err)
	defer srv.Close()
	cli, err := client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(srv.Addr()),
		tcp.WithTLS(tcp.WithTLSCAFile(cert), tcp.WithTLSDomain("localhost"))))
	must(t, err)
	defer cli.Close()
	_, err = cli.LoginUser("iggy", "iggy")
	must(t, err)
	_, err = cli.CreateStream("over-tls")
	must(t, err)
	st, err := cli.GetStream(mustID("over-tls"))
	must(t, err)
	if st.Name != "over-tls" {
		t.Fatalf("stream = %+v", st)
	}
	if _, err := NewServer(WithTLS(cert, cert)); err == nil {
		t.Fatal("a certificate as its own key was accepted")
	}
}
