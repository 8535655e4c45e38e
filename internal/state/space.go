package state

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/strand-io/strand/internal/strerr"
)

// ErrDiskFull is wrapped (with ErrStoreFailed) by a commit refused because
// the disk of the store has less free space than its reserve
// (WithDiskReserve). It wraps syscall.ENOSPC.
var ErrDiskFull = strerr.Errorf("strand: disk full: %w", syscall.ENOSPC)

// DefaultDiskReserve is the free space a store keeps on its disk unless
// WithDiskReserve says otherwise: enough for Pebble to flush its memtables
// (at most 4 of 16 MiB) and finish the write-ahead log it is writing.
const DefaultDiskReserve = 64 << 20

// WithDiskReserve makes every commit refuse to start, with an error
// wrapping [ErrDiskFull] and [ErrStoreFailed], while the disk of the store
// has less than bytes free (default [DefaultDiskReserve]; 0 turns the
// check off). Pebble cannot survive a write-ahead log write that fails (it
// panics inside its commit pipeline, with its locks in a state no recover
// can repair), so a store must stop before its disk is full: a refused
// commit wrote nothing, the store stays healthy, and commits go on once
// there is room again. Something else that fills the disk by more than the
// reserve between two commits can still beat the check.
func WithDiskReserve(bytes int64) Option { return func(o *options) { o.diskReserve = bytes } }

// spaceCheckEvery is the least time between two looks at the free space
// of a store's disk (a statfs call); commits in between use the last look.
const spaceCheckEvery = time.Millisecond

// spaceGuard refuses commits while the disk of the store is nearly full.
type spaceGuard struct {
	fs      vfs.FS
	dir     string
	reserve uint64 // 0: off

	mu          sync.Mutex
	unsupported bool // the file system cannot tell its free space
	checkedAt   time.Time
	avail       uint64
}

// check returns an error wrapping ErrDiskFull when the disk has less free
// space than the reserve.
func (g *spaceGuard) check() error {
	if g == nil || g.reserve == 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unsupported {
		return nil
	}
	if now := time.Now(); now.Sub(g.checkedAt) >= spaceCheckEvery || g.avail < g.reserve {
		u, err := g.fs.GetDiskUsage(g.dir)
		if errors.Is(err, vfs.ErrUnsupported) {
			g.unsupported = true
			return nil
		}
		if err != nil {
			return nil // the commit itself meets what is wrong, if anything
		}
		g.checkedAt, g.avail = now, u.AvailBytes
	}
	if g.avail < g.reserve {
		return fmt.Errorf("%w: %w: the disk of the store at %s has %d bytes free, less than the %d bytes the store keeps "+
			"in reserve so that it never runs out of space in the middle of a write; nothing of this commit was written: make "+
			"room on the disk (or give the state directory a larger one), then run again: processing resumes exactly from the "+
			"last commit", ErrStoreFailed, ErrDiskFull, g.dir, g.avail, g.reserve)
	}
	return nil
}
