package stream

import (
	"errors"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// Foreign input (docs/design.md, "Foreign input"): a source whose producers
// write no strand headers. Its connector delivers each message with its raw
// user headers (connector.Record.Raw); before anything reads a record's headers, the
// runtime hands the message to the source's classifier, which gives its key,
// type tag and, optionally, its fence and sequence number. From there on a
// foreign record is planned, re-sequenced, applied and dead-lettered like
// any other.

// ErrUnclassified is wrapped by the error of a record of a foreign source
// that its classifier could not classify: the classifier returned an error
// or panicked, or the key it gave encodes to 0 or more than connector.MaxKeyLen
// bytes, or the fence it gave is not valid. Such a record is dead-lettered
// with ReasonUnclassified.
var ErrUnclassified = errors.New("strand: foreign record not classified")

// ForeignMessage is one message of a foreign source as its classifier sees
// it. Headers and Payload alias the record's bytes: the classifier must not
// modify them, nor keep them past its return.
type ForeignMessage struct {
	// Partition and Offset say where the message is in its source.
	Partition uint32
	Offset    uint64
	// Timestamp is the broker's append time in microseconds since the Unix
	// epoch, or 0 when unknown.
	Timestamp uint64
	// ID is the broker's message id, or zero when unknown.
	ID [16]byte
	// Headers are the message's user headers as the producer wrote them.
	Headers []connector.Field
	// Payload is the message body.
	Payload []byte
}

// Header returns the value of the first header named name, and false when
// the message has none.
func (m *ForeignMessage) Header(name string) ([]byte, bool) {
	for i := range m.Headers {
		if m.Headers[i].Name == name {
			return m.Headers[i].Value, true
		}
	}
	return nil, false
}

// Classified is what a classifier says of a foreign message: what the
// strand headers of a strand publisher's message would have said.
type Classified[K any] struct {
	// Key is the message's key: the events of one key keep their order,
	// are folded into its table rows and handed to handlers with it. The
	// source's key codec encodes it, to 1..MaxKeyLen bytes. It is the
	// record's key whatever the decoded event's own key (its Key method, or
	// DeclareFunc's function) is: that one is not consulted, so a key may
	// be anything the message tells (its partition, for a topic that is
	// not keyed, to be re-keyed with topology.KeyBy).
	Key K
	// Tag names the event type: the tag of a declaration the topology
	// handles on the source, or one it skips. Another tag makes the record
	// a dead letter (ReasonUnknownType).
	Tag planner.Tag
	// Ordering is the event's fence, for types declared with FenceBy; 0
	// means Relaxed. A type with a static fence is planned with its
	// declaration's fence whatever Ordering says, as for strand records.
	Ordering planner.Ordering
	// Seq is the producer's sequence number of the event within its key
	// (the strand-seq header of a strand publisher), for re-sequenced
	// sources; 0 means none.
	Seq uint64
}
