// Package iggy connects strand to an Apache Iggy server: server 0.10
// (binary protocol 0.12.0) or server 0.8 (the legacy protocol), found at
// connect or chosen with WithProtocol. It speaks both protocols itself,
// through the layouts of package internal/wire; of the official Go SDK
// (github.com/apache/iggy/foreign/go v0.8.0) only the data types
// (contracts) and the error sentinels (errors) are used.
//
// In the data flow of docs/design.md §3 this package is both ends: a Source whose
// Readers poll one partition each from the processor's checkpoint
// (Offset strategy, auto-commit off) and hand over records with their strand
// headers already parsed, and a Publisher / Sink that writes events with the
// strand headers of docs/design.md §5 into the partition that Iggy's
// messages-key partitioning would choose for their key. A Source made with
// WithForeign (Client.OpenForeignSource) reads a topic of producers that
// write no strand headers: each record carries its raw message instead
// (docs/design.md, "Foreign input").
//
// For scale-out, Client.Group is a connector.Group: its members share a
// topology's partitions through a membership log on Iggy (Client.JoinGroup,
// docs/design.md "Ownership"), and the Client is connector.Bookmarks, named
// offsets per partition kept as the stored offsets of Iggy consumers.
//
// # Connections
//
// Each unit of concurrency has a connection of its own (the protocols carry
// one request at a time per connection): one for the Client's
// administrative calls, one per PartitionReader, and one per publisher
// connection (WithConnections). Closing the Client closes all of them.
//
//   - A connection dials with a net.Dialer under the dial timeout (and a TLS
//     handshake when TLS is on), so a Connect to an address where nothing
//     listens fails within it with ErrUnreachable. After login it reads the
//     cluster metadata and moves to the cluster's leader when the server
//     names another node as leader (as the official SDK does).
//   - Every call runs under a deadline (WithCallTimeout) set on the socket,
//     and under the caller's context: a call that exceeds either fails with
//     ErrTimeout (or the context's error), and the connection is discarded
//     because its byte stream is no longer in step.
//   - A connection that failed is rebuilt on its next use: dial and login
//     again (in 0.10 with the same client id and a request counter that
//     never goes back). Readers and publishers retry transient failures with
//     capped exponential backoff and jitter (WithBackoff); administrative
//     calls repeat once when the connection died while idle and otherwise
//     return the failure. A publisher never repeats a send whose outcome is
//     unknown blindly: in 0.10 it repeats it under the same request number,
//     which the server recognises; in 0.8 it first checks the log for it
//     (see Publisher).
//   - Replies are decoded by code that returns an error for anything
//     malformed (ErrProtocol; the connection is discarded), never panics.
//   - Errors wrap both a strand sentinel of this package (ErrUnreachable,
//     ErrAuth, ErrIncompatible, ErrTimeout, ErrDisconnected,
//     ErrPartitionCountMismatch, ...) and the SDK's sentinel for the server's
//     status, so errors.Is(err, ierror.ErrTopicIdNotFound) works, and their
//     messages name the stream, topic, partition and offset.
//
// # Logging
//
// Diagnostics go to the *slog.Logger given with WithLogger. Code that uses
// the SDK's TCP client directly (tests, foreign producers) gets a few lines
// through the standard log package on every login; the standard logger is
// process-global, so this package never touches it on its own; call
// RouteStdLog to send those lines into slog (or to drop them).
//
// # Options
//
// Option (Connect), SourceOption, PublisherOption, TopicOption, TLSOption
// and GroupOption are opaque interfaces made only by this package's With…
// functions; a bad value is refused by the call that takes it, with an
// error naming the option ("strand: iggy.WithPollBatch: …"). Errors of
// the connector start with "strand: iggy: " (docs/design.md §1).
package iggy
