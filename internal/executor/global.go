package executor

import (
	"errors"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
)

// AttachSome is Attach for the tables whose names keep accepts alone: an
// App in a group keeps its global tables in a store of their own
// (docs/design.md §20), so each of its two stores holds a part of the
// program's tables. Both stores keep the program's fingerprint.
func (p *Program) AttachSome(db *state.DB, keep func(table string) bool) error {
	if keep == nil {
		return p.Attach(db)
	}
	if err := p.ensureTopology(db); err != nil {
		return err
	}
	var some []state.Attacher
	for _, t := range p.tables {
		if keep(t.Name()) {
			some = append(some, t)
		}
	}
	if err := db.Attach(some...); err != nil {
		return strerr.Errorf("strand: topology %q: attach tables: %w", p.name, err)
	}
	return nil
}

// ensureTopology checks the program's fingerprint against db's (see
// Attach).
func (p *Program) ensureTopology(db *state.DB) error {
	if err := db.EnsureTopology(p.fingerprint, p.legacyFingerprint, p.description); err != nil {
		var ie *state.IncompatibleError
		if errors.As(err, &ie) {
			return p.changedError(ie)
		}
		return strerr.Errorf("strand: topology %q: %w", p.name, err)
	}
	return nil
}
