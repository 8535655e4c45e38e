package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
)

// ErrBuildRetention is wrapped by the error of a table build that needs
// records the source's retention has removed (docs/design.md §19): at
// Open, when the connector can say where its partitions start
// (connector.StartOffsetter), else at the build's first read. The built
// table would miss their events.
var ErrBuildRetention = errors.New("strand: the log no longer holds the records a table build needs")

// StartsFunc returns, for every partition of source, the offset of its
// oldest retained record; ok is false when the source cannot tell (its
// connector is no connector.StartOffsetter).
type StartsFunc func(ctx context.Context, source string) (starts []uint64, ok bool, err error)

// checkRetention refuses the build of table from source when the source
// no longer holds records the build needs: in a partition not handed over,
// those from the build reader's checkpoint (from, 0 for a build starting)
// up to the main pipeline's. fresh says the build starts now (its
// reader's earlier checkpoint, if any, is dropped). Nothing is checked
// when starts is nil or cannot tell.
func (p *Program) checkRetention(ctx context.Context, db *state.DB, starts StartsFunc, table, source string, partitions uint32, fresh bool) error {
	if starts == nil {
		return nil
	}
	first, ok, err := starts(ctx, source)
	if err != nil {
		return strerr.Errorf("strand: topology %q: table %q: where the partitions of source %q start: %w", p.name, table, source, err)
	}
	if !ok {
		return nil
	}
	alias := state.BuildSourceName(table, source)
	for pt := range min(partitions, uint32(len(first))) {
		if !fresh {
			if _, handed, err := db.HandedOver(table, pt); err != nil {
				return strerr.Errorf("strand: topology %q: %w", p.name, err)
			} else if handed {
				continue
			}
		}
		from := uint64(0)
		if !fresh {
			if next, ok, err := db.Checkpoint(alias, pt); err != nil {
				return strerr.Errorf("strand: topology %q: %w", p.name, err)
			} else if ok {
				from = next
			}
		}
		upTo, _, err := db.Checkpoint(source, pt)
		if err != nil {
			return strerr.Errorf("strand: topology %q: %w", p.name, err)
		}
		if first[pt] > from && upTo > from {
			return fmt.Errorf("%w: topology %q: table %q is built from source %q, whose partition %d starts at offset %d: the build needs offsets %d to %d, which the source's retention removed; keep running the topology that wrote the store, or reset the store (strand reset -dir DIR) to rebuild every table from what the log holds",
				ErrBuildRetention, p.name, table, source, pt, first[pt], from, min(first[pt], upTo)-1)
		}
	}
	return nil
}
