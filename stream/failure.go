package stream

import (
	"errors"
	"fmt"
)

// PoisonPolicy says what happens to the later events of a key after one of
// its events turned out to be poison (bad strand headers, an unknown type
// tag, an undecodable payload or key). The poison event itself is never
// applied and always dead-lettered.
type PoisonPolicy uint8

const (
	// PassPoison lets the key's later events go on as if the poison event
	// had not been in the log. It is the default: the poison event could
	// never have applied, so skipping it is what any retry would do too.
	PassPoison PoisonPolicy = iota
	// BlockPoisonedKey parks every later event of the key durably, behind
	// the poison event: the key is blocked until App.Unblock is called
	// for it (after the dead letter was dealt with). Other keys go on.
	BlockPoisonedKey
)

// String returns "pass" or "block".
func (p PoisonPolicy) String() string {
	switch p {
	case PassPoison:
		return "pass"
	case BlockPoisonedKey:
		return "block"
	}
	return fmt.Sprintf("PoisonPolicy(%d)", uint8(p))
}

// ErrPermanent is wrapped by errors a handler marks with Permanent.
var ErrPermanent = errors.New("strand: permanent failure")

// Permanent marks a handler error as permanent: retrying cannot help (the
// event is invalid for the business). The executor dead-letters the failing
// run's unapplied events and goes on with the key's later events, instead
// of parking the key. errors.Is(Permanent(err), ErrPermanent) is true, and
// errors.Is(Permanent(err), err) too.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e permanentError) Unwrap() []error {
	return []error{ErrPermanent, e.err}
}
