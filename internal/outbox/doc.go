// Package outbox publishes what commits left behind (docs/design.md §11):
// the dead letters of a source partition to the dead-letter sink, and the
// messages of To and KeyBy to their topics. The executor
// (internal/executor) writes their rows into the batch's transaction; once
// the commit returned, the partition pipeline (internal/pipeline) hands
// the committed rows to an Outbox (Committed, Notify, Push), whose
// publisher sends them and deletes their rows in a later commit. A crash
// sends them again; a sink that is a connector.SentChecker is asked first
// so that none is published twice.
//
// outbox.go is the publisher common to both kinds (rounds, retries, the
// durable bound, flow control); kinds.go the two kinds (which rows, which
// sink, which hooks); env.go the Config a Processor gives and the exported
// Outbox.
package outbox
