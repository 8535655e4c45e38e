// Package metamorphic is strand's generative test harness, modelled on
// Pebble's metamorphic tests: a seed is turned into a random topology, a
// random log and a random way of running it; the topology is built with the
// public API only, run through the real App by the broker-free driver
// (topologytest), and what it left behind — tables, dead letters, published
// outputs, side effects — is compared with a reference model of the
// guarantees README.md and docs/design.md (§2, §8, §10, §11, §14) document.
//
// # What the generator covers
//
//   - 1–3 inputs: strand sources and at most one foreign source
//     (topology.ForeignSource with a classifier); every input's partition
//     count is the case's (1–4).
//   - 1–4 event types per input, each with a static fence (Relaxed, Acquire,
//     Release, AcqRel), a per-event fence (stream.WithFenceBy), an associative
//     fold of the events' ids (algebra.Fold) or a sum (algebra.Sum); a
//     skipped tag (SourceNode.Skip) now and then.
//   - Projections into 1–5 tables, several types (and, with SharedTables,
//     several inputs) into one table.
//   - KeyBy steps, chains of two, with events whose key function fails or
//     panics (dead-lettered as key-by).
//   - To steps (outputs read back and checked exactly once, in order per
//     key) and ForEach side effects (checked at least once).
//   - The re-sequencer (Resequence) with disorder and duplicates, dropped or
//     dead-lettered.
//   - Poison records: undecodable payloads, unknown type tags, bad headers,
//     unclassifiable foreign messages; the PassPoison and BlockPoisonedKey
//     policies (held keys are released as an operator would).
//   - Failing handlers (projections, To, ForEach): an error, a panic, a
//     change of the value in place followed by an error, each transient
//     (retried after AdvanceClock, WithRetry with random backoffs); with
//     Isolation also
//     stream.Permanent errors and handlers that always fail (retries
//     exhausted), next to healthy events of the same key.
//   - Time in read models (Knobs.Time, time.go): a table fed by one
//     unreduced node through a ProjectContext fold that deletes its row,
//     sets and cancels its key's timer; the table has a TTL and a timer
//     handler. After the run the clock passes every timer (each fires
//     exactly once) and then the TTL (every row expires once). The same
//     node aggregates into a window table (windows.go): tumbling windows
//     of event time (derived from the event's id), each holding its ids
//     in the key's order, compared with the model's per-key fold.
//   - A table-table join (topology.JoinTables) of two of the case's tables,
//     inner or left, when both are projected into and no node feeds both
//     (derived from the case, not drawn: Case.joins); the model joins its
//     own rows of the two sides, so a join row must equal the join of the
//     sides after every run, whatever the interleavings. A fenced node that
//     is the only input's writer of a side deletes its row on every fourth
//     event (topology.Delete, Case.deleters): a deleted side is a missing
//     side.
//   - Lookups (topology.Lookup): a node at depth 0 with a static fence
//     other than Relaxed and ProjectContext folds reads the first table that
//     only other types of its own input write (derived, not drawn:
//     Case.lookups); each fold records a digest of the row it saw (Row.Looks)
//     and the model the digest of its own row at that event. With
//     Knobs.StreamJoins some of them read it through a stream-table join
//     instead (topology.ProjectJoin, Left: -1 for a missing row; Inner: an
//     event without a row is not folded; Case.readKinds).
//   - Reads of other inputs' tables and global tables (Knobs.CrossReads,
//     crossread.go): a fenced node reads a table only other inputs write,
//     and a case in three gets a global input (SourceNode.Global) whose
//     table such nodes read first. What they see depends on timing (§20),
//     so the model checks the promise, not a value: each read's digest is
//     between 0 and the row's final digest, and never decreases along one
//     node's events of a key.
//   - Groups (Knobs.Group, group.go, grouprun.go): about one case in
//     eight, chosen by the seed, runs as 2–3 instances of one group over
//     the embedded Iggy broker, with instances stopping, crashing (their
//     connection cut), restarting over their store and joining between
//     batches, a standby copy in some. Reads taken after every batch
//     through each partition's owner never go back and hold nothing the
//     log does not lead to; standby reads hold what owners answered
//     before the copy was last current; after the run every table is
//     read per owner and compared with the model, dead letters and
//     outputs once each by message id.
//   - Random batch sizes, random pipe/step interleavings, clock advances and
//     restarts of the App over the same store; tables read with Scan and
//     every row again with Get.
//
// Every capability has a knob (Knobs, the -meta.* flags of the package's
// tests), so that one can be switched off while it is being fixed; every
// capability added to strand adds itself to the generator, the model and a
// knob, all on by default. Issue 23's two defects were found this way
// (tables shared between inputs lost updates, seeds 1, 8 and 33; a
// permanent failure dead-lettered its healthy neighbours, seed 2); a knob
// switches a capability off while it is being fixed, e.g.
//
//	go test ./internal/metamorphic -meta.shared-tables=false
//
// (TestDefectSharedTable, TestDefectIsolation and the crash test's shared
// table follow the same knobs).
//
// # The reference model
//
// Folds are designed so that the check does not depend on the interleavings
// strand may choose: a table's value (Row) keeps, per lane — one physical
// input, one origin key and one type — the ids of the events applied in
// order (or, for a sum, their total), and at every fenced event how far
// each lane of its input and origin key had got. The model fills the same
// Row by folding each input's events in their true order (the sequence
// order of a re-sequenced input), so a run passes exactly when every
// non-poison event is applied exactly once, each lane keeps its order,
// fences hold back earlier and later events of their key, and inputs keep
// their own order but none between them. Dead letters are compared as a
// set of (record, reason) with the failing event's own error; outputs
// exactly once, in order per origin key; ForEach at least once.
//
// # Replaying
//
// A failure prints the seed, the case and the first difference, and the
// one line that replays it:
//
//	go test ./internal/metamorphic -run TestMeta -seed=123
//
// (or STRAND_META_SEED=123). STRAND_SOAK=1 runs many more seeds
// (STRAND_META_SEEDS, default 2000, or -meta.duration), as
// benchmarks/soak-metamorphic.sh does.
package metamorphic
