package queryserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// handleReady answers GET /readyz: 200 when the App catches up with its
// sources as they are now within the ready timeout (App.WaitCaughtUp: every
// partition committed up to its end offset, nothing held, parked or
// waiting to be published), 503 with the reason otherwise.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.readyTimeout)
	defer cancel()
	err := s.app.WaitCaughtUp(ctx)
	if err == nil {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	reason := err.Error()
	if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
		reason = s.behind()
	}
	writeError(w, http.StatusServiceUnavailable, fmt.Errorf("not ready: %s", reason))
}

// behind says why the App has not caught up.
func (s *Server) behind() string {
	var lagging, waiting []string
	var total uint64
	var held, heldKeys, parked, parkedKeys, outbox int
	running := 0
	for _, st := range s.app.Stats() {
		for _, p := range st.Partitions {
			running++
			if l := p.Lag(); l > 0 {
				total += l
				if len(lagging) < 8 {
					lagging = append(lagging, fmt.Sprintf("%s partition %d at %d of %d", st.Source, p.Partition, p.Next, p.End))
				}
			}
			held += p.HeldRecords
			heldKeys += p.HeldKeys
			parked += p.ParkedRecords
			parkedKeys += p.ParkedKeys
			outbox += p.OutboxPending
		}
	}
	if held > 0 {
		waiting = append(waiting, fmt.Sprintf("%d records held by the re-sequencer behind open gaps of %d keys", held, heldKeys))
	}
	if parkedKeys > 0 {
		waiting = append(waiting, fmt.Sprintf("%d parked keys (%d records) waiting for a retry or an Unblock", parkedKeys, parked))
	}
	if outbox > 0 {
		waiting = append(waiting, fmt.Sprintf("%d To/KeyBy messages wait to be published", outbox))
	}
	switch {
	case total > 0:
		msg := fmt.Sprintf("catching up, %d records behind (%s)", total, strings.Join(lagging, "; "))
		if len(waiting) > 0 {
			msg += "; " + strings.Join(waiting, "; ")
		}
		return msg
	case len(waiting) > 0:
		return strings.Join(waiting, "; ") + " (see GET /stats)"
	case running == 0:
		return "no partition is running (is App.Run running?)"
	}
	if pending, err := s.app.PendingDeadLetters(context.Background()); err == nil && len(pending) > 0 {
		return fmt.Sprintf("%d dead letters wait to be published to the dead-letter topic", len(pending))
	}
	return fmt.Sprintf("not caught up with the sources' end within %v", s.cfg.readyTimeout)
}
