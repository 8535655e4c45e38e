package queryserver_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
)

type AccountID uint64

type Deposit struct {
	Account AccountID
	Amount  int64
}

type Balance struct {
	Account  AccountID `json:"account"`
	Deposits int       `json:"deposits"`
	Sum      int64     `json:"sum"`
}

var deposits = stream.DeclareFunc(1, func(d Deposit) AccountID { return d.Account })

const depositTopic = "bank/deposits"

// bank builds the deposits topology; every App needs its own build (a
// table is bound to one open App). gate, when not nil, holds every fold
// until it is closed.
func bank(gate <-chan struct{}) (*topology.Topology, *topology.Table[AccountID, Balance]) {
	topo := topology.New("bank")
	src := topology.Source[AccountID](topo, depositTopic)
	bal := topology.NewTable[AccountID, Balance](topo, "balances", stream.JSON[Balance]())
	topology.Project(topology.On(src, deposits), bal, func(b *Balance, d Deposit) error {
		if gate != nil {
			<-gate
		}
		b.Account = d.Account
		b.Deposits++
		b.Sum += d.Amount
		return nil
	})
	return topo, bal
}

// brokerWith starts an embedded broker with the deposits topic of n
// partitions and publishes events to it; it returns the client and the
// reference fold.
func brokerWith(t testing.TB, n uint32, events []Deposit) (*iggy.Client, map[AccountID]Balance) {
	t.Helper()
	ctx := context.Background()
	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cl, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	if err := cl.EnsureTopic(ctx, "bank", "deposits", n); err != nil {
		t.Fatal(err)
	}
	ref := map[AccountID]Balance{}
	if len(events) > 0 {
		pub, err := iggy.NewPublisher(ctx, cl, "bank", "deposits")
		if err != nil {
			t.Fatal(err)
		}
		if err := iggy.PublishBatch(ctx, pub, deposits, events); err != nil {
			t.Fatal(err)
		}
		if err := pub.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range events {
		b := ref[d.Account]
		b.Account, b.Deposits, b.Sum = d.Account, b.Deposits+1, b.Sum+d.Amount
		ref[d.Account] = b
	}
	return cl, ref
}

// runApp opens an App of the bank topology on the given partitions, runs
// it, and returns it with its table; Cleanup stops it.
func runApp(t testing.TB, cl *iggy.Client, gate <-chan struct{}, parts ...uint32) (*topology.App, *topology.Table[AccountID, Balance]) {
	t.Helper()
	topo, bal := bank(gate)
	var opts []topology.OpenOption
	if len(parts) > 0 {
		opts = append(opts, topology.WithPartitions(parts...))
	}
	app, err := topology.Open(context.Background(), topo, cl, t.TempDir(), append(opts, topology.WithEndOffsetInterval(20*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = app.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); _ = app.Close() })
	return app, bal
}

// serve serves srv on ln until the test ends.
func serve(t testing.TB, srv *queryserver.Server, ln net.Listener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func workload(events, accounts int) []Deposit {
	out := make([]Deposit, events)
	for i := range out {
		out[i] = Deposit{Account: AccountID((i*31 + i/7) % accounts), Amount: int64(i%97 - 20)}
	}
	return out
}

// Two Apps share the partitions of one topic (disjoint WithPartitions),
// each with its own query server routed by the same static partition
// split: every key asked of either server equals the reference, answered
// by its owner (forwarded at most once); an unknown key is 404 from the
// owner; scans read the local partitions and name the owner of the others.
func TestForwardingAcrossTwoApps(t *testing.T) {
	ctx := context.Background()
	const accounts = 200
	cl, ref := brokerWith(t, 4, workload(3000, accounts))
	appA, balA := runApp(t, cl, nil, 0, 1)
	appB, balB := runApp(t, cl, nil, 2, 3)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := appA.WaitCaughtUp(wctx); err != nil {
		t.Fatal(err)
	}
	if err := appB.WaitCaughtUp(wctx); err != nil {
		t.Fatal(err)
	}
	lnA, lnB := listen(t), listen(t)
	addrA, addrB := lnA.Addr().String(), lnB.Addr().String()
	owners := map[uint32]string{0: addrA, 1: addrA, 2: addrB, 3: addrB}
	srvA, err := queryserver.New(appA, queryserver.WithTable(balA), queryserver.WithRouter(queryserver.StaticRouter(addrA, owners)))
	if err != nil {
		t.Fatal(err)
	}
	srvB, err := queryserver.New(appB, queryserver.WithTable(balB), queryserver.WithRouter(queryserver.StaticRouter(addrB, owners)))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srvA, lnA)
	serve(t, srvB, lnB)

	kb := func(id AccountID) []byte { b, _ := balA.AppendKey(nil, id); return b }
	forwarded := 0
	for id := AccountID(0); id < accounts+10; id++ {
		owner := owners[connector.PartitionOf(kb(id), 4)]
		for _, via := range []string{addrA, addrB} {
			u := fmt.Sprintf("http://%s/tables/balances/%d", via, id)
			want, ok := ref[id]
			var h http.Header
			if !ok {
				h = errorOf(t, u, http.StatusNotFound, fmt.Sprintf(`no key "%d"`, id))
			} else {
				var got Balance
				h = get(t, u, http.StatusOK, &got)
				if got != want {
					t.Fatalf("account %d via %s = %+v, want %+v", id, via, got, want)
				}
			}
			if via != owner {
				forwarded++
				if h.Get(queryserver.HeaderOwner) != owner {
					t.Fatalf("account %d via %s: owner header %q, want %s", id, via, h.Get(queryserver.HeaderOwner), owner)
				}
			} else if h.Get(queryserver.HeaderOwner) != "" {
				t.Fatalf("account %d served locally by %s carries owner %q", id, via, h.Get(queryserver.HeaderOwner))
			}
		}
	}
	if forwarded < accounts/2 {
		t.Fatalf("only %d gets were forwarded", forwarded)
	}

	// Scans: each server reads its own partitions and names the others'
	// owner; together they are the reference.
	union := map[AccountID]Balance{}
	for _, c := range []struct{ via, other string }{{addrA, addrB}, {addrB, addrA}} {
		var p struct {
			Rows []struct {
				Key       string  `json:"key"`
				Partition uint32  `json:"partition"`
				Value     Balance `json:"value"`
			} `json:"rows"`
			Next    string `json:"next"`
			Skipped []struct {
				Partition uint32 `json:"partition"`
				Route     string `json:"route"`
				Owner     string `json:"owner"`
			} `json:"skipped"`
		}
		get(t, "http://"+c.via+"/tables/balances?limit=10000", http.StatusOK, &p)
		if p.Next != "" || len(p.Skipped) != 2 {
			t.Fatalf("scan via %s: next %q, skipped %+v", c.via, p.Next, p.Skipped)
		}
		for _, s := range p.Skipped {
			if s.Route != "remote" || s.Owner != c.other || owners[s.Partition] != c.other {
				t.Fatalf("scan via %s skipped %+v", c.via, s)
			}
		}
		for _, r := range p.Rows {
			if owners[r.Partition] != c.via || r.Key != fmt.Sprint(r.Value.Account) {
				t.Fatalf("scan via %s: row %+v", c.via, r)
			}
			union[r.Value.Account] = r.Value
		}
	}
	if len(union) != len(ref) {
		t.Fatalf("scans found %d accounts, want %d", len(union), len(ref))
	}
	for id, w := range ref {
		if union[id] != w {
			t.Fatalf("scan: account %d = %+v, want %+v", id, union[id], w)
		}
	}

	var inP0, inP2 AccountID
	for id := AccountID(1); inP0 == 0 || inP2 == 0; id++ {
		switch connector.PartitionOf(kb(id), 4) {
		case 0:
			inP0 = id
		case 2:
			inP2 = id
		}
	}
	// A loop: C (over App A) routes everything to B, B routes partition 0
	// to A; B will not forward C's forwarded request again.
	srvC, err := queryserver.New(appA, queryserver.WithTable(balA), queryserver.WithRouter(queryserver.StaticRouter("c", map[uint32]string{0: addrB, 1: addrB, 2: addrB, 3: addrB})))
	if err != nil {
		t.Fatal(err)
	}
	defer srvC.Close()
	hsC := httptest.NewServer(srvC)
	defer hsC.Close()
	h := errorOf(t, fmt.Sprintf("%s/tables/balances/%d", hsC.URL, inP0), http.StatusLoopDetected, "disagree on ownership", addrA)
	if h.Get("Retry-After") == "" {
		t.Fatal("508 without Retry-After")
	}
	var b Balance
	if get(t, fmt.Sprintf("%s/tables/balances/%d", hsC.URL, inP2), http.StatusOK, &b); b != ref[inP2] {
		t.Fatalf("via C: %+v, want %+v", b, ref[inP2])
	}

	// Redirects instead of forwarding: 307 to the owner, marked so that
	// it is not redirected again; a client that follows gets the value.
	srvD, err := queryserver.New(appA, queryserver.WithTable(balA), queryserver.WithRedirect(), queryserver.WithRouter(queryserver.StaticRouter(addrA, owners)))
	if err != nil {
		t.Fatal(err)
	}
	defer srvD.Close()
	hsD := httptest.NewServer(srvD)
	defer hsD.Close()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(fmt.Sprintf("%s/tables/balances/%d", hsD.URL, inP2))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantLoc := fmt.Sprintf("http://%s/tables/balances/%d?strand-hop=1", addrB, inP2)
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != wantLoc {
		t.Fatalf("redirect: %d to %q, want 307 to %q", resp.StatusCode, resp.Header.Get("Location"), wantLoc)
	}
	if get(t, fmt.Sprintf("%s/tables/balances/%d", hsD.URL, inP2), http.StatusOK, &b); b != ref[inP2] {
		t.Fatalf("redirected: %+v, want %+v", b, ref[inP2])
	}
	errorOf(t, fmt.Sprintf("http://%s/tables/balances/%d?strand-hop=1", addrB, inP0), http.StatusLoopDetected, "disagree")

	// An owner that does not answer: 502, retryable.
	dead := listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	srvE, err := queryserver.New(appA, queryserver.WithTable(balA), queryserver.WithRouter(queryserver.StaticRouter(addrA, map[uint32]string{0: addrA, 1: addrA, 2: deadAddr, 3: deadAddr})))
	if err != nil {
		t.Fatal(err)
	}
	defer srvE.Close()
	hsE := httptest.NewServer(srvE)
	defer hsE.Close()
	h = errorOf(t, fmt.Sprintf("%s/tables/balances/%d", hsE.URL, inP2), http.StatusBadGateway, "did not answer", deadAddr)
	if h.Get("Retry-After") != "1" {
		t.Fatal("502 without Retry-After")
	}
	// A partition missing from the static map is unavailable.
	srvF, err := queryserver.New(appA, queryserver.WithTable(balA), queryserver.WithRouter(queryserver.StaticRouter(addrA, map[uint32]string{0: addrA})))
	if err != nil {
		t.Fatal(err)
	}
	defer srvF.Close()
	hsF := httptest.NewServer(srvF)
	defer hsF.Close()
	errorOf(t, fmt.Sprintf("%s/tables/balances/%d", hsF.URL, inP2), http.StatusServiceUnavailable, "no owner in the static routing table")

	// Without a router, a partition the App does not process is not
	// answered 404 (its row is elsewhere): 503 naming WithRouter.
	srvG, err := queryserver.New(appA, queryserver.WithTable(balA))
	if err != nil {
		t.Fatal(err)
	}
	defer srvG.Close()
	hsG := httptest.NewServer(srvG)
	defer hsG.Close()
	errorOf(t, fmt.Sprintf("%s/tables/balances/%d", hsG.URL, inP2), http.StatusServiceUnavailable, "does not process partition 2", "queryserver.WithRouter")
	if get(t, fmt.Sprintf("%s/tables/balances/%d", hsG.URL, inP0), http.StatusOK, &b); b != ref[inP0] {
		t.Fatalf("local without a router: %+v, want %+v", b, ref[inP0])
	}
}

// An owner mounted under a path prefix is reached at its base URL.
func TestForwardToAPrefixedOwner(t *testing.T) {
	cl, ref := brokerWith(t, 2, workload(100, 10))
	app, bal := runApp(t, cl, nil)
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := app.WaitCaughtUp(wctx); err != nil {
		t.Fatal(err)
	}
	owner, err := queryserver.New(app, queryserver.WithTable(bal))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	mux := http.NewServeMux()
	mux.Handle("/query/", http.StripPrefix("/query", owner))
	hsOwner := httptest.NewServer(mux)
	defer hsOwner.Close()
	front, err := queryserver.New(app, queryserver.WithTable(bal), queryserver.WithRouter(queryserver.RouterFunc(
		func(context.Context, queryserver.Query) queryserver.Route {
			return queryserver.Route{Kind: queryserver.Remote, Owner: hsOwner.URL + "/query/"}
		})))
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	hsFront := httptest.NewServer(front)
	defer hsFront.Close()
	for id, want := range ref {
		var got Balance
		h := get(t, fmt.Sprintf("%s/tables/balances/%d", hsFront.URL, id), http.StatusOK, &got)
		if got != want || !strings.HasPrefix(h.Get(queryserver.HeaderOwner), hsOwner.URL) {
			t.Fatalf("account %d: %+v (owner %q), want %+v", id, got, h.Get(queryserver.HeaderOwner), want)
		}
	}
}

// /readyz is 503 with the lag while the App works through its backlog,
// and 200 once it has caught up.
func TestReadyWhenCaughtUp(t *testing.T) {
	gate := make(chan struct{})
	cl, _ := brokerWith(t, 2, workload(50, 5))
	app, bal := runApp(t, cl, gate)
	released := false
	defer func() {
		if !released {
			close(gate)
		}
	}()
	srv, err := queryserver.New(app, queryserver.WithTable(bal), queryserver.WithReadyTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	testrun.WaitFor(t, 10*time.Second, func() error {
		var e map[string]string
		get(t, hs.URL+"/readyz", http.StatusServiceUnavailable, &e)
		if strings.Contains(e["error"], "records behind") && strings.Contains(e["error"], depositTopic+" partition") {
			return nil
		}
		return fmt.Errorf("readyz does not report the lag: %v", e)
	})
	get(t, hs.URL+"/healthz", http.StatusOK, nil)
	close(gate)
	released = true
	testrun.WaitFor(t, 10*time.Second, func() error {
		resp, err := http.Get(hs.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz answers %s, want 200", resp.Status)
		}
		return nil
	})
}
