package state_test

import (
	"testing"

	"github.com/strand-io/strand/internal/testrun"
)

func TestMain(m *testing.M) {
	testrun.QuietChildren() // TestLive's child exits at once under -race
	testrun.Verify(m)
}
