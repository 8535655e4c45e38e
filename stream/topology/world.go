package topology

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/internal/engine"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
)

// ErrSourceChanged is wrapped by Open, and by Run, when a source's topic is
// not the log the state directory was built from: the topic was deleted and
// created again (its connector.Identifier answers another identity), or a
// partition's log ends before the checkpoint committed for it. Nothing is
// processed then: the state would fold the new log's events onto the old
// log's state. The way out is to rebuild the state: stop every instance,
// move the state directory away and start again (docs/design.md, "When the
// log or the store changes").
var ErrSourceChanged = state.ErrSourceChanged

// checkSources checks that every source is still the log the state was
// built from, before anything runs: its identity, when the connector can
// tell it (stored on the first start), and the end of every partition
// against its checkpoint, when the connector reports ends. It returns the
// identities, by source, for the processors to keep checking while they
// run (engine.WithSourceExtent).
func (a *App) checkSources(ctx context.Context, sources []connector.Source, counts map[string]uint32) (map[string]string, error) {
	ids := map[string]string{}
	for _, src := range sources {
		name := src.Name()
		if idf, ok := src.(connector.Identifier); ok {
			id, err := idf.Identity(ctx)
			if err != nil {
				return nil, fmt.Errorf("source %q: identity: %w", name, err)
			}
			if err := a.db.EnsureSourceIdentity(name, id); err != nil {
				return nil, err
			}
			ids[name] = id
		}
		eo, ok := src.(connector.EndOffsetter)
		if !ok {
			continue
		}
		// Checkpoints first: records appended and committed after the ends
		// were read could not look like a checkpoint beyond the end.
		n := counts[name]
		nexts := make([]uint64, n)
		for pt := range n {
			next, _, err := a.db.Checkpoint(name, pt)
			if err != nil {
				return nil, err
			}
			nexts[pt] = next
		}
		ends, err := eo.EndOffsets(ctx)
		if err != nil {
			return nil, fmt.Errorf("source %q: end offsets: %w", name, err)
		}
		if uint32(len(ends)) != n {
			return nil, fmt.Errorf("source %q: %d end offsets for %d partitions: the partition count changed while the App was opened: %w",
				name, len(ends), n, state.ErrPartitionsChanged)
		}
		for pt, next := range nexts {
			if next > ends[pt] {
				return nil, engine.CheckpointBeyondEnd(name, uint32(pt), next, ends[pt])
			}
		}
	}
	return ids, nil
}
