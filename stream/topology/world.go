package topology

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/internal/pipeline"
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

// ErrStoreDamaged is wrapped by Open when the state directory's files are
// missing or damaged: a store that existed lost the files that held its
// metadata, its files belong to another store, or one is corrupt. The error
// names the file where it can. strand never takes such a directory for a
// new store (it writes an identity file, strand-store.id, on the first
// start); restore it from a backup, or move it away and start again to
// rebuild the state from the log.
var ErrStoreDamaged = state.ErrStoreDamaged

// ErrStoreFailed is wrapped by the error Run returns when the store could
// not commit: its disk is (nearly) full (then the error wraps ErrDiskFull
// too) or failed. The process goes on; the App stops, every partition's
// work up to its last commit is durable, and a Run or a restart once there
// is room resumes exactly from there.
var ErrStoreFailed = state.ErrStoreFailed

// ErrDiskFull is wrapped by the error Run returns when a commit was refused
// because the state directory's disk has less free space than the reserve
// (WithDiskReserve). It wraps syscall.ENOSPC.
var ErrDiskFull = state.ErrDiskFull

// WithDiskReserve sets the free space the App keeps on the disk of its
// state directory (default 64 MiB; 0 turns the check off): a commit that
// would start with less free space is refused, and Run stops with an error
// wrapping ErrDiskFull, before Pebble can meet a full disk, which it does
// not survive (it would stop the process). Make it larger than what other
// writers to the same disk may write between two commits.
func WithDiskReserve(bytes int64) OpenOption {
	return openOptionFunc(func(o *openOptions) error {
		if bytes < 0 {
			return fmt.Errorf("strand: topology.WithDiskReserve: %d bytes, want 0 or more", bytes)
		}
		o.reserve = &bytes
		return nil
	})
}

// checkSources checks that every source is still the log the state was
// built from, before anything runs: its identity, when the connector can
// tell it (stored on the first start), and the end of every partition
// against its checkpoint, when the connector reports ends. It returns the
// identities, by source, for the processors to keep checking while they
// run (pipeline.WithSourceExtent).
func (a *App) checkSources(ctx context.Context, sources []connector.Source, counts map[string]uint32) (map[string]string, error) {
	ids := map[string]string{}
	for _, src := range sources {
		name := src.Name()
		if idf, ok := src.(connector.Identifier); ok {
			id, err := idf.Identity(ctx)
			if err != nil {
				return nil, fmt.Errorf("source %q: identity: %w", name, err)
			}
			if err := a.storeOf(name).EnsureSourceIdentity(name, id); err != nil {
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
			next, _, err := a.storeOf(name).Checkpoint(name, pt)
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
				return nil, pipeline.CheckpointBeyondEnd(name, uint32(pt), next, ends[pt])
			}
		}
	}
	return ids, nil
}
