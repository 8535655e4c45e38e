package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"

	ierror "github.com/apache/iggy/foreign/go/errors"

	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/state"
)

// quietLogger is the logger of the command's Iggy client and of the SDK's
// standard-log lines (iggy.RouteStdLog): warnings and errors go to stderr,
// the SDK's "Checking cluster metadata for leader detection" chatter and
// the connector's informational lines do not.
func quietLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// validReasons lists the dead-letter reasons -reason takes.
func validReasons() string {
	var names []string
	for r := deadletter.ReasonBadHeaders; ; r++ {
		if _, err := deadletter.ParseReason(r.String()); err != nil {
			break
		}
		names = append(names, r.String())
	}
	return strings.Join(names, ", ")
}

// topicError names a topic the server does not have by its name, not by
// the SDK's numeric ids, and says what to do.
func topicError(topic, what string, err error) error {
	var ie ierror.IggyError
	if errors.As(err, &ie) {
		switch ie.Code() {
		case ierror.StreamIdNotFound{}.Code(), ierror.StreamNameNotFound{}.Code():
			s, _, _ := strings.Cut(topic, "/")
			return fmt.Errorf("%s %s: the server has no stream %q: check -topic (STREAM/TOPIC) and -addr", what, topic, s)
		case ierror.TopicIdNotFound{}.Code(), ierror.TopicNameNotFound{}.Code():
			return fmt.Errorf("%s %s: the server has no such topic: check -topic (STREAM/TOPIC) and -addr", what, topic)
		}
	}
	return fmt.Errorf("%s %s: %w", what, topic, err)
}

// storeError explains an error of stream/state's Open of dir: a directory
// that is not there or not a store; other errors (a store another process
// holds: Open names it and what to do) as they are.
func storeError(dir string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, state.ErrNoStore):
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("no state directory at %s: give the dir the App was opened with (%w)", dir, err)
		}
		return fmt.Errorf("%s is not a strand state directory (or not a whole one): give the dir the App was opened with (%w)", dir, err)
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK):
		return fmt.Errorf("%w (a store can be read by one process at a time; an App that has it open answers for it when opened with topology.WithLiveInspect(true); else ask it: its stats or its strand.lag metric)", err)
	}
	return err
}
