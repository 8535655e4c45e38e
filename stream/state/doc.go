// Package state reads the store of a strand App, read-only: the state
// directory given to topology.Open, whether its App is stopped or running.
//
// A Store shows one consistent state of the directory: the tables' rows
// (typed through a topology.Table's codecs with Get and Scan, or raw bytes
// with GetRaw and ScanRaw), the sources' checkpoints, the keys parked for a
// retry or a release and their records, the records the re-sequencer holds
// behind open gaps, the gaps it gave up, and the committed dead letters and
// To/KeyBy messages not yet published. Summary counts all of it, as
// `strand inspect` prints it.
//
// Where the state comes from:
//
//   - A stopped store (no App has it open) is opened directly, read-only.
//     Pebble locks the directory while the Store is open, so an App cannot
//     open it until Close.
//   - A store an App holds open in another process is read through that
//     App when it was opened with topology.WithLiveInspect(true): the App
//     makes a consistent copy of its store (a Pebble checkpoint inside the
//     state directory: hard links, next to nothing) and the Store reads the
//     copy, which Close removes. Without live inspection Open fails,
//     naming the App's pid.
//   - In the App's own process, OpenApp reads a copy the same way, live
//     inspection on or off.
//
// A copy holds every commit that returned before it was made; it is not
// refreshed: open a new Store to see later commits. Nothing here writes to
// the store.
package state
