package grouptest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// waitUntil waits for cond (testrun.WaitFor) for at most d.
func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	testrun.WaitFor(t, d, testrun.Until(what, cond))
}

// With WithStandbys(1), each instance of two keeps a standby copy of the
// partitions the other owns; stale reads of them are answered only within
// the caller's bound; when the owner leaves, the other instance is
// granted its partitions and restores them from its standby copies (the
// rows reused, only the tail read).
func TestGroupStandbysArePromoted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := Broker(t)
	const parts, keys = 4, 40
	if err := cl.EnsureTopic(ctx, "s", "log", parts); err != nil {
		t.Fatal(err)
	}
	_, _, decl := Counter("grp")
	want := map[string]int64{}
	publishCounts(t, cl, decl, 0, 1000, keys, want)
	// No snapshots: without its standby copy, a new owner would read the
	// whole changelog.
	opts := []topology.OpenOption{topology.WithStandbys(1), topology.WithSnapshotEvery(0)}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	a := startInstance(t, cl, "a", t.TempDir(), append(opts, topology.WithMeterProvider(mp))...)
	b := startInstance(t, cl, "b", t.TempDir(), opts...)
	owner := settled(t, parts, a, b)
	check(t, owner, want)

	// Every partition has a standby copy on the instance that does not
	// own it, and none on its owner.
	waitUntil(t, "standby copies", 30*time.Second, func() bool {
		for p := range uint32(parts) {
			other := a
			if owner[p] == a {
				other = b
			}
			if _, ok := standbyOf(other.app, p); !ok {
				return false
			}
			if _, ok := standbyOf(owner[p].app, p); ok {
				t.Fatalf("%s keeps a standby copy of partition %d, which it owns", owner[p].name, p)
			}
		}
		return true
	})
	// The metrics show a's standby copies: one lag per partition it keeps.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	lags := Sums(t, rm, "strand.standby.lag", semconv.MessagingDestinationPartitionIDKey)
	for p := range uint32(parts) {
		if _, ok := lags[fmt.Sprint(p)]; ok == (owner[p] == a) {
			t.Errorf("strand.standby.lag of partition %d on a (owner %s): %v", p, owner[p].name, lags)
		}
	}
	publishCounts(t, cl, decl, 1000, 1000, keys, want)
	owner = settled(t, parts, a, b)
	check(t, owner, want)

	// Stale reads: from the standby copy, within a bound, once it caught
	// up; never of a partition the instance owns; never beyond the bound.
	for k, w := range want {
		p := connector.PartitionOf([]byte(k), parts)
		other := a
		if owner[p] == a {
			other = b
		}
		waitUntil(t, "the standby copy of "+k, 30*time.Second, func() bool {
			got, ok, _, st, err := other.n.GetStandby(ctx, other.app, k, time.Minute)
			if err != nil && !errors.Is(err, topology.ErrNoStandby) {
				t.Fatalf("GetStandby(%s) on %s: %v", k, other.name, err)
			}
			if err == nil && (st.Partition != p || st.Age > time.Minute || st.Epoch == 0) {
				t.Fatalf("GetStandby(%s): staleness %+v", k, st)
			}
			return err == nil && ok && got == w
		})
		if _, _, _, _, err := owner[p].n.GetStandby(ctx, owner[p].app, k, time.Hour); !errors.Is(err, topology.ErrNoStandby) {
			t.Fatalf("GetStandby(%s) on its owner %s: %v, want ErrNoStandby", k, owner[p].name, err)
		}
		if _, _, _, _, err := other.n.GetStandby(ctx, other.app, k, -time.Second); err == nil {
			t.Fatalf("GetStandby(%s) with a negative bound answered", k)
		}
	}

	// b leaves: a is granted b's partitions and promotes its standby
	// copies: each restore reuses the rows.
	var moved []uint32
	for p, in := range owner {
		if in == b {
			moved = append(moved, p)
		}
	}
	b.close(t)
	publishCounts(t, cl, decl, 2000, 200, keys, want)
	owner = settled(t, parts, a)
	check(t, owner, want)
	for _, st := range a.app.Ownership() {
		for _, p := range moved {
			if st.Partition == p && !st.Restore.Reused {
				t.Errorf("partition %d was restored without its standby copy: %+v", p, st.Restore)
			}
		}
	}
	a.close(t)
	checkChangelog(t, cl, parts)
}

func standbyOf(app *topology.App, p uint32) (topology.StandbyStatus, bool) {
	for _, s := range app.Standbys() {
		if s.Partition == p {
			return s, true
		}
	}
	return topology.StandbyStatus{}, false
}

func TestWithStandbysIsChecked(t *testing.T) {
	ctx := context.Background()
	cl := Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 2); err != nil {
		t.Fatal(err)
	}
	topo, _, _ := Counter("grp")
	_, err := topology.Open(ctx, topo, cl, t.TempDir(), topology.WithStandbys(-1))
	if err == nil || !strings.Contains(err.Error(), "WithStandbys") {
		t.Fatalf("WithStandbys(-1): %v", err)
	}
	_, err = topology.Open(ctx, topo, cl, t.TempDir(), topology.WithStandbys(1))
	if err == nil || !strings.Contains(err.Error(), "WithGroup") {
		t.Fatalf("WithStandbys without a group: %v", err)
	}
}
