package topology

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/strand-io/strand/internal/live"
)

// lockHint explains a failure to open a store that another process holds
// (Pebble's lock: "resource temporarily unavailable"): it names that
// process from the record it left in dir (internal/live), and says what to
// do. Other errors are returned as they are.
func lockHint(dir string, err error) error {
	if err == nil || !(errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) ||
		strings.Contains(err.Error(), "lock held by current process")) { // Pebble's words for a second open in one process
		return err
	}
	if rec, _ := live.ReadRecord(dir); rec != nil {
		return fmt.Errorf("%w: the state directory %s is open in another App (pid %d, open since %s); one App at a time may use a state directory: stop that one, or give this one another directory",
			err, dir, rec.PID, rec.Since.Format(time.RFC3339))
	}
	return fmt.Errorf("%w: another process has the state directory %s open (it left no %s naming it); one App at a time may use a state directory: stop that one, or give this one another directory",
		err, dir, live.File)
}
