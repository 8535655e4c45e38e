package topology_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/grouptest"
	"github.com/strand-io/strand/stream/topology"
)

// A second App on a store another App holds is refused with the holder's
// pid and what to do, not only "resource temporarily unavailable".
func TestOpenOfAHeldStoreNamesTheHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := grouptest.Broker(t)
	if err := cl.EnsureTopic(ctx, "s", "log", 1); err != nil {
		t.Fatal(err)
	}
	topo, _, _ := grouptest.Counter("held")
	dir := t.TempDir()
	app, err := topology.Open(ctx, topo, cl, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	_, err = topology.Open(ctx, topo, cl, dir)
	if err == nil {
		t.Fatal("a second App opened a held store")
	}
	if want := fmt.Sprintf("open in another App (pid %d", os.Getpid()); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "give this one another directory") {
		t.Fatalf("second open: %v; want it to say %q and what to do", err, want)
	}
}
