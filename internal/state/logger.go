package state

import (
	"context"
	"fmt"
	"log/slog"
)

// pebbleLogger adapts slog to Pebble's Logger: informational messages are
// Debug (so a default setup stays quiet), errors are Error. Fatalf reports
// that Pebble cannot go on (a commit it could not write, a broken
// invariant), after which Pebble must not continue: it logs and panics with
// a fatalPanic (Pebble's own default exits the process). Where strand
// called into Pebble, DB.guard recovers it and fails the DB instead of the
// process (fatal.go).
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble: "+msg, slog.Bool("fatal", true))
	panic(fatalPanic{msg: "pebble: " + msg})
}
