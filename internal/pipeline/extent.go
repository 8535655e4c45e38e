package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
)

// What a processor checks of its source's log while it runs
// (docs/design.md, "When the log or the store changes"): that it is still
// the topic the state was built from, with the partition count the state
// was written with, and that no partition ends before its checkpoint. The
// front door checks the same at Open; a running processor checks again
// with every look at the end offsets (WithEndOffsetInterval) and stops Run
// with an error when the log no longer matches.

// extentOptions are what the processor's source must keep while it runs.
type extentOptions struct {
	partitions uint32 // 0: not checked
	identity   string // "": not checked
}

// WithSourceExtent makes Run check that the source keeps partitions
// partitions and, when identity is not empty and the source is a
// connector.Identifier, that it keeps answering identity: at the start of
// Run and with every look at its end offsets. A change stops Run with an
// error wrapping state.ErrPartitionsChanged or state.ErrSourceChanged that
// names the source, what was expected and what was found.
func WithSourceExtent(partitions uint32, identity string) ProcessorOption {
	return func(opts *processorOptions) { opts.extent = extentOptions{partitions: partitions, identity: identity} }
}

// checkPartitionCount refuses to run a source whose partition count is not
// the one the processor was opened with.
func (p *Processor) checkPartitionCount(n uint32) error {
	if want := p.opts.extent.partitions; want != 0 && n != want {
		return partitionsChangedError(p.name, want, n)
	}
	return nil
}

func partitionsChangedError(source string, was, now uint32) error {
	what := fmt.Sprintf("partitions %d..%d would never be read", was, now-1)
	if now < was {
		what = fmt.Sprintf("partitions %d..%d are gone", now, was-1)
	}
	return fmt.Errorf("%w: source %q had %d partitions when the App was opened and has %d now (%s, and keys now go to other partitions "+
		"than their state is filed under); to repartition, stop every instance, move the state directory away and start again (the state "+
		"is rebuilt from the log)", state.ErrPartitionsChanged, source, was, now, what)
}

// committedNexts returns the committed checkpoint of every partition the
// processor runs now. It is read before the end offsets it is compared
// with, so that records appended and committed in between never look like
// a checkpoint beyond the end.
func (p *Processor) committedNexts() map[uint32]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[uint32]uint64, len(p.live))
	for pt := range p.live {
		if ps := p.stats[pt]; ps != nil {
			out[pt] = ps.Next
		}
	}
	return out
}

// checkExtent compares what the source reports now with what the state
// was built from: the partition count, the end of every running partition
// against its checkpoint (nexts, read before ends), and the identity.
func (p *Processor) checkExtent(ctx context.Context, nexts map[uint32]uint64, ends []uint64) error {
	if err := p.checkPartitionCount(uint32(len(ends))); err != nil {
		return err
	}
	for _, pt := range slices.Sorted(maps.Keys(nexts)) {
		if int(pt) < len(ends) && nexts[pt] > ends[pt] {
			return CheckpointBeyondEnd(p.name, pt, nexts[pt], ends[pt])
		}
	}
	want := p.opts.extent.identity
	if want == "" {
		return nil
	}
	id, ok := p.src.(connector.Identifier)
	if !ok {
		return nil
	}
	got, err := id.Identity(ctx)
	if err != nil {
		return nil // unreachable now: the next look tells
	}
	if got != want {
		return fmt.Errorf("%w: source %q is %s now, but the App was opened on %s: the topic was deleted and created again while it ran, "+
			"and the checkpoints and tables of the old log do not describe the new one; to rebuild the state from the new log, stop every "+
			"instance, move the state directory away and start again", state.ErrSourceChanged, p.name, got, want)
	}
	return nil
}

// CheckpointBeyondEnd is the error of a partition whose log ends before
// the checkpoint committed for it: the log is not the one the state was
// built from (the topic was deleted and created again, or the broker lost
// its tail). It wraps state.ErrSourceChanged.
func CheckpointBeyondEnd(source string, partition uint32, checkpoint, end uint64) error {
	return fmt.Errorf("%w: source %q partition %d: the state's checkpoint is at offset %d but the log ends at offset %d: "+
		"the topic was deleted and created again, or the broker lost records it had acknowledged, and the checkpoints and tables "+
		"do not describe this log; to rebuild the state from the log, stop every instance, move the state directory away and start again",
		state.ErrSourceChanged, source, partition, checkpoint, end)
}
