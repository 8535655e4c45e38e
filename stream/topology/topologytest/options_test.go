package topologytest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// fatalTB records the first Fatalf instead of ending the test.
type fatalTB struct {
	*testing.T
	fatal string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	if f.fatal == "" {
		f.fatal = fmt.Sprintf(format, args...)
	}
}

// TestOptionsRefuseBadValues: every option of NewDriver that takes a value
// that can be wrong refuses it, and NewDriver fails the test naming the
// option, before it builds or opens anything.
func TestOptionsRefuseBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  topologytest.Option
	}{
		{"topologytest.WithDir", topologytest.WithDir("")},
		{"topologytest.WithPartitions", topologytest.WithPartitions(0)},
		{"topologytest.WithBatchSize", topologytest.WithBatchSize(0)},
		{"topologytest.WithBatchSize", topologytest.WithBatchSize(-3)},
		{"topologytest.WithBatchSizes", topologytest.WithBatchSizes(nil)},
		{"topologytest.WithLogger", topologytest.WithLogger(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &fatalTB{T: t}
			// A topology that does not build: reaching Build would fail
			// with another message.
			d := topologytest.NewDriver(tb, topology.New(""), tc.opt)
			if d != nil || !strings.Contains(tb.fatal, tc.name+":") || !strings.HasPrefix(tb.fatal, "topologytest: NewDriver: strand: ") {
				t.Fatalf("NewDriver with a bad %s = %v, failure %q; want nil and a failure naming the option", tc.name, d, tb.fatal)
			}
		})
	}
}
