package topologytest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

type Visit struct {
	Page string
	N    int
}

// exampleTB stands in for the *testing.T a test passes.
type exampleTB struct{ cleanups []func() }

func (*exampleTB) Helper()                   {}
func (*exampleTB) Errorf(f string, a ...any) { fmt.Printf(f+"\n", a...) }
func (*exampleTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (tb *exampleTB) Cleanup(fn func())      { tb.cleanups = append(tb.cleanups, fn) }
func (tb *exampleTB) TempDir() string {
	d, _ := os.MkdirTemp("", "ex-")
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}
func (tb *exampleTB) done() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}

// Example counts page visits with a projection that fails once: the run of
// the key's three visits leaves no trace, the key is parked with its three
// records, retried when the driver's clock passes its backoff, and applied
// exactly once.
func Example() {
	tb := &exampleTB{}
	defer tb.done()
	visits := stream.DeclareFunc(1, func(v Visit) string { return v.Page })
	topo := topology.New("visits", topology.WithRetry(3, time.Second, time.Minute))
	src := topology.Source[string](topo, "web/visits")
	counts := topology.NewTable[string, int](topo, "counts", stream.JSON[int]())
	failures := 0
	topology.Project(topology.On(src, visits), counts, func(n *int, v Visit) error {
		if v.N == 2 && failures < 2 { // the run's try, then the event's own
			failures++
			return errors.New("flaky")
		}
		*n++
		return nil
	})

	d := topologytest.NewDriver(tb, topo)
	topologytest.Pipe(d, visits, Visit{"/", 1}, Visit{"/", 2}, Visit{"/", 3})
	d.Advance()
	n, _, _ := counts.Get(context.Background(), "/")
	keys, recs := d.Parked()
	fmt.Println("after the failure:", n, "parked", keys, recs)

	d.AdvanceClock(time.Second)
	d.Advance()
	n, _, _ = counts.Get(context.Background(), "/")
	fmt.Println("after the retry:", n, "dead letters", len(d.DeadLetters()))
	// Output:
	// after the failure: 1 parked 1 2
	// after the retry: 3 dead letters 0
}
