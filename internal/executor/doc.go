// Package engine runs a compiled topology over the partitions of its
// sources: the program compiler, the executor and the partition pipelines
// with their outboxes (docs/design.md §3). Row layouts are internal/rows',
// the store internal/state's, replication internal/scaleout/changelog's;
// stream/topology is the front door that builds a Program and opens
// Processors.
//
// # Rooms
//
//   - The compiler (program.go, handler.go, emit.go, foreign.go) turns a
//     topology's declarations into a Program: per source, a route per type
//     tag (decoder, algebra, handlers, emitting handlers), and the tables;
//     describe.go keeps its readable description and lists what changed
//     when a store was written by another topology (docs/design.md §19).
//   - The executor (task.go; parked.go, resequencer.go, outbox_stage.go,
//     stuck.go, replaymark.go: what a rebuild after a reset does not
//     publish again) is a Task: one source partition's state in memory and the
//     work of one batch, from records to a staged Pebble transaction.
//   - The partition pipelines (processor.go, processor_run.go, writers.go,
//     extent.go, observe.go) are a Processor: per partition a reader that
//     polls the connector and a loop that hands batches to its Task,
//     finishes their commits and reports them.
//   - The outboxes (outbox.go, outbox_deadletters.go) publish what commits
//     left behind: dead letters, and the messages of To and KeyBy.
//
// # The life of a batch
//
// A pipeline's reader polls the connector (pipeline.read) while a slot is
// free; the loop (pipeline.loop) takes the batch and, holding the
// partition's writer turn when inputs share a table (Writers), calls
// Task.Submit. Submit stages the batch (Task.stage):
//
//  1. classify the records of a foreign source and read their headers;
//     take in the parked keys that are due;
//  2. re-sequence (resequencer.go): hold records that arrive ahead of
//     their key's next number, release those the batch completes;
//  3. prepare (Task.prepare): drop outbox messages applied already
//     (outbox_stage.go), split records of parked keys off, plan the rest
//     (planner.Plan: keys → segments → runs);
//  4. execute (Task.execute): keys concurrently, each key's runs in order,
//     a run decoded, reduced and applied by its handlers; a failing run
//     parks its key or dead-letters its record; a run that does not
//     return by the drain timeout abandons the batch (stuck.go);
//  5. write the outcome (Task.writeOutcome): parked rows, dead letters,
//     outbox rows and origins (outbox_stage.go) and the checkpoint, into the
//     batch's transaction.
//
// Submit then waits for the previous batch's commit (Task.finishPending),
// applies the staged batch to the Task's memory and starts its commit in
// the background: the commit of one batch overlaps the execution of the
// next. The loop finishes that commit when the next batch is submitted or
// the pipeline idles (pipeline.finishCommit): stats, the AfterCommit hook,
// the offset advice to the connector, and a nudge to the outboxes, which
// publish the committed dead letters and messages and delete their rows.
//
// A batch is all or nothing: until its commit returns, nothing of it is
// visible, published or advised, and an error discards its transaction
// (ErrTaskBroken once a commit failed: the Task must be reopened).
package executor
