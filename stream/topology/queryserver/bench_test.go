package queryserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/topology/queryserver"
)

// BenchmarkGet measures the latency of one get over loopback HTTP with a
// keep-alive client: answered by the App's own store (local), and through
// a second server that forwards it to the owner (forwarded: one more HTTP
// round trip). The accounts are spread over 4 partitions; each get asks
// the next of 1,000 keys.
func BenchmarkGet(b *testing.B) {
	cl, ref := brokerWith(b, 4, workload(20_000, 1000))
	app, bal := runApp(b, cl, nil)
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.WaitCaughtUp(wctx); err != nil {
		b.Fatal(err)
	}
	owner, err := queryserver.New(app, queryserver.WithTable(bal))
	if err != nil {
		b.Fatal(err)
	}
	defer owner.Close()
	hsOwner := httptest.NewServer(owner)
	defer hsOwner.Close()
	front, err := queryserver.New(app, queryserver.WithTable(bal), queryserver.WithRouter(queryserver.RouterFunc(
		func(context.Context, queryserver.Query) queryserver.Route {
			return queryserver.Route{Kind: queryserver.Remote, Owner: hsOwner.Listener.Addr().String()}
		})))
	if err != nil {
		b.Fatal(err)
	}
	defer front.Close()
	hsFront := httptest.NewServer(front)
	defer hsFront.Close()
	urls := func(base string) []string {
		out := make([]string, 0, len(ref))
		for id := range ref {
			out = append(out, fmt.Sprintf("%s/tables/balances/%d", base, id))
		}
		return out
	}
	for _, c := range []struct {
		name string
		urls []string
	}{{"local", urls(hsOwner.URL)}, {"forwarded", urls(hsFront.URL)}} {
		client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		fetch := func(b *testing.B, u string) {
			resp, err := client.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("GET %s: %d", u, resp.StatusCode)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				fetch(b, c.urls[i%len(c.urls)])
				i++
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					fetch(b, c.urls[i%len(c.urls)])
					i++
				}
			})
		})
		client.CloseIdleConnections()
	}
}
