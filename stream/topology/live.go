package topology

import (
	"fmt"

	"github.com/strand-io/strand/internal/live"
)

// WithLiveInspect turns live inspection on or off (default off). On, while
// the App is open it serves consistent copies of its store to stream/state
// (and so to `strand inspect DIR` and `strand lag DIR`) on a loopback port
// recorded, with a random token, in the state directory (mode 0600: whoever
// may read the store may ask), since Pebble's lock keeps any other process
// from reading the store. Off, stream/state.Open of the directory fails
// while the App has it open, naming the App's pid; in the App's own
// process, stream/state.OpenApp reads it either way.
func WithLiveInspect(on bool) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		o.liveOn = on
		return nil
	})
}

// Dir returns the App's state directory.
func (a *App) Dir() string { return a.dir }

// CopyStore writes a consistent copy of the App's store into dir, which
// must not exist yet: every commit that returned before the call, as one
// state (a Pebble checkpoint; files are hard-linked where dir is on the
// same file system, so it costs next to nothing and takes no extra space
// until the store compacts them away). The copy is a store that
// stream/state opens like any stopped store; it is not meant to be run by
// an App (its live-inspection record is not copied). It fails with an
// error wrapping ErrNotOpen after Close.
func (a *App) CopyStore(dir string) error {
	if err := a.db.CopyTo(dir); err != nil {
		return fmt.Errorf("topology %q: copy the store: %w", a.prog.Name(), wrapNotOpen(err))
	}
	return nil
}

// startLive records the App in its state directory and, with live
// inspection on, serves copies of its store.
func (a *App) startLive(on bool) {
	a.live = live.Start(a.dir, on, a.db.CopyTo, a.log)
}
