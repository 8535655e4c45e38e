package state

import "github.com/cockroachdb/pebble/v2/vfs"

// WithFS runs Pebble on fs instead of the operating system's file system:
// an in-memory one, or one that injects errors or latency, such as a
// write-ahead log whose fsync is held (tests of the packages built on the
// store use it to open the window between a commit becoming visible and
// its returning). Production code never needs it.
func WithFS(fs vfs.FS) Option { return withFS(fs) }
