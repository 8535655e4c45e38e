package connector

import "context"

// Identifier is implemented by a Source that can tell two incarnations of
// its topic apart: a topic deleted and created again under the same name
// (with the same partition count, even with more records than before) is
// another log, and state built from the old one does not describe it.
//
// The front door stores a source's identity in the state directory on the
// first start and refuses a later start whose source answers another one;
// a running App asks again with its end offsets (connector.EndOffsetter)
// and stops with an error when the answer changes (docs/design.md, "When
// the log or the store changes"). connectors/iggy's Source answers the
// topic's id and creation time; memconn's in-memory topics answer a
// name made when the topic is.
type Identifier interface {
	// Identity returns a string that stays the same as long as the topic
	// exists and differs for any topic created later under the same name.
	// It is compared, never parsed; it must be 1..255 bytes. A missing
	// topic is an error.
	Identity(ctx context.Context) (string, error)
}
