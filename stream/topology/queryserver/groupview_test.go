package queryserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
)

// TestGroupViewBuiltIn: the query server of an instance of a group answers
// GET /group with its member, its partitions (phase, epoch, restore
// progress) and the group's members; the listener is made before Open, so
// the announced query address is the one the server serves on. Outside a
// group, GET /group is a 404 that says so.
func TestGroupViewBuiltIn(t *testing.T) {
	cl, _ := brokerWith(t, 4, []Deposit{{Account: 1, Amount: 5}, {Account: 2, Amount: 7}})
	ln := listen(t) // the address is known before Open
	topo, bal := bank(nil)
	app, err := topology.Open(context.Background(), topo, cl, t.TempDir(),
		topology.WithGroup(cl.Group("bank", iggy.WithSessionTimeout(2*time.Second), iggy.WithInstanceID("view-1"))),
		topology.WithQueryAddr(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = app.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); _ = app.Close() })
	srv, err := queryserver.New(app, queryserver.WithTable(bal))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	serve(t, srv, ln)

	deadline := time.Now().Add(30 * time.Second)
	var v queryserver.GroupView
	for {
		resp, err := http.Get("http://" + ln.Addr().String() + "/group")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /group: %s", resp.Status)
		}
		v = queryserver.GroupView{}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		serving := 0
		for _, p := range v.Partitions {
			if p.Phase == topology.Serving.String() && p.Restore.Done {
				serving++
			}
		}
		if v.Member != 0 && serving == 4 && len(v.Members) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group view never showed 4 restored, serving partitions: %+v", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := v.Members[0]
	if m.ID != v.Member || m.Addr != ln.Addr().String() || len(m.Partitions) != 4 {
		t.Fatalf("member %+v (self %d, query address %s)", m, v.Member, ln.Addr())
	}
	for i, p := range v.Partitions {
		if p.Epoch == 0 || p.Epoch != m.Partitions[i].Epoch {
			t.Errorf("partition %+v, the membership says %+v", p, m.Partitions[i])
		}
	}

	// Outside a group.
	plain, plainBal := runApp(t, cl, nil)
	psrv, err := queryserver.New(plain, queryserver.WithTable(plainBal))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = psrv.Close() })
	pln := listen(t)
	serve(t, psrv, pln)
	resp, err := http.Get("http://" + pln.Addr().String() + "/group")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /group outside a group: %s, want 404", resp.Status)
	}
}
