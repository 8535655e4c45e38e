package topology_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/strand-io/strand/stream/topology"
)

// TestNotInPlaceSaysWhy: a changed topology opened where Open does not
// build tables in the background (some partitions only, or in-place
// changes turned off) is refused with the differences and why not in
// place, and what to do instead.
func TestNotInPlaceSaysWhy(t *testing.T) {
	ctx := context.Background()
	b, dir, _ := retainedStore(t)
	quiet := topology.WithLogger(slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		opt  topology.OpenOption
		want string
	}{
		{topology.WithPartitions(0), "not made in place: an App of some partitions only (topology.WithPartitions)"},
		{topology.WithInPlaceChanges(false), "not made in place: topology.WithInPlaceChanges(false) was given"},
	} {
		topo2, _, _ := evolving(2)
		app, err := topology.Open(ctx, topo2, b, dir, quiet, c.opt)
		if err == nil {
			app.Close()
			t.Fatalf("Open of a changed topology with %q succeeded", c.want)
		}
		var te *topology.TopologyChangedError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open = %v; want a *TopologyChangedError saying %q", err, c.want)
		}
	}
}
