package queryserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
)

// TestStaleReadsFromAStandby: with standbys, GET /group shows each
// instance's standby copies and how current they are; a get whose owner
// cannot answer is answered from the local standby copy only when the
// caller allows a staleness bound, with the staleness in the headers, and
// never otherwise; an instance without the copy asks the one that has it.
func TestStaleReadsFromAStandby(t *testing.T) {
	var events []Deposit
	for i := range 200 {
		events = append(events, Deposit{Account: AccountID(i % 20), Amount: int64(i)})
	}
	cl, ref := brokerWith(t, 4, events)
	a := startGroupInstance(t, cl, "stale-a", topology.WithStandbys(1))
	b := startGroupInstance(t, cl, "stale-b", topology.WithStandbys(1))
	c := startGroupInstance(t, cl, "stale-c", topology.WithStandbys(1))
	all := []*groupInstance{a, b, c}

	// Every partition is served, and has a current standby copy on an
	// instance that does not own it; and the group is settled: every
	// instance lists the three members, and what each member is assigned
	// (no revoke in flight) is what it serves at that epoch. Without the
	// last, a hand-over still under way after the three joins could move
	// a partition once owner is taken (seen: a restoring it while owner
	// said b).
	owner := map[uint32]*groupInstance{}
	testrun.WaitFor(t, 60*time.Second, func() error {
		clear(owner)
		current := map[uint32]bool{}
		views := make([]queryserver.GroupView, len(all))
		served := map[uint64]map[uint32]uint64{} // member -> partition -> epoch
		ok := true
		for i, in := range all {
			v := getGroupView(t, in.addr)
			views[i] = v
			ok = ok && len(v.Partitions) > 0
			served[v.Member] = map[uint32]uint64{}
			for _, p := range v.Partitions {
				ok = ok && p.Phase == topology.Serving.String()
				if owner[p.Partition] != nil {
					ok = false // claimed twice
				}
				owner[p.Partition] = in
				served[v.Member][p.Partition] = p.Epoch
			}
			for _, sb := range v.Standbys {
				for _, p := range v.Partitions {
					if p.Partition == sb.Partition {
						t.Fatalf("an instance keeps a standby copy of partition %d, which it owns", p.Partition)
					}
				}
				if sb.StalenessMS >= 0 && sb.Epoch != 0 {
					current[sb.Partition] = true
				}
			}
		}
		for _, v := range views {
			ok = ok && len(v.Members) == len(all)
			for _, m := range v.Members {
				ok = ok && len(m.Partitions) == len(served[m.ID])
				for _, o := range m.Partitions {
					e, serves := served[m.ID][o.Partition]
					ok = ok && serves && e == o.Epoch && !o.Revoking
				}
			}
		}
		if ok && len(owner) == 4 && len(current) == 4 {
			return nil
		}
		return fmt.Errorf("not every partition served with a current standby copy: owners %v, standbys %v", owner, current)
	})
	for _, in := range all {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := in.app.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}

	// b's query server goes away (the owner is unreachable; the group
	// still lists it).
	b.stop()
	get := func(via *groupInstance, acct AccountID, header string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/tables/balances/%d", via.addr, acct), nil)
		if header != "" {
			req.Header.Set(queryserver.HeaderMaxStaleness, header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	checked := 0
	for acct, want := range ref {
		for _, via := range []*groupInstance{a, c} {
			resp := get(via, acct, "")
			resp.Body.Close()
			p, _ := strconv.ParseUint(resp.Header.Get(queryserver.HeaderPartition), 10, 32)
			if owner[uint32(p)] != b {
				break // served by its owner
			}
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(queryserver.HeaderStaleness) != "" {
				t.Fatalf("account %d without consent: %s (staleness %q), want 502 and nothing stale", acct, resp.Status, resp.Header.Get(queryserver.HeaderStaleness))
			}
			// With consent: answered from the standby copy (by via, or by
			// the instance that keeps it), current (the partition is
			// through) and right.
			testrun.WaitFor(t, 60*time.Second, func() error {
				resp = get(via, acct, "1m")
				var bal Balance
				err := json.NewDecoder(resp.Body).Decode(&bal)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && err == nil && bal == want {
					return nil
				}
				return fmt.Errorf("account %d from the standby: %s %+v (%v), want %+v", acct, resp.Status, bal, err, want)
			})
			if ms, err := strconv.ParseInt(resp.Header.Get(queryserver.HeaderStaleness), 10, 64); err != nil || ms < 0 || ms > 60_000 {
				t.Fatalf("account %d: %s %q", acct, queryserver.HeaderStaleness, resp.Header.Get(queryserver.HeaderStaleness))
			}
			if resp.Header.Get(queryserver.HeaderEpoch) == "" || resp.Header.Get(queryserver.HeaderStandbySeq) == "" || resp.Header.Get(queryserver.HeaderCheckpoint) == "" {
				t.Fatalf("account %d: headers %v", acct, resp.Header)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no account of b's partitions")
	}
	resp := get(a, 1, "soon")
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad %s: %s, want 400", queryserver.HeaderMaxStaleness, resp.Status)
	}
}
