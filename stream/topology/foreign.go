package topology

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// ForeignOption configures a foreign source (ForeignSource). An invalid
// option is refused by Build, with an error naming it.
type ForeignOption interface {
	apply(*foreignOptions) error
}

// foreignOptionFunc adapts a function to ForeignOption.
type foreignOptionFunc func(*foreignOptions) error

func (f foreignOptionFunc) apply(c *foreignOptions) error { return f(c) }

type foreignOptions struct {
	keys any // stream.Codec[K]
}

// WithForeignKeys sets the codec that encodes the keys the classifier gives;
// the default is stream.DefaultKeyCodec[K](). It must be the key codec of
// the source's declarations (stream.WithKeyCodec), which Build checks.
func WithForeignKeys[K any](c stream.Codec[K]) ForeignOption {
	return foreignOptionFunc(func(o *foreignOptions) error {
		if c == nil {
			return errors.New("strand: topology.WithForeignKeys: nil codec")
		}
		o.keys = c
		return nil
	})
}

// ForeignSource adds the source named name, a topic written by producers
// that know nothing of strand: plain messages, JSON or any payload, without
// strand headers (docs/design.md, "Foreign input"). classify tells, for each
// message (its partition, offset, timestamp, id, user headers and payload),
// its key, its type tag and optionally its fence and sequence number: what
// a strand publisher's headers would have said. It runs for every record
// before anything is planned, on the partition's goroutine (or, for large
// batches, on several), and must be a pure function of the message: it
// runs again for records read again after a restart.
//
// Everything else is as for Source: the returned node takes On, Project
// and ForEach with declarations whose tags classify returns, Skip for tags
// to ignore, and Resequence (with Classified.Seq). A message classify
// cannot classify (an error, a panic, a key that encodes to 0 or more than
// 255 bytes, an invalid fence) is dead-lettered with
// deadletter.ReasonUnclassified; an unknown tag is deadletter.ReasonUnknownType, as
// for any source. Dead letters of a foreign source keep the message's own
// headers, and `strand dlq replay` writes them back unchanged to the
// partition the message was read from.
//
// A record is processed in the partition its producer wrote it to: per-key
// order, and one table row per key, hold when the producer puts all the
// events of a key into one partition (for instance Iggy's messages-key
// partitioning on anything the key is a function of), or the topic has a
// single partition.
//
// The connector must implement connector.ForeignConnector (connectors/iggy's
// Client and topologytest's driver do); Open refuses one that does not.
// That the source is foreign is part of the topology's fingerprint. A name
// already declared, foreign or not, is refused by Build.
func ForeignSource[K any](t *Topology, name string, classify func(stream.ForeignMessage) (stream.Classified[K], error), opts ...ForeignOption) *SourceNode[K] {
	for i := range t.sources {
		if t.sources[i].name == name {
			t.errs = append(t.errs, fmt.Errorf("source %q declared twice (ForeignSource)", name))
			return &SourceNode[K]{t: t, idx: i}
		}
	}
	var o foreignOptions
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(&o); err != nil {
			t.errs = append(t.errs, fmt.Errorf("source %q: %w", name, err))
		}
	}
	var keys stream.Codec[K]
	if o.keys != nil {
		c, ok := o.keys.(stream.Codec[K])
		if !ok {
			t.errs = append(t.errs, fmt.Errorf("source %q: topology.WithForeignKeys codec %T does not encode key type %s",
				name, o.keys, reflect.TypeFor[K]()))
		}
		keys = c
	} else {
		c, err := stream.DefaultKeyCodec[K]()
		if err != nil {
			t.errs = append(t.errs, fmt.Errorf("source %q: %w", name, err))
		}
		keys = c
	}
	if classify == nil {
		t.errs = append(t.errs, fmt.Errorf("source %q: ForeignSource with a nil classifier", name))
	}
	s := Source[K](t, name)
	t.sources[s.idx].foreign = executor.NewForeign(classify, keys)
	return s
}

// openSource opens the source named name: with OpenForeignSource when the
// topology declared it foreign.
func (p *Program) openSource(ctx context.Context, conn connector.Connector, name string) (connector.Source, error) {
	if !p.p.Foreign(name) {
		return conn.OpenSource(ctx, name)
	}
	fc, ok := conn.(connector.ForeignConnector)
	if !ok {
		return nil, fmt.Errorf("the source is foreign (topology.ForeignSource) and the connector %T cannot read foreign topics (connector.ForeignConnector)", conn)
	}
	return fc.OpenForeignSource(ctx, name)
}

// Foreign reports whether the topology's source named source was declared
// with ForeignSource.
func (p *Program) Foreign(source string) bool { return p.p.Foreign(source) }
