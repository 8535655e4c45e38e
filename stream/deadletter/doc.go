// Package deadletter is the format of strand's dead letters: the events a
// topology refused or gave up on, published to its dead-letter topic
// exactly once, each with why (Reason) and where it came from.
//
// Letter.Message is the message a dead letter is published as (the original
// payload and strand headers, plus the headers named Header*), and Parse
// reads one back, as a consumer of a dead-letter topic or the strand
// command's dlq list and replay do (docs/design.md §5 and §8).
package deadletter
