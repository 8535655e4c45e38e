package stream

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// What a refused start says (docs/design.md §19). A state directory keeps a
// readable description of the topology that wrote it; a start of another
// topology is refused with a *TopologyChangedError that lists every
// difference and, for each, whether the stored rows keep their meaning.
// These types are defined here once; package topology and the runtime use
// them under the same names.

// ErrIncompatibleTopology is wrapped by the error of a start whose state
// directory was written by a topology with another fingerprint (a
// *TopologyChangedError).
var ErrIncompatibleTopology = errors.New("strand: incompatible topology")

// ChangeKind says how a part of a topology changed (docs/design.md §19).
type ChangeKind uint8

const (
	// ChangeAdded: the part is new.
	ChangeAdded ChangeKind = iota + 1
	// ChangeRemoved: the part is gone.
	ChangeRemoved
	// ChangeModified: the part is there before and after, declared
	// differently.
	ChangeModified
)

// String returns "added", "removed" or "changed".
func (k ChangeKind) String() string {
	switch k {
	case ChangeAdded:
		return "added"
	case ChangeRemoved:
		return "removed"
	case ChangeModified:
		return "changed"
	}
	return "change(" + strconv.Itoa(int(k)) + ")"
}

// Safety says what a change means for the rows a store holds.
type Safety uint8

const (
	// Safe: every row the store holds keeps its meaning; what the change
	// adds is new (a new table is built from the log, a new step publishes
	// for the events read after it was added).
	Safe Safety = iota + 1
	// NeedsRebuild: the rows of the tables the change names are no longer
	// what the new topology folds; they must be rebuilt from the log.
	NeedsRebuild
)

// String returns "safe" or "needs a rebuild".
func (s Safety) String() string {
	switch s {
	case Safe:
		return "safe"
	case NeedsRebuild:
		return "needs a rebuild"
	}
	return "safety(" + strconv.Itoa(int(s)) + ")"
}

// Change is one difference between the topology that wrote a store and the
// one being started.
type Change struct {
	// Kind says whether the part was added, removed or changed.
	Kind ChangeKind
	// Subject names the part: `table "balances"`, `source "bank/accounts"`,
	// `projection of type tag 2 on source "bank/accounts" into table
	// "balances"`, `step "receipts"`, `topology name`.
	Subject string
	// Was and Now describe the part before and after ("" when it did not
	// exist).
	Was, Now string
	// Safety says whether stored rows keep their meaning.
	Safety Safety
	// Rebuild names the tables whose rows must be rebuilt (NeedsRebuild).
	Rebuild []string
	// Why explains the safety in a sentence.
	Why string
}

// String is one line of a refusal: what changed, whether it is safe, why.
func (c Change) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", c.Kind, c.Subject)
	switch {
	case c.Was != "" && c.Now != "":
		fmt.Fprintf(&b, " (was %s, now %s)", c.Was, c.Now)
	case c.Now != "":
		fmt.Fprintf(&b, " (%s)", c.Now)
	case c.Was != "":
		fmt.Fprintf(&b, " (was %s)", c.Was)
	}
	fmt.Fprintf(&b, ": %s", c.Safety)
	if len(c.Rebuild) > 0 {
		fmt.Fprintf(&b, " of table %s", quoteNames(c.Rebuild))
	}
	if c.Why != "" {
		b.WriteString(": " + c.Why)
	}
	return b.String()
}

func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// TopologyChangedError is the error a start returns (wrapped, from
// topology.Open) for a state directory written by another topology:
// errors.As finds it, errors.Is matches ErrIncompatibleTopology. Changes
// lists the differences; its message says what to do (strand reset, or
// topology.Reset).
type TopologyChangedError struct {
	// Dir is the state directory; Topology the name of the topology being
	// started.
	Dir, Topology string
	// Stored and Now are the two fingerprints.
	Stored, Now []byte
	// Described is false for a store written before descriptions were
	// kept: the differences are unknown and Changes is empty.
	Described bool
	// Changes lists the differences, tables first.
	Changes []Change
	// InPlace says why the changes cannot be made while the store is kept
	// (tables built in the background, docs/design.md §19); "" when that
	// was not tried.
	InPlace string
}

// Error lists the differences and what to do.
func (e *TopologyChangedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "strand: topology %q: %s: the state directory %s was written by another topology (fingerprint %x, the topology being started has %x)",
		e.Topology, strings.TrimPrefix(ErrIncompatibleTopology.Error(), "strand: "), e.Dir, short(e.Stored), short(e.Now))
	if !e.Described {
		b.WriteString("; the store was written before strand kept a description of its topology, so what changed is unknown")
	} else {
		fmt.Fprintf(&b, "; %d change(s):", len(e.Changes))
		for _, c := range e.Changes {
			b.WriteString("\n  - " + c.String())
		}
		if rb := e.RebuildTables(); len(rb) > 0 {
			fmt.Fprintf(&b, "\ntables to rebuild: %s", quoteNames(rb))
		}
	}
	if e.InPlace != "" {
		fmt.Fprintf(&b, "\nnot made in place: %s", e.InPlace)
	}
	fmt.Fprintf(&b, "\nwhat to do: stop every App of the directory, run `strand reset -dir %s` (or topology.Reset; add -dry-run to see what it does first), and start the new topology: every table is rebuilt from the log, and nothing published before (To, KeyBy, dead letters) is published again; or go back to the topology that wrote the store", e.Dir)
	return b.String()
}

// Unwrap returns ErrIncompatibleTopology.
func (e *TopologyChangedError) Unwrap() error { return ErrIncompatibleTopology }

// RebuildTables returns the tables the changes need rebuilt, sorted.
func (e *TopologyChangedError) RebuildTables() []string {
	var out []string
	for _, c := range e.Changes {
		for _, t := range c.Rebuild {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	return out
}

func short(fp []byte) []byte {
	if len(fp) > 6 {
		return fp[:6]
	}
	return fp
}
