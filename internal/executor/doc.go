// Package executor is the compiler and the executor of strand's runtime
// (docs/design.md §3): it turns a topology's declarations into a Program
// and executes the batches of one source partition with a Task, from
// polled records to a staged Pebble transaction. The partition pipelines
// that poll and commit (internal/pipeline) and the outboxes that publish
// what commits left behind (internal/outbox) sit above it; row layouts are
// internal/rows', the store internal/state's, replication
// internal/scaleout/changelog's; stream/topology is the front door that
// builds a Program and opens the pipelines.
//
// The compiler and the executor are one package because a compiled
// Program is code the executor runs: each route's runner is a closure over
// the executor's run context (runCtx: the batch's transaction, the key's
// scope), so neither half compiles without the other.
//
// # Files
//
//   - The compiler (program.go, handler.go, emit.go, foreign.go, lookup.go,
//     derive.go, timers_compile.go) turns the declarations into a Program:
//     per source, a route per type tag (decoder, algebra, handlers,
//     emitting handlers), and the tables; describe.go keeps its readable
//     description and lists what changed when a store was written by
//     another topology (docs/design.md §19).
//   - The executor (task.go; parked.go, resequencer.go, outbox_stage.go,
//     stuck.go, scope.go, timers.go, replaymark.go: what a rebuild after a
//     reset does not publish again) is a Task: one source partition's state
//     in memory and the work of one batch. pipeline_api.go is what the
//     pipelines read of it besides Submit, Retry and Release; runcounts.go
//     counts the runs per event type; fenced.go is the error of a deposed
//     owner.
//
// # The life of a batch
//
// A pipeline's reader (internal/pipeline, pipeline.read) polls the
// connector while its flow has a slot free; the pipeline's loop
// (pipeline.loop) takes the batch and, holding the partition's writer turn
// when inputs share a table (pipeline.Writers), calls Task.Submit. Submit
// stages the batch (Task.stage):
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
// next. The pipeline finishes that commit when the next batch is submitted
// or it idles (pipeline.finishCommit): stats, the AfterCommit hook, the
// offset advice to the connector, and the commit's rows handed to the
// outboxes (internal/outbox), which publish the committed dead letters and
// messages and delete their rows. The pipeline's flow (internal/pipeline,
// flow.go) is the one place that decides when the pipeline waits.
//
// A batch is all or nothing: until its commit returns, nothing of it is
// visible, published or advised, and an error discards its transaction
// (ErrTaskBroken once a commit failed: the Task must be reopened).
package executor
