// Package stream is the vocabulary a service writes its events in: what a
// publisher and a topology agree on, and nothing that stores state (a
// service that only publishes links no storage).
//
//   - Declarations: Declare and DeclareFunc name an event type by its type
//     tag, its key, its fence (Fence, FenceBy), its algebra (Reduce) and,
//     for producers that may deliver out of order, its sequence number
//     (Sequence). The same declaration encodes events for publishing
//     (Envelope) and decodes them for the topology that consumes them.
//     Rekey declares the same events under another key (topology.KeyBy).
//   - Codecs: JSON (the default), Binary, CodecFunc, and the key codecs.
//   - Failures: Permanent marks a handler's error as not worth retrying;
//     PoisonPolicy says what happens to a key's later events.
//   - The re-sequencer's policies (GapPolicy, DuplicatePolicy, SeqStart)
//     and what it reports (GapNotice, HeldRecord; docs/design.md §10).
//   - Foreign input (docs/design.md §14): ForeignMessage and Classified,
//     what a classifier of a topic strand did not publish reads and says.
//   - What a running topology reports: Stats and PartitionError.
//
// Two packages below it hold what a service rarely names: package connector
// is what a connector implements (Source, Sink, Connector, Group) and the
// strand headers every message carries; package deadletter is the format of
// the dead letters a topology publishes and the reasons they give. Package
// topology builds and runs topologies from these declarations.
//
// # Options
//
// Option, the options of Declare, is an opaque interface made only by
// this package's With… functions (WithFence, WithFenceBy, WithReduce,
// WithPayload, WithKeyCodec, WithSequence); a mistyped or repeated one
// makes the declaration's Err, never a panic.
package stream
