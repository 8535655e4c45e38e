// Package archtest holds the tests of strand's architecture: which
// package may import which (docs/design.md §4). It has no code of its own.
package archtest
