// Command strand operates strand Apps and their Iggy topics from the
// shell: it lists and replays dead letters, shows the lag of a state
// directory against its sources, and inspects a state directory.
//
//	strand dlq list   -topic STREAM/TOPIC [filters]
//	strand dlq replay -topic STREAM/TOPIC [filters] [-dry-run] [-dir DIR]
//	strand lag        -dir DIR
//	strand inspect    DIR
//	strand reset      -dir DIR [-dry-run]
//
// The Iggy connection comes from -addr, -user and -password, or from
// STRAND_IGGY_ADDR, STRAND_IGGY_USER and STRAND_IGGY_PASSWORD; the
// password is never printed. Run `strand help` for the details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/strand-io/strand/connectors/iggy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The Iggy SDK prints through the standard logger on every login: route
	// it to the command's quiet logger (warnings only).
	restore := iggy.RouteStdLog(quietLogger(os.Stderr))
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	restore()
	stop()
	os.Exit(code)
}

const usageText = `strand operates strand Apps and their Iggy topics.

Usage:
  strand dlq list   -topic STREAM/TOPIC [filters]          list dead letters
  strand dlq replay -topic STREAM/TOPIC [filters] [-dry-run] [-dir DIR [-wait D]]
                                                          re-publish dead letters to their source topics
  strand lag        -dir DIR                              lag of a state directory against its sources
  strand inspect    DIR                                   what a state directory holds
  strand reset      -dir DIR [-dry-run]                   make a state directory rebuild from the log
  strand help                                             this text

Iggy connection (dlq, lag):
  -addr HOST:PORT     or STRAND_IGGY_ADDR (default 127.0.0.1:8090)
  -user NAME          or STRAND_IGGY_USER (default iggy)
  -password SECRET    or STRAND_IGGY_PASSWORD (default iggy); never printed

Filters (dlq list, dlq replay), all optional, combined with AND:
  -reason R[,R...]    dead-letter reasons: bad-headers, unknown-type, undecodable,
                      bad-key, permanent-failure, retries-exhausted, key-mismatch,
                      bad-sequence, duplicate, gap-timeout, hold-overflow,
                      key-by, unclassified
  -key K              the record's key: text, or 0x followed by hex for bytes
  -source S           the source topic the record was read from (STREAM/TOPIC)
  -partition N        the source partition
  -from OFFSET        the first source offset (inclusive)
  -to OFFSET          the last source offset (inclusive)

Replay sends each dead letter's original payload and strand headers to its
source topic, with a message id derived from the dead letter's and a
strand-origin header of its own. What is promised:
  - applied at most once, for ever: a strand App reading the source keeps
    the origin of every replay it applied (in its store) and drops a replay
    it applied already, however often and in whatever order dead letters
    are replayed (records of a foreign source excepted: they go back with
    their own headers, unchanged, and only the id check below applies);
  - sent once, for ever: replay records what it sends in the dead-letter
    topic itself (the replay ledger: marker messages in its partition 0,
    header strand-replay-ledger, which dead-letter readers skip): before
    each batch an intent naming the messages and the destination
    partitions' ends, after the broker acknowledged it a done marker. A
    later replay, after any number of other messages and from any machine,
    sends nothing a completed batch sent. A batch interrupted between the
    two markers (the command killed, a send failed) is settled by the next
    replay: it reads the destination from the recorded ends and counts what
    landed as sent. One window is left: on Iggy protocol 0.8, a send the
    broker still holds when the next replay settles the batch can land
    after it and be sent twice; the App still applies it once (above).
    Run one replay of a dead-letter topic at a time;
  - a replayed event of a re-sequenced source (Resequence) is applied at
    its key's current position, not compared with the key's next
    sequence number (its strand-seq is the producer's, long past); the
    App counts it in Stats Readmitted and logs it.
With -dir DIR (the state directory of the App that reads the source topics)
replay reports what that App did with each event it sent, read from its
store (stream/state): the stopped store as it is, or a running App's
through its live inspection (topology.WithLiveInspect(true)), waiting up
to -wait for the App's checkpoints to pass the replayed events. Each is
counted as held (behind an open gap, with the number it waits for),
parked (with its last error), dead-lettered again (with the reason and
error of the new dead letter), applied, not processed yet, or dropped
(the App had taken in the same replay before). Without -dir, see
'strand inspect' and the App's stats.

Records without valid strand headers (reason bad-headers) cannot be
replayed and are counted as skipped. A
record of a foreign source (a topic whose producers write no strand
headers) is replayed with its own original headers, unchanged, to the
partition it was read from; its source classifies it again. A replayed
event comes after every event already in its partition.

Inspect and lag read a state directory that no App has open directly. While
an App has it open (Pebble locks it), they read a consistent copy the App
makes of its store if it was opened with topology.WithLiveInspect(true)
(inspect says so); else they fail, naming the App's pid.

Reset makes a state directory ready to be rebuilt from the log by the next
App that opens it, with the same topology or a changed one (whose start was
refused with the list of what changed). It deletes every checkpoint, table
row and re-sequencer row and the stored topology; it keeps the outbox and
pending dead letters (still published) and the outbox's sequence numbers.
Each partition remembers its old checkpoint: while the App reads the log
again, records below it update the tables but publish nothing again (no To
or KeyBy message, no dead letter, no ForEach call). It refuses while an App
has the directory open, while records are parked or held (let the App apply
or dead-letter them first), and for a store run in a group. -dry-run prints
what it would do.

Exit status: 0 on success, 1 on failure, 2 on a usage error.
`

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	err := dispatch(ctx, args, stdout, stderr, getenv)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "strand: %v\nRun 'strand help' for usage.\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "strand: %v\n", err)
		return 1
	}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return usagef("no command")
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return nil
	case "dlq":
		if len(args) < 2 {
			return usagef("dlq: want a subcommand: list or replay")
		}
		switch args[1] {
		case "list":
			return dlqList(ctx, args[2:], stdout, stderr, getenv)
		case "replay":
			return dlqReplay(ctx, args[2:], stdout, stderr, getenv, replayHooks{})
		}
		return usagef("dlq: unknown subcommand %q: want list or replay", args[1])
	case "lag":
		return lag(ctx, args[1:], stdout, stderr, getenv)
	case "inspect":
		return inspect(ctx, args[1:], stdout, stderr)
	case "reset":
		return reset(ctx, args[1:], stdout, stderr)
	}
	return usagef("unknown command %q: want dlq, lag, inspect, reset or help", args[0])
}

// newFlags returns a flag set for a command that reports its errors to
// stderr.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of strand %s (see 'strand help'):\n", name)
		out := fs.Output()
		fs.SetOutput(stderr) // parse silences the flag package's own messages
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
	return fs
}

// parse parses args into fs, refusing positional arguments unless
// positional is set; a flag error is a usage error.
func parse(fs *flag.FlagSet, args []string, positional bool) error {
	// The flag package prints a bad value in full: the error is printed by
	// run instead, cut to a bounded length (the usage text still goes to
	// stderr through fs.Usage).
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%s: %s", fs.Name(), trunc(err.Error(), 300))
	}
	if !positional && fs.NArg() > 0 {
		return usagef("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}
