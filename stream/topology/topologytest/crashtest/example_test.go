package crashtest_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// A crash test of a service: the child (the test binary again, in the role
// "processor") runs the service over a store and says when it runs; the
// parent kills it at random moments, restarts it, and checks the store
// against a reference after each kill.
func Example() {
	// In TestMain, before m.Run: the child runs the service instead of the tests.
	_ = func(m *testing.M) {
		if code, ok := crashtest.Main(map[string]func([]string) int{
			"processor": func(args []string) int {
				fmt.Println("processor running") // then process until killed
				return 0
			},
		}); ok {
			os.Exit(code)
		}
		os.Exit(m.Run())
	}
	// The crash test.
	_ = func(t *testing.T) {
		for i := range crashtest.Kills(20, 300) {
			out := crashtest.Run(t, crashtest.Spec{Role: "processor", Args: []string{"-data", "DIR"}, Ready: "processor running"},
				time.Duration(1+i%300)*time.Millisecond)
			if out.Finished {
				continue // ran to the end before its kill
			}
			// check the store in DIR against the reference here
		}
	}
}

// A child arms a kill point from its kill mode: "after-commit:0.3" kills
// the process (crashtest.Die) in 30% of the calls at that point; "" never.
func ExampleKillPoint() {
	point, maybe, err := crashtest.KillPoint("after-commit:0", "after-commit", "before-send")
	fmt.Println(point, err)
	maybe() // probability 0: returns
	_, _, err = crashtest.KillPoint("inside:0.5", "after-commit", "before-send")
	fmt.Println(err)
	// Output:
	// after-commit <nil>
	// strand: crashtest: kill mode "inside:0.5": unknown point "inside" (known: after-commit, before-send)
}
