package topology

import (
	"context"
	"errors"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/pipeline"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// Changing a topology on its store (docs/design.md §19). Open of a
// topology that differs from the one that wrote its state directory makes
// the changes in place when it can: a table added is built from the log in
// the background, a table declared with a new version (WithTableVersion)
// or whose projections changed is rebuilt beside its old rows, which
// queries are answered from until the rebuild has caught up and the table
// switches to the new rows in one commit; a table removed has its rows
// dropped. Everything else keeps running and serving meanwhile.

// ErrTableBuilding is wrapped by the reads (Get, Scan, queries) of a table
// new to its topology while it is built from the log: retry later
// (App.Builds reports the progress). A table rebuilt for a new version
// answers from its old rows meanwhile instead.
var ErrTableBuilding = state.ErrTableBuilding

// BuildProgress is the progress of one table built in the background.
type BuildProgress = stream.BuildStats

// ErrBuildRetention is wrapped by the error Run returns when a table
// build needs records the source's retention has removed.
var ErrBuildRetention = pipeline.ErrBuildRetention

// Builds returns the progress of the tables built in the background since
// Open, finished ones included (Done).
func (a *App) Builds() []BuildProgress { return a.evo.Progress() }

// attachEvolving attaches the program to the store: in place of a refusal, the
// changes that can be made in place are (executor.Program.AttachEvolving),
// except for an instance of a group or of some partitions only, where
// every instance would have to build its part at once.
func (a *App) attachEvolving(ctx context.Context, o *openOptions, counts map[string]uint32, sources []connector.Source) error {
	if o.inPlaceOff || o.group != nil || len(o.partitions) > 0 || a.gdb != nil {
		err := a.attach() // global_group.go
		var te *TopologyChangedError
		if errors.As(err, &te) && te.InPlace == "" {
			te.InPlace = notInPlace(o)
		}
		return err
	}
	ev, err := a.prog.p.AttachEvolvingChecked(ctx, a.db, counts, startsOf(sources))
	if err != nil {
		return err
	}
	for _, name := range ev.Dropped() {
		a.log.Info("strand: table no longer in the topology dropped", "table", name)
	}
	for _, bp := range ev.Progress() {
		a.log.Info("strand: table being built in the background", "table", bp.Table, "source", bp.Source,
			"replacing", bp.Replacing, "partitions left", bp.Left)
	}
	a.evo = ev
	return nil
}

// notInPlace says why Open did not try to make a topology's changes in
// place (TopologyChangedError.InPlace), and what to do instead.
func notInPlace(o *openOptions) string {
	switch {
	case o.inPlaceOff:
		return "topology.WithInPlaceChanges(false) was given"
	case o.group != nil:
		return "an instance of a group (topology.WithGroup) does not build tables in the background yet (each owner would build its partitions, and a build's progress would have to move with a partition to its next owner: docs/design.md §19); give every instance a new state directory, where each rebuilds the tables of its partitions from the log"
	default:
		return "an App of some partitions only (topology.WithPartitions) does not build tables in the background yet; stop it, reset its store (strand reset -dir DIR) and start the new topology"
	}
}

// startsOf tells a build where the partitions of a source start, when its
// connector can say (connector.StartOffsetter): a build whose records the
// source's retention removed is refused at Open, before it starts.
func startsOf(sources []connector.Source) executor.StartsFunc {
	return func(ctx context.Context, name string) ([]uint64, bool, error) {
		for _, src := range sources {
			if src.Name() != name {
				continue
			}
			so, ok := src.(connector.StartOffsetter)
			if !ok {
				return nil, false, nil
			}
			starts, err := so.StartOffsets(ctx)
			return starts, err == nil, err
		}
		return nil, false, nil
	}
}

// WithInPlaceChanges says whether Open makes the changes of a topology in
// place on a state directory written by another one (the default, true):
// tables added are built in the background, tables with a new version
// rebuilt beside their old rows, removed tables dropped. With false, every
// change is refused with a *TopologyChangedError, as a group instance's or
// a partial instance's (WithGroup, WithPartitions) always is.
func WithInPlaceChanges(on bool) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		o.inPlaceOff = !on
		return nil
	})
}
