package queryserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

func TestMain(m *testing.M) { testrun.Verify(m) }

type Order struct {
	Customer string
	Amount   int64
}

type Total struct {
	Customer string `json:"customer"`
	Orders   int    `json:"orders"`
	Amount   int64  `json:"amount"`
}

var orders = stream.DeclareFunc(1, func(o Order) string { return o.Customer })

// shop is a topology of order totals by customer (string keys).
func shop() (*topology.Topology, *topology.Table[string, Total]) {
	topo := topology.New("shop")
	src := topology.Source[string](topo, "shop/orders")
	totals := topology.NewTable[string, Total](topo, "totals", stream.JSON[Total]())
	topology.Project(topology.On(src, orders), totals, func(t *Total, o Order) error {
		t.Customer = o.Customer
		t.Orders++
		t.Amount += o.Amount
		return nil
	})
	return topo, totals
}

// get fetches url and decodes its JSON body into v (when v is not nil),
// failing unless the status is want.
func get(t testing.TB, url string, want int, v any) http.Header {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d, want %d: %s", url, resp.StatusCode, want, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: content type %q", url, ct)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, body)
		}
	}
	return resp.Header
}

// errorOf fetches url, wants status want and an error naming every one of
// words, and returns the answer's headers.
func errorOf(t testing.TB, url string, want int, words ...string) http.Header {
	t.Helper()
	var e map[string]string
	h := get(t, url, want, &e)
	if len(e) != 1 || e["error"] == "" {
		t.Fatalf("GET %s: body %v, want {\"error\": ...}", url, e)
	}
	for _, w := range words {
		if !strings.Contains(e["error"], w) {
			t.Fatalf("GET %s: error %q does not say %q", url, e["error"], w)
		}
	}
	return h
}

type page struct {
	Rows []struct {
		Key       string `json:"key"`
		Partition uint32 `json:"partition"`
		Value     Total  `json:"value"`
	} `json:"rows"`
	Next    string `json:"next"`
	Skipped []struct {
		Partition uint32 `json:"partition"`
		Route     string `json:"route"`
		Owner     string `json:"owner"`
	} `json:"skipped"`
}

// newShop runs the shop topology on the broker-free driver over 4
// partitions with the orders of 300 customers, and serves it.
func newShop(t *testing.T, opts ...queryserver.Option) (*topologytest.Driver, *topology.Table[string, Total], map[string]Total, *httptest.Server) {
	t.Helper()
	topo, totals := shop()
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(4))
	want := map[string]Total{}
	var in []Order
	for i := range 1200 {
		c := fmt.Sprintf("c%03d", (i*7)%300)
		in = append(in, Order{Customer: c, Amount: int64(i)})
		w := want[c]
		w.Customer, w.Orders, w.Amount = c, w.Orders+1, w.Amount+int64(i)
		want[c] = w
	}
	topologytest.Pipe(d, orders, in...)
	d.Advance()
	srv, err := queryserver.New(d.App(), append([]queryserver.Option{queryserver.WithTable(totals)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); _ = srv.Close() })
	return d, totals, want, hs
}

// Gets answer the committed value, 404 only for a key without a row, 400
// for a key the table's codec refuses; unknown tables and endpoints are
// 404, writes 405, and every error is a JSON object.
func TestGet(t *testing.T) {
	_, totals, want, hs := newShop(t)
	for c, w := range want {
		var got Total
		h := get(t, hs.URL+"/tables/totals/"+c, http.StatusOK, &got)
		kb, _ := totals.AppendKey(nil, c)
		if got != w || h.Get(queryserver.HeaderPartition) != strconv.Itoa(int(connector.PartitionOf(kb, 4))) {
			t.Fatalf("GET %s = %+v (partition %s), want %+v", c, got, h.Get(queryserver.HeaderPartition), w)
		}
	}
	errorOf(t, hs.URL+"/tables/totals/nobody", http.StatusNotFound, `table "totals" has no key "nobody"`)
	errorOf(t, hs.URL+"/tables/totals/", http.StatusBadRequest, "empty key")
	errorOf(t, hs.URL+"/tables/totals/"+strings.Repeat("x", 300), http.StatusBadRequest, `table "totals": bad key`, "255")
	errorOf(t, hs.URL+"/tables/nope/1", http.StatusNotFound, `no table "nope"`, "totals")
	errorOf(t, hs.URL+"/nothing", http.StatusNotFound, "no endpoint /nothing")
	// A key with a slash and escaped characters reaches the table whole.
	errorOf(t, hs.URL+"/tables/totals/a/b%20c", http.StatusNotFound, `no key "a/b c"`)

	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, _ := http.NewRequest(m, hs.URL+"/tables/totals/c001", strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(e["error"], "read-only") {
			t.Fatalf("%s: %d %v %v", m, resp.StatusCode, resp.Header, e)
		}
	}
	resp, err := http.Head(hs.URL + "/tables/totals/c001")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD: %d", resp.StatusCode)
	}
}

// Integer keys are parsed by default, naming the type and range of a bad
// one; a KeyParser reads any other key type.
func TestKeyParsing(t *testing.T) {
	type ID uint32
	type Signed int64
	type Point struct{ X, Y int }
	topo := topology.New("keys")
	idTab := topology.NewTable[ID, int](topo, "ids", stream.JSON[int]())
	sTab := topology.NewTable[Signed, int](topo, "signed", stream.JSON[int]())
	pTab := topology.NewTable[Point, int](topo, "points", stream.JSON[int](),
		topology.WithTableKeys(stream.CodecFunc(func(dst []byte, p Point) ([]byte, error) { return fmt.Appendf(dst, "%d,%d", p.X, p.Y), nil },
			func(b []byte) (Point, error) {
				var p Point
				_, err := fmt.Sscanf(string(b), "%d,%d", &p.X, &p.Y)
				return p, err
			})))
	src := topology.Source[ID](topo, "k/ids")
	topology.Project(topology.On(src, stream.DeclareFunc(1, func(e ID) ID { return e })), idTab, func(v *int, e ID) error { *v = int(e); return nil })
	d := topologytest.NewDriver(t, topo, topologytest.WithPartitions(2))
	topologytest.Pipe(d, stream.DeclareFunc(1, func(e ID) ID { return e }), 7, 8)
	d.Advance()

	if _, err := queryserver.New(d.App(), queryserver.WithTable(pTab)); err == nil || !strings.Contains(err.Error(), "KeyParser") || !strings.Contains(err.Error(), `"points"`) {
		t.Fatalf("a struct key without a parser: %v", err)
	}
	parse := func(s string) (Point, error) {
		var p Point
		if _, err := fmt.Sscanf(s, "%d,%d", &p.X, &p.Y); err != nil {
			return p, errors.New("want X,Y")
		}
		return p, nil
	}
	srv, err := queryserver.New(d.App(), queryserver.WithTable(idTab), queryserver.WithTable(sTab), queryserver.WithTable(pTab, queryserver.WithKeyParser(parse)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var v int
	get(t, hs.URL+"/tables/ids/7", http.StatusOK, &v)
	if v != 7 {
		t.Fatalf("ids/7 = %d", v)
	}
	errorOf(t, hs.URL+"/tables/ids/-1", http.StatusBadRequest, `bad key "-1"`, "unsigned integer", "0..4294967295")
	errorOf(t, hs.URL+"/tables/ids/4294967296", http.StatusBadRequest, "unsigned integer")
	errorOf(t, hs.URL+"/tables/signed/x", http.StatusBadRequest, "signed integer", "-9223372036854775808..9223372036854775807")
	errorOf(t, hs.URL+"/tables/signed/-5", http.StatusNotFound, `no key "-5"`)
	errorOf(t, hs.URL+"/tables/points/1,2", http.StatusNotFound, `no key "1,2"`)
	errorOf(t, hs.URL+"/tables/points/zz", http.StatusBadRequest, "want X,Y")
	var infos []map[string]any
	get(t, hs.URL+"/tables", http.StatusOK, &infos)
	if len(infos) != 3 || infos[0]["name"] != "ids" || infos[0]["partitions"] != float64(2) {
		t.Fatalf("GET /tables = %v", infos)
	}

	for _, c := range []struct {
		opts []queryserver.Option
		want string
	}{
		{[]queryserver.Option{queryserver.WithTable(idTab), queryserver.WithTable(idTab)}, `table "ids" registered twice`},
		{[]queryserver.Option{queryserver.WithTable[ID, int](nil)}, "queryserver.WithTable: nil table"},
		{[]queryserver.Option{queryserver.WithTable(idTab, queryserver.WithKeyParser[ID](nil))}, "queryserver.WithKeyParser"},
		{[]queryserver.Option{queryserver.WithTable(idTab, queryserver.WithKeyFormatter[ID](nil))}, "queryserver.WithKeyFormatter"},
		{[]queryserver.Option{queryserver.WithAddr("nope")}, "queryserver.WithAddr"},
		{[]queryserver.Option{queryserver.WithMaxLimit(0)}, "queryserver.WithMaxLimit"},
		{[]queryserver.Option{queryserver.WithScanBudget(0)}, "queryserver.WithScanBudget"},
		{[]queryserver.Option{queryserver.WithReadyTimeout(0)}, "queryserver.WithReadyTimeout"},
		{[]queryserver.Option{queryserver.WithForwardTimeout(-1)}, "queryserver.WithForwardTimeout"},
		{[]queryserver.Option{queryserver.WithRouter(nil)}, "queryserver.WithRouter"},
		{[]queryserver.Option{queryserver.WithLogger(nil)}, "queryserver.WithLogger"},
		{[]queryserver.Option{queryserver.WithHTTPClient(nil)}, "queryserver.WithHTTPClient"},
	} {
		if _, err := queryserver.New(d.App(), c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error naming %s", err, c.want)
		}
	}
	if _, err := queryserver.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// scanAll follows next from the first page to the last and returns the
// rows.
func scanAll(t *testing.T, base string, pages *int) []string {
	t.Helper()
	var keys []string
	u := base
	for {
		var p page
		get(t, u, http.StatusOK, &p)
		*pages++
		for _, r := range p.Rows {
			keys = append(keys, r.Key)
		}
		if p.Next == "" {
			return keys
		}
		sep := "?"
		if strings.Contains(base, "?") {
			sep = "&"
		}
		u = base + sep + "after=" + url.QueryEscape(p.Next)
	}
}

// A scan pages through every row once, in partition then key order; a
// prefix filters on the key's string form; limits are bounded; a page
// reads at most the scan budget.
func TestScan(t *testing.T) {
	_, totals, want, hs := newShop(t, queryserver.WithMaxLimit(50), queryserver.WithScanBudget(40))
	var p page
	get(t, hs.URL+"/tables/totals?limit=7", http.StatusOK, &p)
	if len(p.Rows) != 7 || p.Next == "" {
		t.Fatalf("limit 7: %d rows, next %q", len(p.Rows), p.Next)
	}
	for _, r := range p.Rows {
		kb, _ := totals.AppendKey(nil, r.Key)
		if r.Value != want[r.Key] || r.Partition != connector.PartitionOf(kb, 4) {
			t.Fatalf("row %+v, want %+v", r, want[r.Key])
		}
	}
	pages := 0
	keys := scanAll(t, hs.URL+"/tables/totals?limit=50", &pages)
	if len(keys) != len(want) || pages < len(want)/40 {
		t.Fatalf("scan: %d keys in %d pages, want %d keys in at least %d pages (budget 40)", len(keys), pages, len(want), len(want)/40)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Fatalf("scan repeats %s", k)
		}
		seen[k] = true
	}
	// Rare prefix: pages come back short or empty, following next finds
	// every match.
	pages = 0
	got := scanAll(t, hs.URL+"/tables/totals?limit=50&prefix=c29", &pages)
	var wantPrefix []string
	for k := range want {
		if strings.HasPrefix(k, "c29") {
			wantPrefix = append(wantPrefix, k)
		}
	}
	slices.Sort(got)
	slices.Sort(wantPrefix)
	if !slices.Equal(got, wantPrefix) || pages < 2 {
		t.Fatalf("prefix c29: %v in %d pages, want %v", got, pages, wantPrefix)
	}
	errorOf(t, hs.URL+"/tables/totals?limit=51", http.StatusBadRequest, `limit "51": want 1..50`)
	errorOf(t, hs.URL+"/tables/totals?limit=0", http.StatusBadRequest, "limit")
	errorOf(t, hs.URL+"/tables/totals?after=!!", http.StatusBadRequest, "not a cursor")
	errorOf(t, hs.URL+"/tables/totals?offset=3", http.StatusBadRequest, `unknown parameter "offset"`)
}

// A cursor resumes after the last row read whatever was committed in
// between: rows present through the whole scan are each seen once.
func TestScanCursorSurvivesCommits(t *testing.T) {
	d, _, want, hs := newShop(t)
	var keys []string
	u := hs.URL + "/tables/totals?limit=25"
	for i := 0; ; i++ {
		var p page
		get(t, u, http.StatusOK, &p)
		for _, r := range p.Rows {
			keys = append(keys, r.Key)
		}
		if p.Next == "" {
			break
		}
		u = hs.URL + "/tables/totals?limit=25&after=" + p.Next
		// New customers between pages, before and after the cursor.
		topologytest.Pipe(d, orders, Order{Customer: fmt.Sprintf("a%03d", i), Amount: 1}, Order{Customer: fmt.Sprintf("z%03d", i), Amount: 1})
		d.Advance()
	}
	seen := map[string]int{}
	for _, k := range keys {
		seen[k]++
	}
	for k := range want {
		if seen[k] != 1 {
			t.Fatalf("customer %s seen %d times", k, seen[k])
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s seen %d times", k, n)
		}
	}
}

// /stats is App.Stats; /healthz answers; /readyz is 200 once everything is
// committed and 503 once the App is closed (the lag while records wait is
// in TestForwardingAcrossTwoApps: the driver's log hides what it has not
// handed out).
func TestStatsHealthReady(t *testing.T) {
	d, _, _, hs := newShop(t, queryserver.WithReadyTimeout(50*time.Millisecond))
	var st []stream.Stats
	get(t, hs.URL+"/stats", http.StatusOK, &st)
	if len(st) != 1 || st[0].Source != "shop/orders" || st[0].Total.Applied != 1200 {
		t.Fatalf("stats %+v", st)
	}
	get(t, hs.URL+"/healthz", http.StatusOK, nil)
	get(t, hs.URL+"/readyz", http.StatusOK, nil)
	d.Close()
	errorOf(t, hs.URL+"/readyz", http.StatusServiceUnavailable, "not ready")
	errorOf(t, hs.URL+"/tables/totals/c001", http.StatusServiceUnavailable, "not open")
	errorOf(t, hs.URL+"/tables/totals", http.StatusServiceUnavailable, "not open")
}

// A partition the router calls unavailable answers 503 with Retry-After
// and the reason; a scan skips it and says so.
func TestUnavailablePartition(t *testing.T) {
	router := queryserver.RouterFunc(func(_ context.Context, q queryserver.Query) queryserver.Route {
		if q.Partition == 1 {
			return queryserver.Route{Kind: queryserver.Unavailable, RetryAfter: 2500 * time.Millisecond, Reason: "partition 1 is restoring"}
		}
		return queryserver.Route{}
	})
	_, totals, want, hs := newShop(t, queryserver.WithRouter(router))
	hits := 0
	for c := range want {
		kb, _ := totals.AppendKey(nil, c)
		if connector.PartitionOf(kb, 4) != 1 {
			continue
		}
		h := errorOf(t, hs.URL+"/tables/totals/"+c, http.StatusServiceUnavailable, "partition 1 is restoring", "retry in 3s")
		if h.Get("Retry-After") != "3" {
			t.Fatalf("Retry-After %q", h.Get("Retry-After"))
		}
		hits++
	}
	if hits == 0 {
		t.Fatal("no key in partition 1")
	}
	var p page
	get(t, hs.URL+"/tables/totals?limit=10000", http.StatusOK, &p)
	if len(p.Rows) != len(want)-hits || len(p.Skipped) != 1 || p.Skipped[0].Partition != 1 || p.Skipped[0].Route != "unavailable" {
		t.Fatalf("scan: %d rows (want %d), skipped %+v", len(p.Rows), len(want)-hits, p.Skipped)
	}
}

// ListenAndServe binds to loopback only unless AllowNonLoopback is given,
// and stops gracefully when its context ends.
func TestLoopbackOnly(t *testing.T) {
	d, totals, _, _ := newShop(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "example.com:80", "[::]:0"} {
		srv, err := queryserver.New(d.App(), queryserver.WithAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ListenAndServe(context.Background()); !errors.Is(err, queryserver.ErrNotLoopback) || !strings.Contains(err.Error(), "queryserver.WithNonLoopback()") {
			t.Fatalf("ListenAndServe on %s = %v, want a refusal naming AllowNonLoopback", addr, err)
		}
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Serve(context.Background(), ln); !errors.Is(err, queryserver.ErrNotLoopback) || !strings.Contains(err.Error(), "queryserver.WithNonLoopback()") {
			t.Fatalf("Serve on %s = %v, want a refusal", ln.Addr(), err)
		}
	}
	// Loopback, and non-loopback when allowed, serve until ctx ends.
	for _, opts := range [][]queryserver.Option{
		{queryserver.WithAddr("127.0.0.1:0")},
		{queryserver.WithAddr("localhost:0")},
		{queryserver.WithAddr("0.0.0.0:0"), queryserver.WithNonLoopback()},
	} {
		srv, err := queryserver.New(d.App(), append(opts, queryserver.WithTable(totals))...)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := srv.Listen()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln) }()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		var v Total
		get(t, "http://127.0.0.1:"+port+"/tables/totals/c001", http.StatusOK, &v)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := http.Get("http://127.0.0.1:" + port + "/healthz"); err == nil {
			t.Fatal("server still answers after its context ended")
		}
	}
}

// WithHandler mounts a handler of one's own next to the queries; a
// conflicting pattern is refused.
func TestWithHandler(t *testing.T) {
	d, totals, _, _ := newShop(t)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "metric 1\n") })
	srv, err := queryserver.New(d.App(), queryserver.WithTable(totals), queryserver.WithHandler("GET /metrics", metrics))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "metric 1\n" {
		t.Fatalf("/metrics: %d %q", resp.StatusCode, b)
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/metrics", nil)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /metrics: %d", resp.StatusCode)
	}
	for _, c := range []struct {
		pattern string
		h       http.Handler
		want    string
	}{
		{"GET /stats", metrics, `pattern "GET /stats"`},
		{"", metrics, "want both"},
		{"GET /x", nil, "want both"},
		{"GET /{", metrics, `pattern "GET /{"`},
	} {
		if _, err := queryserver.New(d.App(), queryserver.WithHandler(c.pattern, c.h)); err == nil || !strings.Contains(err.Error(), "queryserver.WithHandler") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("WithHandler(%q): %v, want an error naming %s", c.pattern, err, c.want)
		}
	}
}
