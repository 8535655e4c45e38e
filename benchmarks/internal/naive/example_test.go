package naive_test

import (
	"fmt"
	"os"

	"github.com/strand-io/strand/benchmarks/internal/naive"
	"github.com/strand-io/strand/benchmarks/internal/workload"
)

// Apply a small log batch by batch, as the naive consumer does, and check
// the store against the sequential reference.
func Example() {
	cfg := workload.Default()
	cfg.Events, cfg.Accounts, cfg.Partitions = 2000, 50, 2
	log, err := workload.Encode(cfg, workload.NewDecls(workload.Binary))
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "naive-example-")
	defer os.RemoveAll(dir)
	st, err := naive.Open(dir, log.Decls, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	for p := range log.Partitions() {
		for off := 0; off < log.PartitionLen(p); off += 500 {
			if err := st.ApplyBatch(p, log.Records(nil, p, off, 500)); err != nil {
				fmt.Println(err)
				return
			}
		}
	}
	got, _ := st.Balances()
	next, _ := st.Checkpoint(0)
	fmt.Println("matches the reference:", log.Verify(got) == nil)
	fmt.Println("partition 0 resumes at its end:", next == uint64(log.PartitionLen(0)))
	// Output:
	// matches the reference: true
	// partition 0 resumes at its end: true
}
