package topologytest

import (
	"context"

	"github.com/strand-io/strand/stream/state"
)

// State returns a read-only view of the driver's store (stream/state): a
// consistent copy of the running App's store as of the call (every record
// Step or Advance applied), or the store itself once the driver is closed.
// The view is closed when the test ends; a later call sees later commits.
// A view of the closed store holds its lock: close it (Store.Close) before
// Restart.
func (d *Driver) State() *state.Store {
	d.tb.Helper()
	var (
		st  *state.Store
		err error
	)
	if d.app != nil {
		st, err = state.OpenApp(d.app)
	} else {
		st, err = state.Open(context.Background(), d.dir)
	}
	if err != nil {
		d.tb.Fatalf("topologytest: read the store: %v", err)
		return nil
	}
	d.tb.Cleanup(func() { _ = st.Close() })
	return st
}
