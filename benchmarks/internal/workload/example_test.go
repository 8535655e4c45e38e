package workload_test

import (
	"fmt"

	"github.com/strand-io/strand/benchmarks/internal/workload"
)

// Encode a small accounts workload and read one partition's first batch
// as a source would deliver it.
func Example() {
	cfg := workload.Default()
	cfg.Events, cfg.Accounts = 10_000, 100
	log, err := workload.Encode(cfg, workload.NewDecls(workload.Binary))
	if err != nil {
		fmt.Println(err)
		return
	}
	recs := log.Records(nil, 0, 0, 3)
	fmt.Println(log.Len(), "events over", log.Partitions(), "partitions")
	fmt.Println("first record of partition 0 at offset", recs[0].Offset, "has a", recs[0].Headers.Ordering, "fence")
	// Output:
	// 10000 events over 8 partitions
	// first record of partition 0 at offset 0 has a Acquire fence
}
