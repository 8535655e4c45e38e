// Package pipeline runs a compiled Program (internal/executor) over the
// partitions of one source: a Processor keeps, per partition, a reader
// that polls the connector, a loop that hands the batches to the
// partition's Task and finishes their commits, and an advisor that tells
// the broker the committed offset (docs/design.md §3). After each commit
// it hands the dead letters and messages the commit wrote to the
// outboxes (internal/outbox), which publish them.
//
// # Files
//
//   - processor.go: the Processor, its options and hooks, Stats, Release.
//   - processor_run.go: Run, the pipelines and their goroutines.
//   - flow.go: the one owner of a pipeline's backpressure (read-ahead
//     slots, the commit in flight, the outbox's pace).
//   - writers.go: the writer turns of the inputs that share a table
//     (docs/design.md §2).
//   - extent.go: the checks that the source is the log the store was
//     built from (docs/design.md §16).
//   - observe.go: the measurements handed to an Observer
//     (internal/telemetry) and the end offsets.
//   - outboxes.go: what the outboxes are given of the Processor.
//
// Rooms import downwards only: pipeline imports executor and outbox,
// outbox imports executor, executor imports neither (internal/archtest
// checks it).
package pipeline
