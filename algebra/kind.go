package algebra

import "fmt"

// Kind is the law a run of one event type promises. It decides how the run
// may be reduced before its handler sees it. The wire values are fixed: they
// travel in every message's strand-props header.
type Kind uint8

const (
	// NonAssociative promises nothing: the run is applied as it is.
	NonAssociative Kind = 0
	// Associative lets the whole run fold into one event with a combine
	// function.
	Associative Kind = 1
	// Idempotent lets adjacent equal events collapse into one.
	Idempotent Kind = 2
	// Commutative lets the events of the run be applied in any order; it
	// reduces nothing.
	Commutative Kind = 3
	// IdempotentCommutative lets duplicates anywhere in the run collapse.
	IdempotentCommutative Kind = 4
)

// Valid reports whether k is one of the five defined kinds.
func (k Kind) Valid() bool { return k <= IdempotentCommutative }

// String returns the kind's name, or "Kind(n)" for an invalid value.
func (k Kind) String() string {
	switch k {
	case NonAssociative:
		return "NonAssociative"
	case Associative:
		return "Associative"
	case Idempotent:
		return "Idempotent"
	case Commutative:
		return "Commutative"
	case IdempotentCommutative:
		return "IdempotentCommutative"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}
