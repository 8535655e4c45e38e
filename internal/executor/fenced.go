package executor

import (
	"errors"
	"fmt"

	"github.com/strand-io/strand/stream/connector"
)

// ErrFenced means a partition is owned by another instance now (a higher
// epoch fenced this one): nothing this instance commits or publishes for
// it counts any more. A Processor's gate returns it (wrapped) to stop the
// partition; the scale-out changelog (internal/scaleout/changelog) is what
// returns it.
var ErrFenced = errors.New("strand: partition fenced: another instance owns it now")

// FencedError is ErrFenced for one partition, with the epoch the work that
// failed belonged to (0: the partition is kept under no epoch here). The
// scale-out loop compares it with the epoch the partition is held under
// now: an error of an older epoch never ends a newer epoch's work
// (docs/design.md §15, "The rebalancing loop").
type FencedError struct {
	Partition uint32
	Epoch     connector.Epoch
	// What failed: "commit", "publish rows", "serve".
	What string
}

// Error names the partition, the epoch and what failed.
func (e *FencedError) Error() string {
	if e.Epoch == 0 {
		return fmt.Sprintf("%s of partition %d: %v", e.What, e.Partition, ErrFenced)
	}
	return fmt.Sprintf("%s of partition %d with epoch %d: %v", e.What, e.Partition, e.Epoch, ErrFenced)
}

// Unwrap returns ErrFenced.
func (e *FencedError) Unwrap() error { return ErrFenced }

// Fenced returns a *FencedError: what ("commit", "publish rows", ...)
// of partition p, kept under epoch e, is fenced.
func Fenced(what string, p uint32, e connector.Epoch) error {
	return &FencedError{Partition: p, Epoch: e, What: what}
}
