package iggy

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// streamOn reports whether the broker at addr holds stream, asked over the
// legacy protocol without following any leader.
func streamOn(t *testing.T, addr, stream string) bool {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	call := func(code wire.Code, body []byte) []byte {
		if _, err := nc.Write(wire.AppendLegacyRequest(nil, code, body)); err != nil {
			t.Fatal(err)
		}
		var h [wire.LegacyHeaderSize]byte
		if _, err := io.ReadFull(nc, h[:]); err != nil {
			t.Fatal(err)
		}
		st, n, err := wire.ParseLegacyReplyHeader(h[:])
		if err != nil || st != 0 {
			t.Fatalf("code %d: status %d, %v", code, st, err)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(nc, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	lb, code := (&wire.Login{User: "iggy", Password: "iggy"}).AppendLegacy(nil)
	call(code, lb)
	id, _ := wire.NamedID(stream)
	return len(call(wire.CodeGetStream, id.Append(nil))) > 0
}

// A connection to a follower moves to the cluster's leader after login, as
// the official SDK does, in both protocols: what the client creates lands
// on the leader.
func TestConnectFollowsTheClusterLeader(t *testing.T) {
	for _, proto := range []Protocol{Protocol08, Protocol010} {
		t.Run(proto.String(), func(t *testing.T) {
			leader, err := iggytest.NewServer()
			if err != nil {
				t.Fatal(err)
			}
			defer leader.Close()
			_, port, _ := net.SplitHostPort(leader.Addr())
			p, _ := strconv.Atoi(port)
			follower, err := iggytest.NewServer(iggytest.WithCluster(iggytest.Cluster{
				Name: "c", NodeName: "a", Follower: true,
				Others: []iggytest.ClusterNode{{Name: "b", IP: "127.0.0.1", TCP: uint16(p)}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer follower.Close()
			c, err := Connect(context.Background(), follower.Addr(), WithLogger(testLogger()), WithProtocol(proto))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.EnsureTopic(ctxT(t, 10*time.Second), "led", "t", 1); err != nil {
				t.Fatal(err)
			}
			if !streamOn(t, leader.Addr(), "led") || streamOn(t, follower.Addr(), "led") {
				t.Fatal("the stream was not created on the leader only")
			}
		})
	}
}
