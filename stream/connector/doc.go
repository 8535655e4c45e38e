// Package connector is what a connector implements for strand, and the
// format of the messages it carries: the contract between strand's runtime
// and a broker, as database/sql/driver is between database/sql and a
// database. A service names it rarely (connectors/iggy implements it, and
// package memconn is one in memory, for tests); a connector for another
// broker implements it, and passes package connectortest's conformance
// suite.
//
//   - Records and messages: Record (what a source delivers), Message (what
//     strand publishes), RawMessage (a foreign record's id and headers).
//   - The strand headers every message carries (docs/design.md §5): Headers,
//     ParseHeaders, AppendFields, the header names, Field and FieldKind,
//     and PartitionOf, the key partitioning publishers use.
//   - Reading: Source and PartitionReader, EndOffsetter for lag (and to
//     notice a log that ends before a checkpoint), Identifier to tell a
//     topic created again from the one the state was built from, and
//     ForeignConnector for topics whose producers write no strand headers.
//   - Writing: Sink and SentChecker (exactly-once publishing after a crash).
//   - Connector opens both by topic name.
//   - Scale-out (docs/design.md §15): Group and Membership (which instance
//     owns which partition, under which Epoch), Assignment, Member, and
//     Bookmarks (named positions kept by the broker).
//
// It imports nothing of strand's but the planner's and the algebra's kinds
// and the key hash.
package connector
