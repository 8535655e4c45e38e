package queryserver_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
)

// Every get and scan page says which committed checkpoints it reflects
// (HeaderCheckpoint), the same ones Table.GetFresh returns; outside a group
// there is no epoch.
func TestAnswersCarryTheirCheckpoints(t *testing.T) {
	_, totals, want, hs := newShop(t)
	perPart := map[uint32]uint64{} // orders per partition: the checkpoint after all
	for i := range 1200 {
		kb, _ := totals.AppendKey(nil, fmt.Sprintf("c%03d", (i*7)%300))
		perPart[connector.PartitionOf(kb, 4)]++
	}
	n := 0
	for c := range want {
		if n++; n > 20 {
			break
		}
		kb, _ := totals.AppendKey(nil, c)
		p := connector.PartitionOf(kb, 4)
		wantHdr := fmt.Sprintf("%d/shop/orders=%d", p, perPart[p])
		h := get(t, hs.URL+"/tables/totals/"+c, http.StatusOK, nil)
		if got := h.Get(queryserver.HeaderCheckpoint); got != wantHdr {
			t.Fatalf("GET %s: %s %q, want %q", c, queryserver.HeaderCheckpoint, got, wantHdr)
		}
		// ?wait=1 answers from every commit that returned (GetFresh): the
		// same here, where every commit returned long ago.
		h = get(t, hs.URL+"/tables/totals/"+c+"?wait=1", http.StatusOK, nil)
		if got := h.Get(queryserver.HeaderCheckpoint); got != wantHdr {
			t.Fatalf("GET %s?wait=1: %s %q, want %q", c, queryserver.HeaderCheckpoint, got, wantHdr)
		}
		get(t, hs.URL+"/tables/totals/"+c+"?wait=soon", http.StatusBadRequest, nil)
		if got := h.Get(queryserver.HeaderEpoch); got != "" {
			t.Fatalf("GET %s: %s %q outside a group", c, queryserver.HeaderEpoch, got)
		}
		_, ok, fr, err := totals.GetFresh(context.Background(), c)
		if err != nil || !ok || fr.Partition != p || len(fr.Checkpoints) != 1 ||
			fr.Checkpoints[0] != (topology.Checkpoint{Source: "shop/orders", Next: perPart[p]}) {
			t.Fatalf("GetFresh(%s) = %v %+v %v, want partition %d at %d", c, ok, fr, err, p, perPart[p])
		}
	}
	h := get(t, hs.URL+"/tables/totals?limit=1000", http.StatusOK, nil)
	var parts []string
	for p := range uint32(4) {
		parts = append(parts, fmt.Sprintf("%d/shop/orders=%d", p, perPart[p]))
	}
	if got, wantHdr := h.Get(queryserver.HeaderCheckpoint), strings.Join(parts, ", "); got != wantHdr {
		t.Fatalf("scan: %s %q, want %q", queryserver.HeaderCheckpoint, got, wantHdr)
	}
}
