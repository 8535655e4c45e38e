package queryserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// holdingShop is shop() under BlockPoisonedKey, with the table "counts"
// when withCounts.
func holdingShop(withCounts bool) (*topology.Topology, *topology.Table[string, int]) {
	topo := topology.New("shop", topology.WithPoisonPolicy(stream.BlockPoisonedKey))
	src := topology.Source[string](topo, "shop/orders")
	totals := topology.NewTable[string, Total](topo, "totals", stream.JSON[Total]())
	topology.Project(topology.On(src, orders), totals, func(t *Total, o Order) error {
		t.Customer = o.Customer
		t.Orders++
		t.Amount += o.Amount
		return nil
	})
	if !withCounts {
		return topo, nil
	}
	counts := topology.NewTable[string, int](topo, "counts", stream.JSON[int]())
	topology.Project(topology.On(src, orders), counts, func(n *int, _ Order) error { *n++; return nil })
	return topo, counts
}

// TestBuildingTableAnswers503: a table added to the topology answers 503
// with Retry-After while it is built in the background (here until the
// partition's key blocked behind a poison record is unblocked: a partition
// with parked keys is not handed over), /stats reports the build, and
// the table answers once it is built.
func TestBuildingTableAnswers503(t *testing.T) {
	v1, _ := holdingShop(false)
	d := topologytest.NewDriver(t, v1)
	topologytest.Pipe(d, orders, Order{Customer: "ann", Amount: 5})
	h := connector.Headers{Key: []byte("bob"), Tag: orders.Tag(), Ordering: planner.Relaxed}
	d.PipeRecord("shop/orders", connector.Record{Headers: h, Payload: []byte("not json")})
	topologytest.Pipe(d, orders, Order{Customer: "bob", Amount: 7}, Order{Customer: "ann", Amount: 1})
	d.Advance()
	if keys, _ := d.Parked(); keys != 1 {
		t.Fatalf("%d keys parked, want bob blocked behind the poison record", keys)
	}

	v2, counts := holdingShop(true)
	d.Evolve(v2)
	srv, err := queryserver.New(d.App(), queryserver.WithTable(counts))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); srv.Close() }()
	if hdr := get(t, hs.URL+"/tables/counts/ann", http.StatusServiceUnavailable, nil); hdr.Get("Retry-After") == "" {
		t.Errorf("503 of a table being built without Retry-After: %v", hdr)
	}
	var stats []stream.Stats
	get(t, hs.URL+"/stats", http.StatusOK, &stats)
	if len(stats) != 1 || len(stats[0].Builds) != 1 || stats[0].Builds[0].Table != "counts" || stats[0].Builds[0].Done {
		t.Errorf("/stats builds = %+v, want counts being built", stats)
	}

	if err := d.App().Unblock(context.Background(), "shop/orders", 0, []byte("bob")); err != nil {
		t.Fatal(err)
	}
	d.Advance()
	// The server answers from the newest durable view without waiting for
	// one (GetRecent): it shows the built table once a view after the
	// switch is taken.
	for key, want := range map[string]int{"ann": 2, "bob": 1} {
		testrun.WaitFor(t, 10*time.Second, func() error {
			resp, err := http.Get(hs.URL + "/tables/counts/" + key)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			err = json.NewDecoder(resp.Body).Decode(&n)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && err == nil && n == want {
				return nil
			}
			return fmt.Errorf("GET counts/%s after the build: %d (%d, %v), want %d", key, resp.StatusCode, n, err, want)
		})
	}
}
