package queryserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
)

// fakeMembership is a connector.Membership whose view of the group a test
// sets: the members, what each owns, and this member's ID.
type fakeMembership struct {
	mu      sync.Mutex
	self    connector.MemberID
	members []connector.Member
}

func (f *fakeMembership) Assignments() <-chan connector.Assignment { return nil }
func (f *fakeMembership) HandBack(context.Context, uint32) error   { return nil }
func (f *fakeMembership) Err() error                               { return nil }
func (f *fakeMembership) Close() error                             { return nil }

func (f *fakeMembership) ID() connector.MemberID {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.self
}

func (f *fakeMembership) Owns(p uint32) (connector.Epoch, bool) {
	m, e, ok := f.Owner(p)
	return e, ok && m.ID == f.ID()
}

func (f *fakeMembership) Members() []connector.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]connector.Member(nil), f.members...)
}

func (f *fakeMembership) Owner(p uint32) (connector.Member, connector.Epoch, bool) {
	for _, m := range f.Members() {
		for _, po := range m.Partitions {
			if po.Partition == p {
				return m, po.Epoch, true
			}
		}
	}
	return connector.Member{}, 0, false
}

func (f *fakeMembership) set(members ...connector.Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members = members
}

func owning(id connector.MemberID, addr string, parts ...uint32) connector.Member {
	m := connector.Member{ID: id, Name: fmt.Sprintf("member-%d", id), Addr: addr}
	for _, p := range parts {
		m.Partitions = append(m.Partitions, connector.PartitionOwnership{Partition: p, Epoch: connector.Epoch(100 + p)})
	}
	return m
}

// phases is this instance's phase of each partition, as App.Phase
// reports; NotOwned for partitions it does not name.
type phases struct {
	mu sync.Mutex
	m  map[uint32]topology.Phase
}

func (ph *phases) of(p uint32) topology.Phase {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	return ph.m[p]
}

func (ph *phases) set(p uint32, to topology.Phase) {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	ph.m[p] = to
}

// The group router's decision in every case: a partition is Local only
// when it is Serving here and the membership still grants it here; one
// being restored here is unavailable; the membership says where the others
// are. So nothing is answered from a store that is not the partition's.
func TestGroupRoute(t *testing.T) {
	ph := &phases{m: map[uint32]topology.Phase{0: topology.Serving, 1: topology.Restoring, 9: topology.Serving}}
	m := &fakeMembership{self: 7}
	m.set(
		owning(7, "127.0.0.1:9007", 1, 2, 9), // 2: granted here, not restoring yet
		owning(8, "127.0.0.1:9008", 0, 3, 4), // 0: still Serving here, but lost (the App is stopping it)
		owning(9, "", 5),                     // announced no query address
		owning(3, "127.0.0.1:9007", 6),       // an earlier incarnation of this instance
		owning(8, "127.0.0.1:9008", 7),
	) // 8: nobody's
	for _, tc := range []struct {
		p      uint32
		kind   queryserver.RouteKind
		owner  string
		reason string
	}{
		{9, queryserver.Local, "", ""},
		{0, queryserver.Remote, "127.0.0.1:9008", ""},
		{1, queryserver.Unavailable, "", "partition 1 is restoring"},
		{2, queryserver.Unavailable, "", "changing hands at this instance"},
		{3, queryserver.Remote, "127.0.0.1:9008", ""},
		{4, queryserver.Remote, "127.0.0.1:9008", ""},
		{5, queryserver.Unavailable, "", "owner has no query address"},
		{6, queryserver.Unavailable, "", "earlier incarnation of this instance"},
		{7, queryserver.Remote, "127.0.0.1:9008", ""},
		{8, queryserver.Unavailable, "", "partition 8 has no owner"},
	} {
		rt := queryserver.GroupRoute(ph.of, m, queryserver.Query{Table: "totals", Partition: tc.p, Partitions: 10})
		if rt.Kind != tc.kind || rt.Owner != tc.owner || !strings.Contains(rt.Reason, tc.reason) {
			t.Errorf("partition %d: %+v, want %v to %q, reason containing %q", tc.p, rt, tc.kind, tc.owner, tc.reason)
		}
		if rt.Kind == queryserver.Unavailable && (rt.RetryAfter < time.Second || rt.Reason == "") {
			t.Errorf("partition %d: unavailable without a retry time or a reason: %+v", tc.p, rt)
		}
	}
	// Before the member is in the group (ID 0) an owner with the address
	// of no member of this instance is still remote.
	m.mu.Lock()
	m.self = 0
	m.mu.Unlock()
	if rt := queryserver.GroupRoute(ph.of, m, queryserver.Query{Table: "totals", Partition: 6, Partitions: 9}); rt.Kind != queryserver.Remote {
		t.Errorf("partition 6 before joining: %+v, want remote", rt)
	}
}

// Two query servers, A and B, routed by their own views of one group
// over the shop topology's 4 partitions (both over one App, so that a
// wrong Local would answer from a store that holds the row, and the test
// would see it as a value where it wants an error). A serves 0 and 1, B
// serves 2 and restores 3: through either server every key of 0-2 is
// answered by its owner, a key of 3 is 503 with Retry-After, an unknown
// key is 404 from its owner only; when the views disagree (B lost 2, A
// still routes it to B) the answer is a retryable 508, and when the owner
// announced no address, a 503 saying so.
func TestGroupRoutingOverHTTP(t *testing.T) {
	d, totals, want, hsFirst := newShop(t)
	hsFirst.Close()
	var addrA, addrB string
	phA := &phases{m: map[uint32]topology.Phase{0: topology.Serving, 1: topology.Serving}}
	phB := &phases{m: map[uint32]topology.Phase{2: topology.Serving, 3: topology.Restoring}}
	mA, mB := &fakeMembership{self: 1}, &fakeMembership{self: 2}
	server := func(ph *phases, m *fakeMembership) *httptest.Server {
		srv, err := queryserver.New(d.App(), queryserver.WithTable(totals), queryserver.WithRouter(queryserver.RouterFunc(
			func(_ context.Context, q queryserver.Query) queryserver.Route {
				return queryserver.GroupRoute(ph.of, m, q)
			})))
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		t.Cleanup(func() { hs.Close(); _ = srv.Close() })
		return hs
	}
	hsA, hsB := server(phA, mA), server(phB, mB)
	addrA, addrB = strings.TrimPrefix(hsA.URL, "http://"), strings.TrimPrefix(hsB.URL, "http://")
	view := []connector.Member{owning(1, addrA, 0, 1), owning(2, addrB, 2, 3)}
	mA.set(view...)
	mB.set(view...)

	partOf := func(c string) uint32 { kb, _ := totals.AppendKey(nil, c); return connector.PartitionOf(kb, 4) }
	owner := map[uint32]string{0: addrA, 1: addrA, 2: addrB}
	var restoring string
	for c, w := range want {
		p := partOf(c)
		for _, via := range []*httptest.Server{hsA, hsB} {
			u := via.URL + "/tables/totals/" + c
			if p == 3 {
				restoring = c
				h := errorOf(t, u, http.StatusServiceUnavailable, "partition 3 is restoring")
				if h.Get("Retry-After") != "1" {
					t.Fatalf("GET %s: Retry-After %q, want 1", u, h.Get("Retry-After"))
				}
				continue
			}
			var got Total
			h := get(t, u, http.StatusOK, &got)
			if got != w {
				t.Fatalf("GET %s = %+v, want %+v", u, got, w)
			}
			// The owner's epoch, also on a forwarded answer (issue 24).
			if e := h.Get(queryserver.HeaderEpoch); e != fmt.Sprintf("%d=%d", p, 100+p) {
				t.Fatalf("GET %s (partition %d): %s %q, want the owner's epoch %d", u, p, queryserver.HeaderEpoch, e, 100+p)
			}
			if local := strings.TrimPrefix(via.URL, "http://") == owner[p]; local != (h.Get(queryserver.HeaderOwner) == "") {
				t.Fatalf("GET %s (partition %d, owner %s): owner header %q", u, p, owner[p], h.Get(queryserver.HeaderOwner))
			}
		}
	}
	if restoring == "" {
		t.Fatal("no customer in partition 3: the test proves nothing about restoring partitions")
	}
	// An unknown key is 404, from the owner of its partition.
	var unknown string
	for i := 0; unknown == ""; i++ {
		if c := fmt.Sprintf("nobody-%d", i); partOf(c) == 2 {
			unknown = c
		}
	}
	if h := errorOf(t, hsA.URL+"/tables/totals/"+unknown, http.StatusNotFound, "has no key"); h.Get(queryserver.HeaderOwner) != addrB {
		t.Fatalf("404 of %s not from the owner: %v", unknown, h)
	}
	// Scans read the partitions served here and name the others.
	var pg page
	get(t, hsA.URL+"/tables/totals?limit=10000", http.StatusOK, &pg)
	if len(pg.Skipped) != 2 || pg.Skipped[0].Route != "remote" || pg.Skipped[0].Owner != addrB || pg.Skipped[1].Partition != 3 {
		t.Fatalf("scan via A skipped %+v", pg.Skipped)
	}
	for _, r := range pg.Rows {
		if r.Partition > 1 {
			t.Fatalf("scan via A read partition %d", r.Partition)
		}
	}

	// B gives partition 2 up and the group grants it to A, which B has
	// read but A not yet: A forwards to B, which will not send it back.
	phB.set(2, topology.NotOwned)
	mB.set(owning(1, addrA, 0, 1, 2), owning(2, addrB, 3))
	var inP2 string
	for c := range want {
		if partOf(c) == 2 {
			inP2 = c
			break
		}
	}
	h := errorOf(t, hsA.URL+"/tables/totals/"+inP2, http.StatusLoopDetected, "disagree on ownership")
	if h.Get("Retry-After") == "" {
		t.Fatal("508 without Retry-After")
	}
	// B, asked directly, routes to A, which has not started serving it.
	errorOf(t, hsB.URL+"/tables/totals/"+inP2, http.StatusLoopDetected, "disagree on ownership")
	mA.set(owning(1, addrA, 0, 1, 2), owning(2, addrB, 3))
	errorOf(t, hsB.URL+"/tables/totals/"+inP2, http.StatusServiceUnavailable, "changing hands at this instance")
	phA.set(2, topology.Serving)
	var got Total
	if get(t, hsB.URL+"/tables/totals/"+inP2, http.StatusOK, &got); got != want[inP2] {
		t.Fatalf("partition 2 after the move: %+v, want %+v", got, want[inP2])
	}
	// An owner that announced no query address.
	mA.set(owning(1, addrA, 0, 1, 2), owning(2, "", 3))
	phA.set(2, topology.Serving)
	errorOf(t, hsA.URL+"/tables/totals/"+restoring, http.StatusServiceUnavailable, "owner has no query address")
}
