package topologytest

import (
	"slices"

	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// PipeForeign appends m, a message written by a producer that knows
// nothing of strand, to partition m.Partition of source, which the topology
// declared with topology.ForeignSource; the driver assigns the offset,
// which it returns, and the timestamp (m.Offset and m.Timestamp are
// ignored). Its headers are checked as Iggy checks user headers: names and
// values of 1..255 bytes, valid kinds. A source that is not foreign, a
// partition the source does not have, or a bad header fails the test.
func (d *Driver) PipeForeign(source string, m stream.ForeignMessage) uint64 {
	d.tb.Helper()
	if !d.prog.Foreign(source) {
		d.tb.Fatalf("topologytest.PipeForeign: source %q is not foreign (topology.ForeignSource)", source)
	}
	for i, f := range m.Headers {
		if len(f.Name) == 0 || len(f.Name) > 255 || len(f.Value) == 0 || len(f.Value) > 255 || !f.NameKind.Valid() || !f.ValueKind.Valid() {
			d.tb.Fatalf("topologytest.PipeForeign: header %d (%q, %d bytes, kinds %s/%s): want names and values of 1..255 bytes and valid kinds",
				i, f.Name, len(f.Value), f.NameKind, f.ValueKind)
		}
	}
	raw := (&connector.RawMessage{ID: m.ID, Headers: m.Headers}).Clone()
	if raw.Headers == nil {
		raw.Headers = []connector.Field{}
	}
	return d.PipeRecord(source, connector.Record{Partition: m.Partition, Payload: slices.Clone(m.Payload), Raw: raw})
}

// PartitionOf returns the partition a producer using Iggy's messages-key
// partitioning puts a message with key into: XXH32(key, 0) % partitions,
// over the driver's partition count.
func (d *Driver) PartitionOf(key []byte) uint32 { return xxh32.Partition(key, d.parts) }
