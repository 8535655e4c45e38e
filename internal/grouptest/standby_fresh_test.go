package grouptest

import (
	"context"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/topology"
)

// A standby read holds every commit its copy held when it was last
// current (Staleness.Age): an owner's answer received before then is in
// it. GetStandby answered from the read view the previous read of the
// store took (GetRecent), which may be far older than the copy: found by
// the generator's groups (internal/metamorphic, seed 332112068: a copy
// current 104 ms before the read answered a row without an event an owner
// had answered 268 ms before that).
func TestGroupStandbyReadHoldsWhatItWasCurrentFor(t *testing.T) {
	ctx := context.Background()
	cl := Broker(t)
	const keys = 5
	if err := cl.EnsureTopic(ctx, "s", "log", 1); err != nil {
		t.Fatal(err)
	}
	_, _, decl := Counter("grp")
	want := map[string]int64{}
	publishCounts(t, cl, decl, 1, 50, keys, want)
	a := startInstance(t, cl, "a", t.TempDir(), topology.WithStandbys(1))
	owner := settled(t, 1, a)
	b := startInstance(t, cl, "b", t.TempDir(), topology.WithStandbys(1))
	defer b.close(t)
	defer a.close(t)
	if owner = settled(t, 1, a, b); owner[0] != a {
		t.Fatalf("partition 0 moved to %s", owner[0].name)
	}
	// One partition: b only keeps a's copy, and only standby reads take
	// views of b's store. Read every key once, from a copy that caught up.
	for k, w := range want {
		waitUntil(t, "b's copy of "+k, 30*time.Second, func() bool {
			got, ok, _, _, err := b.n.GetStandby(ctx, b.app, k, time.Minute)
			return err == nil && ok && got == w
		})
	}
	publishCounts(t, cl, decl, 51, 50, keys, want)
	owner = settled(t, 1, a, b)
	check(t, owner, want) // the owner answers every new value: they are confirmed
	answered := time.Now()
	waitUntil(t, "b's copy current after the owner answered", 30*time.Second, func() bool {
		st, ok := standbyOf(b.app, 0)
		return ok && st.CurrentAt.After(answered)
	})
	for k, w := range want {
		got, ok, _, st, err := b.n.GetStandby(ctx, b.app, k, time.Minute)
		if err != nil || !ok || got != w {
			t.Errorf("GetStandby(%s) on b = %d, %v, %v (staleness %+v); want %d, which the owner answered before the copy was current",
				k, got, ok, err, st, w)
		}
	}
}
