package changelog

import (
	"context"
	"errors"
	"github.com/strand-io/strand/internal/executor"
	"testing"

	"github.com/strand-io/strand/stream/connector"
)

// TestChangelogCallsActForTheirEpochOnly: LostEpoch, ServeEpoch and
// FlushEpoch of an epoch the partition is not kept under change nothing
// and fail as fenced with that epoch; the epoch it is kept under is lost
// by LostEpoch alone. Fenced errors name the partition and the epoch.
func TestChangelogCallsActForTheirEpochOnly(t *testing.T) {
	c := &Changelog{parts: map[uint32]*clogPart{}}
	part := &clogPart{epoch: 9, next: 1, lostC: make(chan struct{}), progress: make(chan struct{})}
	c.parts[4] = part

	c.LostEpoch(4, 7) // an older epoch's loss
	if e, ok := c.EpochOf(4); !ok || e != 9 {
		t.Fatalf("the loss of epoch 7 ended epoch 9: %d %v", e, ok)
	}
	err := c.ServeEpoch(context.Background(), 4, 7)
	var fe *executor.FencedError
	if !errors.Is(err, executor.ErrFenced) || !errors.As(err, &fe) || fe.Partition != 4 || fe.Epoch != 7 {
		t.Fatalf("ServeEpoch of epoch 7: %v", err)
	}
	if err := c.FlushEpoch(context.Background(), 4, 8); !errors.As(err, &fe) || fe.Epoch != 8 {
		t.Fatalf("FlushEpoch of epoch 8: %v", err)
	}
	if err := c.FlushEpoch(context.Background(), 4, 9); err != nil {
		t.Fatalf("FlushEpoch of the kept epoch with nothing stamped: %v", err)
	}
	c.LostEpoch(4, 9)
	if _, ok := c.EpochOf(4); ok {
		t.Fatal("epoch 9 is still kept after its loss")
	}
	select {
	case <-part.lostC:
	default:
		t.Fatal("the lost part's waiters were not woken")
	}
	if got := executor.Fenced("commit", 3, connector.Epoch(0)).Error(); got != "commit of partition 3: "+executor.ErrFenced.Error() {
		t.Errorf("error without an epoch: %q", got)
	}
}
