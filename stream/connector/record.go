package connector

import "context"

// Record is one message of a source partition as the executor sees it: its
// position, its parsed strand headers and its still-encoded payload.
type Record struct {
	// Partition and Offset say where the record is in its source.
	Partition uint32
	Offset    uint64
	// Timestamp is the broker's append time in microseconds since the Unix
	// epoch, or 0 when unknown.
	Timestamp uint64
	// Headers are the parsed strand headers; zero when HeaderErr is set.
	Headers Headers
	// HeaderErr is non-nil when the message's strand headers were missing
	// or malformed. Such a record is still delivered, never dropped: the
	// processor dead-letters it.
	HeaderErr error
	// Payload is the encoded event body.
	Payload []byte
	// Raw is set on every record of a foreign source (ForeignConnector)
	// and nil on records of strand sources: the message's id and user
	// headers as the broker delivered them. The source's classifier reads
	// them, and a dead letter of the record keeps them, so that a replay
	// writes the message back as it was.
	Raw *RawMessage
}

// Source is a partitioned, append-only log that a processor reads. strand's
// core does not know any broker: connectors/iggy implements Source for an
// Iggy topic, and package memconn implements it in memory.
type Source interface {
	// Name identifies the log (for Iggy, "stream/topic"). It is part of the
	// checkpoint keys, so it must be stable across restarts.
	Name() string
	// Partitions returns the number of partitions, numbered 0..n-1.
	Partitions(ctx context.Context) (uint32, error)
	// Open returns a reader of one partition positioned so that its first
	// record has offset from (the processor's checkpoint, never the
	// broker's stored offset).
	Open(ctx context.Context, partition uint32, from uint64) (PartitionReader, error)
}

// PartitionReader reads one partition in offset order.
type PartitionReader interface {
	// Poll waits until at least one record is available or ctx is done,
	// and returns at most max records, contiguous in offset order, starting
	// where the previous Poll ended. It retries transient failures itself
	// (reconnecting as needed) and returns an error only when ctx is done or
	// the failure is permanent. The returned records and their bytes belong
	// to the caller and are never reused by the reader.
	Poll(ctx context.Context, max int) ([]Record, error)
	// Advise tells the broker that every record before next has been
	// processed and committed by strand. It is for monitoring tools only:
	// strand resumes from its own checkpoint.
	Advise(ctx context.Context, next uint64) error
	// Close releases the reader.
	Close() error
}

// Message is one message strand publishes itself: a dead letter or an
// outbox entry.
type Message struct {
	// Key is used for key partitioning on the destination (1..255 bytes).
	Key []byte
	// ID, when non-zero, is the message id, so a re-send of the same
	// message carries the same id.
	ID [16]byte
	// Headers are written as raw-valued user headers.
	Headers []Field
	// Payload is the message body.
	Payload []byte
	// Partition, when HasPartition is set, is the destination partition,
	// instead of the one the destination's partitioning picks for Key: a
	// replayed foreign record goes back to the partition its producer
	// chose.
	Partition    uint32
	HasPartition bool
}

// Sink is a destination strand publishes to (a dead-letter topic, an output
// topic). connectors/iggy implements it. Send (and SentChecker's Sent) may
// be called concurrently: the runtime publishes each source partition's
// rows from a goroutine of its own, keeping their order per partition.
type Sink interface {
	// Send publishes msgs in order and returns nil only when all of them
	// were accepted by the broker. On error, any prefix may have been sent.
	Send(ctx context.Context, msgs []Message) error
}

// SentChecker is implemented by sinks that can tell which messages are
// already published, by their Message.ID. The runtime uses it before
// sending dead letters that an earlier run or a failed Send may have
// published, so that a crash never duplicates a dead letter.
// connectors/iggy's Sink implements it.
type SentChecker interface {
	// Sent reports, for each message of msgs (all with a non-zero ID), whether
	// a message with its ID is already in the destination. It must not
	// report true for a message that is not there; a false for a message
	// that is there leads to a duplicate.
	Sent(ctx context.Context, msgs []Message) ([]bool, error)
}

// Connector opens the topics a topology reads and the ones it writes (its
// dead-letter topic), by name ("stream/topic" for Iggy). The front door
// (package topology) takes one; connectors/iggy's Client is one, and
// package memconn has one in memory.
type Connector interface {
	// OpenSource returns the source named topic, which must exist.
	OpenSource(ctx context.Context, topic string) (Source, error)
	// OpenSink returns a sink publishing to topic, creating the topic with
	// the given partition count if it does not exist. The returned sink
	// should also implement SentChecker, or dead letters may be published
	// twice after a crash.
	OpenSink(ctx context.Context, topic string, partitions uint32) (Sink, error)
}
