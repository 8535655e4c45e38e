package engine

import "errors"

// ErrFenced means a partition is owned by another instance now (a higher
// epoch fenced this one): nothing this instance commits or publishes for
// it counts any more. A Processor's gate returns it (wrapped) to stop the
// partition; the scale-out changelog (internal/scaleout/changelog) is what
// returns it.
var ErrFenced = errors.New("stream: partition fenced: another instance owns it now")
