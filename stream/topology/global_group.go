package topology

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
)

// Global tables in a group (docs/design.md §20): every instance of a group
// keeps the whole of every global table in a store of its own, the
// subdirectory GlobalStoreDir of its state directory, read and committed
// by its global sources' pipelines over all their partitions, whatever
// partitions the group gives the instance. That store is never logged to
// the changelog, restored, dropped or snapshotted with the partitions the
// instance gains and loses, so its rows and checkpoints stay the instance's
// own across ownership moves and restarts. The folds of the partitions an
// instance serves start only once its global tables caught up to the ends
// of their topics observed when the partitions were assigned (waitGlobal).

// GlobalStoreDir is the subdirectory of an App's state directory that
// holds its global tables and their sources' checkpoints when the App is
// an instance of a group (WithGroup) and its topology has a global source
// (SourceNode.Global). Outside a group the global tables live in the main
// store.
const GlobalStoreDir = "global"

// globalTick is how often waitGlobal looks at the global checkpoints.
const globalTick = 5 * time.Millisecond

// openGlobalStore opens the store of the global tables of an App in a
// group, in dir/GlobalStoreDir, with the main store's options.
func (a *App) openGlobalStore(dir string, opts []state.Option) error {
	gdb, err := state.Open(filepath.Join(dir, GlobalStoreDir), opts...)
	if err != nil {
		return fmt.Errorf("the store of the global tables: %w", lockHint(filepath.Join(dir, GlobalStoreDir), err))
	}
	a.gdb = gdb
	return nil
}

// attach binds the program's tables to the App's stores: all to the main
// store, or, with a store of global tables, the global tables to it and
// the others to the main store.
func (a *App) attach() error {
	if a.gdb == nil {
		return a.prog.p.Attach(a.db)
	}
	if err := a.prog.p.AttachSome(a.db, a.storeTables(a.db)); err != nil {
		return err
	}
	return a.prog.p.AttachSome(a.gdb, a.storeTables(a.gdb))
}

// storeTables says which tables db holds (pipeline.WithStoreTables): nil
// (all) without a store of global tables.
func (a *App) storeTables(db *state.DB) func(table string) bool {
	if a.gdb == nil {
		return nil
	}
	global := db == a.gdb
	return func(name string) bool { tn, ok := a.prog.tables[name]; return ok && tn.global == global }
}

// storeOf returns the store that holds source's checkpoints and rows.
func (a *App) storeOf(source string) *state.DB {
	if a.gdb != nil && a.prog.global[source] {
		return a.gdb
	}
	return a.db
}

// noteEnds remembers which global sources can report their ends
// (waitGlobal).
func (a *App) noteEnds(sources []connector.Source) {
	a.reportsEnds = map[string]bool{}
	for _, src := range sources {
		if _, ok := src.(connector.EndOffsetter); ok && a.prog.global[src.Name()] {
			a.reportsEnds[src.Name()] = true
		}
	}
}

// startGlobal starts the processors of the global sources over all their
// partitions; one that fails calls fail. wait waits for them to return and
// gives their errors.
func (a *App) startGlobal(ctx context.Context, fail context.CancelFunc) (wait func() error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, proc := range a.procs {
		if !a.prog.global[proc.Source()] {
			continue
		}
		wg.Go(func() {
			if err := proc.Run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				fail()
			}
		})
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// waitGlobal waits until every global source's committed checkpoints have
// reached the ends of its partitions as they are when it is called (a
// source that cannot report its ends, not a connector.EndOffsetter, is not
// waited for). It returns ctx's error when ctx ends first.
func (a *App) waitGlobal(ctx context.Context) error {
	if len(a.prog.global) == 0 {
		return nil
	}
	tick := time.NewTicker(globalTick)
	defer tick.Stop()
	wait := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			return nil
		}
	}
	for _, proc := range a.procs {
		name := proc.Source()
		if !a.prog.global[name] {
			continue
		}
		var ends []uint64
		for {
			var err error
			if ends, err = proc.EndOffsets(ctx); err == nil {
				break
			}
			if !a.reportsEnds[name] {
				ends = nil
				break
			}
			if werr := wait(); werr != nil {
				return fmt.Errorf("global source %q: %w (end offsets: %w)", name, werr, err)
			}
		}
		db := a.storeOf(name)
		for pt, end := range ends {
			for {
				next, _, err := db.Checkpoint(name, uint32(pt))
				if err != nil {
					return fmt.Errorf("global source %q: %w", name, err)
				}
				if next >= end {
					break
				}
				if err := wait(); err != nil {
					return fmt.Errorf("global source %q partition %d at %d of %d: %w", name, pt, next, end, err)
				}
			}
		}
	}
	return nil
}

// groupSources returns the sources whose partitions the group shares: all
// but the global ones.
func (a *App) groupSources() []string {
	var out []string
	for _, sn := range a.prog.Sources() {
		if !a.prog.global[sn] {
			out = append(out, sn)
		}
	}
	return out
}
