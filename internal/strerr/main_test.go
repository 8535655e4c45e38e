package strerr

import (
	"testing"

	"github.com/strand-io/strand/internal/testrun"
)

// TestMain fails the run when a goroutine leaks, and exits without the
// race runtime's second of sleep (internal/testrun).
func TestMain(m *testing.M) { testrun.Verify(m) }
