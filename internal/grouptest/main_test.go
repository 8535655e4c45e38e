package grouptest

import (
	"testing"

	"github.com/strand-io/strand/internal/testrun"
)

func TestMain(m *testing.M) { testrun.Main(m) }
