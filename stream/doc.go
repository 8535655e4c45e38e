// Package stream is strand's vocabulary: what a publisher, a connector and
// a topology agree on, and nothing that stores state (a service that only
// publishes links no storage).
//
//   - Declarations: Declare and DeclareFunc name an event type by its type
//     tag, its key, its fence (Fence, FenceBy) and its algebra (Reduce).
//     The same declaration encodes events for publishing (Envelope) and
//     decodes them for the topology that consumes them.
//   - Codecs: JSON (the default), Binary, CodecFunc, and the key codecs.
//   - Headers: the strand headers every message carries (docs/design.md
//     §5), from which a batch is planned without decoding its payloads.
//   - Connector interfaces: Source and PartitionReader (what a topology
//     reads), Sink and SentChecker (what it publishes dead letters to),
//     Connector (opens both by topic name). connectors/iggy implements them.
//   - Foreign input (docs/design.md, "Foreign input"): ForeignMessage,
//     Classified and RawMessage, for topics whose producers write no strand
//     headers, read through a ForeignConnector.
//   - What a runtime reports: DeadLetter and Reason, PartitionError, Stats.
//
// Package topology builds and runs topologies from these declarations.
package stream
