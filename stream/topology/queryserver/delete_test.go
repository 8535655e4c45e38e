package queryserver_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

type Cancel struct{ Customer string }

var cancels = stream.DeclareFunc(2, func(c Cancel) string { return c.Customer })

// TestDeletedRowAnswers404: a row a fold deleted (topology.Delete) is
// gone for the query server too, also after a restart.
func TestDeletedRowAnswers404(t *testing.T) {
	topo, totals := shop()
	src := topology.Source[string](topo, "shop/orders")
	topology.ProjectContext(topology.On(src, cancels), totals, func(ctx context.Context, _ *Total, _ Cancel) error {
		return topology.Delete(ctx)
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2))
	topologytest.Pipe(d, orders, Order{Customer: "ann", Amount: 5}, Order{Customer: "bob", Amount: 7})
	d.Advance()
	serve := func() (*httptest.Server, func()) {
		srv, err := queryserver.New(d.App(), queryserver.WithTable(totals))
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		return hs, func() { hs.Close(); srv.Close() }
	}
	hs, stop := serve()
	get(t, hs.URL+"/tables/totals/ann", http.StatusOK, nil)
	topologytest.Pipe(d, cancels, Cancel{Customer: "ann"})
	d.Advance()
	// The server reads the newest durable view without waiting for one
	// (GetRecent): it shows the delete once that view is taken.
	testrun.WaitFor(t, 10*time.Second, func() error {
		resp, err := http.Get(hs.URL + "/tables/totals/ann")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusNotFound:
			return nil
		case http.StatusOK:
			return errors.New("GET ann after its delete: 200")
		}
		t.Fatalf("GET ann after its delete: %d", resp.StatusCode)
		return nil
	})
	get(t, hs.URL+"/tables/totals/bob", http.StatusOK, nil)
	stop()
	d.Restart()
	hs, stop = serve()
	defer stop()
	get(t, hs.URL+"/tables/totals/ann", http.StatusNotFound, nil)
	var page struct {
		Rows []struct {
			Key string `json:"key"`
		} `json:"rows"`
	}
	get(t, hs.URL+"/tables/totals", http.StatusOK, &page)
	if len(page.Rows) != 1 || page.Rows[0].Key != "bob" {
		t.Fatalf("scan after the delete: %+v, want only bob", page.Rows)
	}
}
