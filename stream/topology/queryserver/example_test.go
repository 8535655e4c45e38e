package queryserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
)

// Example serves the balances of the deposits topology: an App on strand's
// embedded broker, its query server mounted on an httptest server (in
// production: srv.ListenAndServe(ctx) on 127.0.0.1:8080), and three gets.
func Example() {
	ctx := context.Background()
	broker, _ := iggytest.NewServer()
	defer broker.Close()
	client, _ := iggy.Connect(ctx, broker.Addr(), iggy.WithCredentials("iggy", "iggy"))
	defer client.Close()
	_ = client.EnsureTopic(ctx, "bank", "deposits", 4)
	pub, _ := iggy.NewPublisher(ctx, client, "bank", "deposits")
	_ = iggy.PublishBatch(ctx, pub, deposits, []Deposit{{42, 100}, {42, 20}, {7, 5}})
	_ = pub.Close(ctx)

	topo, balances := bank(nil)
	dir, _ := os.MkdirTemp("", "strand-queryserver-example-")
	defer os.RemoveAll(dir)
	app, err := topology.Open(ctx, topo, client, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer app.Close()
	go app.Run(ctx)
	_ = app.WaitCaughtUp(ctx)

	srv, err := queryserver.New(app, queryserver.WithTable(balances))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	for _, path := range []string{"/tables/balances/42", "/tables/balances/43", "/tables/balances/x"} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s %d %s", path, resp.StatusCode, body)
	}
	// Output:
	// /tables/balances/42 200 {"account":42,"deposits":2,"sum":120}
	// /tables/balances/43 404 {"error":"table \"balances\" has no key \"43\""}
	// /tables/balances/x 400 {"error":"table \"balances\": bad key \"x\": want an unsigned integer (queryserver_test.AccountID, 0..18446744073709551615)"}
}
