package queryserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
)

// groupInstance is one App of the bank group with its query server.
type groupInstance struct {
	app  *topology.App
	addr string
	stop context.CancelFunc // stops the query server
}

// startGroupInstance opens and runs an App of the bank group as instance
// id, with opts, and serves its balances on a query server whose address
// the App announces (the listener is made before Open). Both stop when the
// test ends.
func startGroupInstance(t *testing.T, cl *iggy.Client, id string, opts ...topology.OpenOption) *groupInstance {
	t.Helper()
	ln := listen(t)
	topo, bal := bank(nil)
	app, err := topology.Open(context.Background(), topo, cl, t.TempDir(),
		append([]topology.OpenOption{topology.WithGroup(cl.Group("bank", iggy.WithSessionTimeout(2*time.Second), iggy.WithInstanceID(id))),
			topology.WithQueryAddr(ln.Addr().String())}, opts...)...)
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
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
		_ = srv.Close()
	})
	return &groupInstance{app: app, addr: ln.Addr().String(), stop: stop}
}

// getGroupView answers GET /group of the query server at addr, failing the
// test unless it is a 200 with a group view.
func getGroupView(t *testing.T, addr string) queryserver.GroupView {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/group")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /group: %s", resp.Status)
	}
	var v queryserver.GroupView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestGroupViewBuiltIn: the query server of an instance of a group answers
// GET /group with its member, its partitions (phase, epoch, restore
// progress) and the group's members; the listener is made before Open, so
// the announced query address is the one the server serves on. Outside a
// group, GET /group is a 404 that says so.
func TestGroupViewBuiltIn(t *testing.T) {
	cl, _ := brokerWith(t, 4, []Deposit{{Account: 1, Amount: 5}, {Account: 2, Amount: 7}})
	in := startGroupInstance(t, cl, "view-1")

	var v queryserver.GroupView
	testrun.WaitFor(t, 30*time.Second, func() error {
		v = getGroupView(t, in.addr)
		serving := 0
		for _, p := range v.Partitions {
			if p.Phase == topology.Serving.String() && p.Restore.Done {
				serving++
			}
		}
		if v.Member != 0 && serving == 4 && len(v.Members) == 1 {
			return nil
		}
		return fmt.Errorf("the group view does not show 4 restored, serving partitions: %+v", v)
	})
	m := v.Members[0]
	if m.ID != v.Member || m.Addr != in.addr || len(m.Partitions) != 4 {
		t.Fatalf("member %+v (self %d, query address %s)", m, v.Member, in.addr)
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
