// Package inspect reads a strand store offline, without a topology: its
// layout version and fingerprint, the sources and their partition counts,
// the checkpoints, how many rows each table holds, and what waits in the
// runtime's own row families (parked keys and records, records the
// re-sequencer holds, outbox messages and dead letters not yet published).
// It reads the rows in the layouts of internal/rows through
// state.ScanReadOnly, so it fails while an App has the store open.
// stream/topology's Inspect and the strand CLI's inspect command build on it.
package inspect
