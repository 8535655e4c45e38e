package proptest

import (
	"errors"
	"strings"
	"testing"

	"github.com/strand-io/strand/stream/topology"
)

// buildRefusal is a case of a test that Build refuses a topology: make
// declares it, want is what the refusal must name.
type buildRefusal struct {
	name string
	make func() *topology.Topology
	want string
}

// checkBuildRefusals runs each case as a subtest: Build must fail with an
// error that wraps topology.ErrBuild and names the case's want.
func checkBuildRefusals(t *testing.T, cases []buildRefusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.make().Build()
			if err == nil || !errors.Is(err, topology.ErrBuild) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Build = %v, want a refusal naming %q", err, c.want)
			}
		})
	}
}
