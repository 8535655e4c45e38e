// Package state is strand's local store: typed key→value tables, source
// checkpoints and other pending rows, all in one Pebble database per
// processor, committed together in one atomic batch.
//
// # Model
//
// Pebble is a log-structured merge tree: a write goes to a write-ahead log and
// an in-memory table, and a batch of writes becomes visible and durable as one
// unit, or not at all. strand's exactly-once guarantee (docs/design.md §2, item 5)
// rests on that: a partition pipeline folds one polled batch of events into a
// [Txn], records the next source offset with [Txn.SetCheckpoint], adds any
// outbox, dead-letter, hold or parked rows with [Txn.PutRow], and calls
// [Txn.Commit], which writes all of it as ONE Pebble batch. After any crash
// the database holds a prefix of the committed batches, so every table equals
// the fold of exactly the events up to its stored checkpoint.
//
// # Data flow
//
// In docs/design.md §3 this package is the "commit" step and the read side of the
// "execute" step: handlers read their key's value with [Table.Read] (their own
// pending writes first, then committed state) and write it back with
// [Table.Write] (or both at once with [Table.Update]); queries call
// [Table.Get] and [Table.Scan], which only ever see committed state and are
// safe while processing goes on. To overlap one batch's commit with the
// next batch's work, a pipeline starts the next transaction with
// [DB.NewTxnAfter]: it reads the committing transaction's writes, commits
// after it, and commits nothing if it failed.
//
// # Key layout
//
// Every Pebble key starts with a [Family] byte, then the source partition as a
// big-endian uint32, then the rest, so one partition's rows of one family are
// one contiguous range (docs/design.md §6):
//
//	metadata     FamilyMeta       | 0 (u32)   | name             (fingerprint, layout version, table registry)
//	checkpoints  FamilyCheckpoint | partition | source name      → next offset (u64 BE)
//	table rows   FamilyTable      | partition | table id (u32)  | key bytes → encoded value
//	other rows   FamilyOutbox ... | partition | key bytes        → value bytes
//	changelog    FamilyChangelog  | partition | seq (u64 BE)     → EncodeLogged(head, writes)
//	log head     FamilyLogHead    | partition                    → head of the last logged commit
//
// Table ids are assigned on first [DB.Attach] and persisted by name, so a
// table keeps its rows across restarts as long as its name stays the same.
//
// # Changelog
//
// A partition's state can move to another store (scale-out: one owner per
// partition across instances). While [DB.LogPartition] marks a partition
// logged, every commit that writes its rows also writes, in the same atomic
// batch, its FamilyLogHead row (the head value the [CommitLogger] stamps the
// commit with) and a FamilyChangelog row holding the commit's writes as a
// Pebble batch representation (head row included, changelog rows not). The
// engine publishes the changelog rows and deletes them; another store
// rebuilds the partition with [DB.DropPartition], the chunks of a
// [DB.SnapshotPartition] and the changelog rows after the snapshot's head,
// each applied with [DB.ApplyLogged]. A logged commit must write rows of one
// partition only ([ErrMixedPartitions]). Commits of partitions not logged
// are unchanged.
//
// # Costs
//
// [Txn.Commit] costs one Pebble batch commit; with [Sync] durability (the
// default) that includes an fsync of the write-ahead log, which Pebble shares
// between concurrent committers (group commit), so many partition pipelines
// committing at once pay for far fewer fsyncs than commits. Each table keeps a
// bounded, write-through cache of decoded committed values, so a hot key is
// read from Pebble and decoded once, not once per batch. A Read of a row that
// does not exist yet (a key's first event) costs no Pebble read either: the
// DB keeps a Bloom filter of every table row in the store ([WithKeyFilterSize]),
// built by a background scan when it opens and kept up to date by every
// commit. A finished transaction's memory is reused by the next one of the
// same table. [DB.Stats] tells how reads were served.
package state
