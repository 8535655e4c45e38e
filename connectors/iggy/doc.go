// Package iggy connects strand to an Apache Iggy server (0.8.x) through the
// official Go SDK, github.com/apache/iggy/foreign/go v0.8.0.
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
// # What the SDK lacks and this package adds
//
// The SDK is synchronous and low-level. Its constructor retries a failed dial
// forever, it never reconnects after a dropped connection, it has no context
// or deadline, it carries one request at a time per client, it panics on some
// malformed replies and it prints through the standard log package. Here:
//
//   - Every SDK client is wrapped in a connection that probes the address with
//     a net.Dialer (and a TLS handshake when TLS is on) before the SDK dials,
//     so nothing blocks forever; a Connect to an address where nothing
//     listens fails within the dial timeout with ErrUnreachable.
//   - Every call runs under a deadline (WithCallTimeout) set on the SDK's own
//     socket, and under the caller's context: a call that exceeds either
//     fails with ErrTimeout (or the context's error), and the connection is
//     discarded because its byte stream is no longer in step. The SDK's
//     Close cannot do this (it waits for the stalled call), so the socket is
//     reached inside the SDK client by reflection (the SDK version is pinned
//     and a test checks its layout). No goroutine is left
//     behind, except in one race: if the server vanishes between the probe
//     and the SDK's own dial, the SDK retries that dial every 2s until the
//     server is back, and a goroutine waits for it to close the client.
//   - A connection that failed is rebuilt on its next use: probe, dial, login
//     again. Readers and publishers retry transient failures with capped
//     exponential backoff and jitter (WithBackoff); administrative calls
//     repeat once when the connection died while idle and otherwise return
//     the failure. A publisher never repeats a send whose outcome is unknown
//     without first checking the log for it (see Publisher).
//   - A panic inside the SDK's decoders is recovered and reported as
//     ErrProtocol, and the connection is discarded.
//   - Errors wrap both a strand sentinel of this package (ErrUnreachable,
//     ErrAuth, ErrTimeout, ErrDisconnected, ErrPartitionCountMismatch, ...)
//     and the SDK's own sentinel, so errors.Is(err, ierror.ErrTopicIdNotFound)
//     works, and their messages name the stream, topic, partition and offset.
//
// The heartbeat goroutine of the SDK's client.NewIggyClient is not used:
// connections are built with tcp.NewIggyTcpClient, so an SDK client is one
// socket and nothing else, and no request competes with strand's own.
//
// # Connections
//
// The SDK serializes requests per client, so this package gives each unit of
// concurrency its own SDK client: one for the Client's administrative calls,
// one per PartitionReader, and one per publisher connection
// (WithConnections). Closing the Client closes all of them.
//
// # Logging
//
// Diagnostics go to the *slog.Logger given with WithLogger. The SDK itself
// prints a few lines through the standard log package on every login (its
// cluster-leader check). The standard logger is process-global, so this
// package never touches it on its own; call RouteStdLog to send those lines
// into slog (or to drop them) when the process agrees to that.
package iggy
