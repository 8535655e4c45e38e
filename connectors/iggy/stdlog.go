package iggy

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"sync"
)

// RouteStdLog sends everything printed through the standard log package to
// l, one record per line at debug level with the attribute
// "source"="stdlog", and returns a function that restores the previous
// output and flags.
//
// The SDK prints a few lines through package log on every login (its
// cluster-leader check) and offers no logger of its own. The standard
// logger is process-global, so this package never redirects it by itself:
// call RouteStdLog once at start-up if the process agrees that all
// std-log output (not only the SDK's) goes to l. To silence it, pass
// slog.New(slog.DiscardHandler).
func RouteStdLog(l *slog.Logger) (restore func()) {
	prevOut, prevFlags, prevPrefix := log.Writer(), log.Flags(), log.Prefix()
	log.SetOutput(&stdlogWriter{l: l})
	log.SetFlags(0)
	log.SetPrefix("")
	var once sync.Once
	return func() {
		once.Do(func() {
			log.SetOutput(prevOut)
			log.SetFlags(prevFlags)
			log.SetPrefix(prevPrefix)
		})
	}
}

type stdlogWriter struct{ l *slog.Logger }

func (w *stdlogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte{'\n'}) {
		if len(line) > 0 {
			w.l.Log(context.Background(), slog.LevelDebug, string(line), "source", "stdlog")
		}
	}
	return len(p), nil
}
