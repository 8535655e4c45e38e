// Package stream declares events and runs keyed topologies over a
// partitioned log.
//
// A polled batch flows through it as in docs/design.md §3: the strand headers of
// each record are read without decoding the payload, the planner cuts the
// batch into keys, segments and runs, and the executor applies keys
// concurrently, segments in order, and each run decoded, reduced with its
// algebra and handed to its handler. State and the source checkpoint are
// committed together in one atomic batch of package state.
package stream
