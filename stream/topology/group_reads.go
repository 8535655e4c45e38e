package topology

import (
	"context"
	"errors"
	"fmt"

	"github.com/strand-io/strand/internal/executor"
)

// ErrNotConfirmed is wrapped by a table read (Get, Scan, ScanPartition,
// and the query server's, which answers 503) in a group when a partition
// it read left this instance before the partition's changelog confirmed
// the commits the read saw: they may not be in the valid history, so the
// answer is withheld. Ask the partition's new owner.
var ErrNotConfirmed = errors.New("strand: the partition moved before the commits read were confirmed")

// readGate holds a table read of partition p back, in a group, until the
// changelog has confirmed every commit of p this instance stamped before
// (docs/design.md §2): then nothing the read answers is taken back by a
// failover, since the next owner restores the valid history. A partition
// this instance does not keep is answered as its store has it.
func (gr *group) readGate(ctx context.Context, p uint32) error {
	gr.mu.Lock()
	clog := gr.clog
	gr.mu.Unlock()
	if clog == nil {
		return nil
	}
	if err := clog.ConfirmRead(ctx, p); err != nil {
		if errors.Is(err, executor.ErrFenced) {
			return fmt.Errorf("%w: %w", ErrNotConfirmed, err)
		}
		return err
	}
	return nil
}

// confirmedCheck tells a non-waiting read (GetRecent, ScanPartitionRecent,
// the query server) whether a view of partition p whose last commit of p
// has head row head may be shown (state.ConfirmedCheck): without a
// changelog (outside Run) every view may.
func (gr *group) confirmedCheck(p uint32, head []byte) (bool, error) {
	gr.mu.Lock()
	clog := gr.clog
	gr.mu.Unlock()
	if clog == nil {
		return true, nil
	}
	ok, err := clog.Confirmed(p, head)
	if errors.Is(err, executor.ErrFenced) {
		return false, fmt.Errorf("%w: %w", ErrNotConfirmed, err)
	}
	return ok, err
}
