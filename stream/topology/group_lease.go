package topology

import (
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/executor"
)

// sendDeadline is the processors' bound on a send after check: rows of p
// reach their topic only before this instance's lease on p ends
// (pipeline.WithPublishDeadline, docs/design.md §15).
func (gr *group) sendDeadline(p uint32) (time.Time, bool, error) {
	gr.mu.Lock()
	clog := gr.clog
	gr.mu.Unlock()
	if clog == nil {
		return time.Time{}, false, fmt.Errorf("partition %d: %w", p, executor.ErrFenced)
	}
	return clog.SendDeadline(p)
}
