package stream

import "github.com/strand-io/strand/stream/connector"

// Envelope is one event ready to publish: its strand headers and its encoded
// payload.
type Envelope struct {
	Headers connector.Headers
	Payload []byte
}

// Encoder turns events of type E into envelopes. Every event declaration
// implements it, so a publisher can take the same declaration a topology
// consumes.
type Encoder[E any] interface {
	Envelope(e E) (Envelope, error)
}
