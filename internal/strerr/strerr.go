// Package strerr makes the errors strand returns start with one prefix,
// "strand: " (docs/design.md §1, "error"). An error made inside strand
// carries the prefix from where it is made; a wrapper made with Errorf adds
// its context in front and the prefix once, so a chain never reads
// "strand: open: strand: …". errors.Is and errors.As see through it as
// through fmt.Errorf.
//
// The rewrite in .ci/restyle turns fmt.Errorf("strand: …%w…") into
// strerr.Errorf; nothing else needs to call it.
package strerr

import (
	"fmt"
	"strings"
)

// Prefix starts every error strand returns.
const Prefix = "strand: "

// Errorf is fmt.Errorf whose message has the prefixes inside each wrapped
// error (an argument of a %w verb, or of %v or %s when it is an error)
// removed, so that Prefix appears once, at the start of the chain, when
// format starts with it.
func Errorf(format string, args ...any) error {
	wrapped := fmt.Errorf(format, args...)
	trimmed := make([]any, len(args))
	changed := false
	for i, a := range args {
		trimmed[i] = a
		if err, ok := a.(error); ok && err != nil {
			if msg := err.Error(); strings.Contains(msg, Prefix) {
				trimmed[i] = text(strings.ReplaceAll(msg, Prefix, ""))
				changed = true
			}
		}
	}
	if !changed {
		return wrapped
	}
	msg := fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), trimmed...)
	return &chain{msg: msg, wrapped: wrapped}
}

// text prints as itself under %v and %s.
type text string

func (t text) String() string { return string(t) }

// chain is an error with the message of Errorf and the unwrapping of the
// fmt.Errorf it was made from.
type chain struct {
	msg     string
	wrapped error
}

func (c *chain) Error() string { return c.msg }

// Unwrap returns what fmt.Errorf would have wrapped.
func (c *chain) Unwrap() []error {
	switch u := c.wrapped.(type) {
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	}
	return nil
}
