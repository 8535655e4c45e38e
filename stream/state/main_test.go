package state_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/internal/testrun"
)

func TestMain(m *testing.M) {
	testrun.QuietChildren() // TestLive's child exits at once under -race
	goleak.VerifyTestMain(m, goleak.Cleanup(testrun.Exit))
}
