package scenario_test

import (
	"context"
	"fmt"
	"os"

	"github.com/strand-io/strand/benchmarks/internal/scenario"
	"github.com/strand-io/strand/benchmarks/internal/workload"
)

// Run the broker-free core scenario at a tiny size: one stream.Task per
// partition over a pre-encoded log, sync commits, checked against the
// sequential reference.
func Example() {
	dir, _ := os.MkdirTemp("", "scenario-example-")
	defer os.RemoveAll(dir)
	w := workload.Default()
	w.Events, w.Accounts = 5000, 200
	r, err := scenario.CoreStrand(context.Background(), scenario.CoreOptions{
		Workload: w, Codec: workload.Binary, Batch: 500, Dir: dir,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Scenario, r.Variant, r.Codec, r.Events, "events, verified:", r.Verified)
	// Output: core strand binary 5000 events, verified: true
}
