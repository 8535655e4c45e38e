// Package iggytest is an in-process broker that speaks the TCP protocols of
// Apache Iggy server 0.10 (binary protocol 0.12.0) and server 0.8.0 (the
// legacy framing used by the official Go SDK github.com/apache/iggy/foreign/go
// v0.8.0), both on one listener by default (WithProtocol), so that strand's
// connectors, processors and examples can be tested, and run, against the
// real wire protocols with nothing installed. A 0.10 request is translated
// into its 0.8 form, executed by the same handlers and its reply translated
// back (serve012.go), so both protocols see one state. It plays the part franz-go's kfake plays
// for Kafka and net/http/httptest plays for HTTP:
//
//	srv, err := iggytest.NewServer()
//	if err != nil { ... }
//	defer srv.Close()
//	cli, err := client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(srv.Addr())))
//
// # Model
//
// The broker keeps what server 0.8.0 keeps: streams, which hold topics,
// which hold partitions and consumer groups. Stream, topic and group ids are
// 0-based slots reused after deletion (the server's slab), partitions are
// numbered 0..n-1, and every name or id may address an entity. A partition
// is a log of messages with 0-based consecutive offsets; each message is
// stored exactly as sent, with its offset, server timestamp, id (a random
// UUIDv4 when the client sent 0) and XXH3-64 checksum stamped in, and is
// served to polls byte for byte. Consumer offsets mean "last consumed" and
// are kept per partition for single consumers (string ids are hashed with
// XXH32) and for consumer groups. A consumer group's members are
// connections. Leaving, disconnecting (or going stale, see WithHeartbeat)
// and a change of the partition count deal all partitions round-robin over
// the members again; joining is server 0.8.0's cooperative rebalance:
// unowned partitions go to idle members, and each idle member is promised
// at most one partition of an over-assigned member as a pending
// revocation, which completes once the group committed what it polled from
// that partition (or never polled it), and otherwise after a timeout
// (WithRebalancing). Until then GetConsumerGroup lists the partition with
// its old owner, whose explicit polls it still serves. Like the server's,
// joins one after another leave a group unbalanced (4 partitions, 2
// members: 3 and 1) until a leave deals round-robin again.
//
// # Fidelity
//
// Implemented commands: Ping, GetStats, LoginUser,
// LoginWithPersonalAccessToken, LogoutUser, GetClusterMetadata (a single
// healthy leader, or the cluster given to WithCluster), GetMe, GetClient,
// GetClients, Get/List/Create/Delete/Update user, UpdatePermissions,
// ChangePassword, Get/Create/Delete personal access token (with expiry),
// Get/List/Create/Delete/Update/Purge stream and
// topic, Create/Delete partitions, SendMessages (balanced, partition id and
// messages-key partitioning: XXH32(key, 0) % partitions), PollMessages
// (offset, timestamp, first, last and next; auto-commit; single and group
// consumers), Store/Get/Delete consumer offset, and
// Get/List/Create/Delete/Join/Leave consumer group: every command of the
// v0.8.0 Go SDK. The remaining codes of the server (GetSnapshotFile,
// FlushUnsavedBuffer, DeleteSegments) and unknown codes are answered with
// status 3 (InvalidCommand).
//
// Every command but Ping and the logins needs a logged-in session (40,
// Unauthenticated) and then the permission server 0.8.0 requires for it
// (41, Unauthorized): the global flags, or the flags of the stream or
// topic addressed, with the server's inheritance (manage implies read,
// manage_streams implies manage_topics, read implies poll, and so on).
// Missing entities are reported before permissions are checked, as the
// server resolves first. Users, their permissions and their tokens are
// kept with the rest of the metadata (passwords and tokens only as
// salted hashes) and survive restarts with a data directory. Replies, empty-versus-error
// answers, status codes and validation follow the server's sources at tag
// server-0.8.0; where the server would desynchronise the stream (an
// oversized frame) the broker closes that connection instead.
//
// # Durability and cost
//
// By default everything lives in memory. WithDataDir keeps it in
// append-only files in which every byte is covered by a checksum (see
// WithDataDir for the crash semantics). Opening a directory never deletes
// acknowledged data: only a torn tail of the newest file of a log (a write
// a crash interrupted, never acknowledged) is cut off; any other damage,
// a changed byte, a missing or emptied segment, a missing meta.log,
// partition directory or offsets file, refuses the directory with a
// *DamageError naming the file and the byte offset. WithRepair (the
// iggy-embedded command's -repair flag) then moves the damaged files aside
// into DIR/damaged/<time>/, never deleting them, and keeps every intact
// message with its offset; lost offsets are never reused. A failed write
// (a full disk) is cut back, logged once with the file's path, and writes
// succeed again once there is room;
// messages are then read back from their segment files through a read
// cache of bounded size (WithCacheSize), so the broker's memory is set by
// the cache, not by the log. Retention follows the server: with
// WithMessageCleaner, sealed segments past the topic's message expiry, and
// the oldest segments of a topic at 90% of its maximum size, are deleted
// (WithSegmentSize sets the segment size). Each partition has its own
// lock, so producers and consumers of different partitions do not contend;
// a send costs one allocation for the request and no per-message
// allocation, and a poll is answered with one vectored write of
// sub-slices of stored batches.
//
// # Security and liveness
//
// WithTLS serves TLS from a certificate and key file (WriteSelfSignedCert
// makes a pair for tests). WithHeartbeat drops clients that stop pinging,
// as the server's heartbeat verifier does. WithLimits bounds what clients
// can make the broker hold, with defaults that keep it small: the number
// of connections and of connections not logged in (which must log in
// within a timeout and may only send small frames, refused before their
// payload is read), the size of a request frame, and the bytes of a poll
// reply (which stops at whole messages under the cap, so a reply's u32
// length never wraps).
//
// # Faults
//
// DropConnections, RefuseConnections, FailNext, DelayNext and Control let a
// test cut connections, refuse new ones, fail or delay chosen commands, or
// answer them itself, to prove that clients recover.
//
// # Options
//
// Option is an opaque interface made only by this package's With…
// functions (WithAddr, WithCredentials, WithLimits, …).
package iggytest
