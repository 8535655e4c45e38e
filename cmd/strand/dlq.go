package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// filter selects dead letters.
type filter struct {
	reasons   map[deadletter.Reason]bool
	key       []byte
	hasKey    bool
	source    string
	partition int64 // -1: any
	from, to  uint64
}

func (f *filter) register(fs *flag.FlagSet) {
	f.partition = -1
	f.to = math.MaxUint64
	fs.Func("reason", "only these dead-letter reasons, comma-separated", func(s string) error {
		if f.reasons == nil {
			f.reasons = map[deadletter.Reason]bool{}
		}
		for _, name := range strings.Split(s, ",") {
			r, err := deadletter.ParseReason(strings.TrimSpace(name))
			if err != nil {
				return fmt.Errorf("unknown dead-letter reason %q: want one of %s", trunc(name, 64), validReasons())
			}
			f.reasons[r] = true
		}
		return nil
	})
	fs.Func("key", "only this key: text, or 0x followed by hex", func(s string) error {
		f.hasKey = true
		if h, ok := strings.CutPrefix(s, "0x"); ok {
			b, err := hex.DecodeString(h)
			if err != nil {
				return fmt.Errorf("key %q: bad hex (want 0x followed by pairs of hex digits, or plain text): %v", trunc(s, 64), err)
			}
			f.key = b
			return nil
		}
		f.key = []byte(s)
		return nil
	})
	fs.StringVar(&f.source, "source", "", "only records read from this source topic (STREAM/TOPIC)")
	fs.Int64Var(&f.partition, "partition", -1, "only records of this source partition (-1: any)")
	fs.Uint64Var(&f.from, "from", 0, "only records at this source offset or later")
	fs.Uint64Var(&f.to, "to", math.MaxUint64, "only records at this source offset or earlier")
}

func (f *filter) check() error {
	if f.from > f.to {
		return usagef("-from %d is after -to %d", f.from, f.to)
	}
	if f.partition < -1 || f.partition > math.MaxUint32 {
		return usagef("-partition %d: want a partition number or -1", f.partition)
	}
	return nil
}

func (f *filter) match(d deadletter.Letter) bool {
	switch {
	case f.reasons != nil && !f.reasons[d.Reason]:
		return false
	case f.hasKey && !bytes.Equal(d.Headers.Key, f.key):
		return false
	case f.source != "" && d.Source != f.source:
		return false
	case f.partition >= 0 && int64(d.Partition) != f.partition:
		return false
	}
	return d.Offset >= f.from && d.Offset <= f.to
}

// stored is one dead letter as read from the dead-letter topic.
type stored struct {
	dlqPartition uint32
	dlqOffset    uint64
	letter       deadletter.Letter
}

// readDeadLetters reads every message of the dead-letter topic, partition
// by partition in offset order, and returns the dead letters f selects,
// how many messages were neither dead letters nor replay-ledger markers,
// and the replay ledger (ledger.go).
func readDeadLetters(ctx context.Context, cl *iggy.Client, topic string, f *filter) ([]stored, int, *ledger, error) {
	s, t, err := splitTopic(topic)
	if err != nil {
		return nil, 0, nil, err
	}
	n, err := cl.Partitions(ctx, s, t)
	if err != nil {
		return nil, 0, nil, topicError(topic, "dead-letter topic", err)
	}
	var out []stored
	foreign := 0
	led := newLedger()
	for p := range n {
		msgs, err := cl.Tail(ctx, s, t, p, math.MaxInt32)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("read dead-letter topic %s partition %d: %w", topic, p, err)
		}
		for _, m := range msgs {
			if m.HeaderErr != nil {
				foreign++
				continue
			}
			if isLedgerMarker(&m) {
				led.add(m.Payload)
				continue
			}
			d, err := deadletter.Parse(connector.Message{ID: m.ID, Headers: m.Headers, Payload: m.Payload})
			if err != nil {
				foreign++
				continue
			}
			if f.match(d) {
				out = append(out, stored{dlqPartition: p, dlqOffset: m.Offset, letter: d})
			}
		}
	}
	return out, foreign, led, nil
}

func dlqList(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("dlq list", stderr)
	var cf connFlags
	cf.register(fs, getenv)
	var f filter
	f.register(fs)
	topic := fs.String("topic", "", "the dead-letter topic (STREAM/TOPIC), e.g. bank/accounts.dlq (required)")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *topic == "" {
		return usagef("dlq list: -topic is required")
	}
	if err := f.check(); err != nil {
		return err
	}
	if _, _, err := splitTopic(*topic); err != nil {
		return err
	}
	cl, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	letters, foreign, _, err := readDeadLetters(ctx, cl, *topic, &f)
	if err != nil {
		return err
	}
	warnNotDLQ(stderr, *topic, len(letters), foreign)
	w := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "DLQ\tSOURCE\tPARTITION\tOFFSET\tREASON\tATTEMPTS\tKEY\tBYTES\tERROR")
	for _, s := range letters {
		d := s.letter
		errText := ""
		if d.Err != nil {
			errText = d.Err.Error()
		}
		fmt.Fprintf(w, "%d@%d\t%s\t%d\t%d\t%s\t%d\t%s\t%d\t%s\n", s.dlqPartition, s.dlqOffset, d.Source, d.Partition, d.Offset,
			d.Reason, d.Attempts, keyText(d.Headers.Key), len(d.Payload), errText)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d dead letters", len(letters))
	if foreign > 0 {
		fmt.Fprintf(stdout, " (%d other messages in the topic skipped)", foreign)
	}
	fmt.Fprintln(stdout)
	return nil
}

// warnNotDLQ warns when a topic holds messages but none of them is a dead
// letter: it is probably not a dead-letter topic.
func warnNotDLQ(stderr io.Writer, topic string, letters, foreign int) {
	if letters == 0 && foreign > 0 {
		fmt.Fprintf(stderr, "strand: warning: %s holds %d messages and none is a dead letter: it is not a dead-letter topic? (an App's dead-letter topic is its first source's name followed by .dlq unless set with topology.WithDeadLetterTopic)\n", topic, foreign)
	}
}

// trunc cuts s to at most n bytes for an error message, saying so.
func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("... (%d bytes)", len(s))
}

// keyText shows a key as text when it is printable, else as 0x-hex (the
// form -key takes).
func keyText(k []byte) string {
	if len(k) == 0 {
		return "-"
	}
	for _, c := range k {
		if c < 0x21 || c > 0x7e {
			return "0x" + hex.EncodeToString(k)
		}
	}
	return string(k)
}

// replayID is the message id of a dead letter's replay: derived from the
// dead letter's own id, so that every replay of it carries the same id.
func replayID(d deadletter.Letter) [16]byte {
	id := d.ID()
	h := sha256.Sum256(append([]byte("strand-replay\x00"), id[:]...))
	var out [16]byte
	copy(out[:], h[:16])
	return out
}

// replayMessage is the message that replays d to its source topic: the
// original strand headers and payload; for a record of a foreign source,
// the original message's own headers (kinds kept) and payload, to the
// partition it was read from.
func replayMessage(dlqTopic string, d deadletter.Letter) (connector.Message, error) {
	switch d.Reason {
	case deadletter.ReasonTimer:
		return connector.Message{}, fmt.Errorf("it describes a failed timer, not an event")
	case deadletter.ReasonWindowFinal:
		return connector.Message{}, fmt.Errorf("it describes a window's failed final result, not an event (its payload holds the window's aggregate: compute the result from it)")
	}
	if d.Raw != nil {
		return replayForeign(d)
	}
	if len(d.Headers.Key) == 0 {
		return connector.Message{}, fmt.Errorf("no valid strand headers")
	}
	if len(d.Payload) == 0 {
		return connector.Message{}, fmt.Errorf("empty payload")
	}
	fields, err := d.Headers.AppendFields(nil)
	if err != nil {
		return connector.Message{}, err
	}
	// The replay's origin: a strand reader applies it at most once however
	// often it is replayed, and lets it pass its re-sequencer at the key's
	// current position (its strand-seq is the producer's, long past).
	id := replayID(d)
	fields = append(fields, connector.Field{Name: connector.HeaderOrigin, Value: rows.ReplayOrigin(dlqTopic, id)})
	return connector.Message{Key: d.Headers.Key, ID: id, Headers: fields, Payload: d.Payload}, nil
}

// replayForeign is replayMessage for the dead letter of a foreign record.
// Its producer chose the partition, so the replay goes back to that one;
// the key (the classifier's, or source/partition) only names the message.
func replayForeign(d deadletter.Letter) (connector.Message, error) {
	if d.Reason == deadletter.ReasonBadHeaders {
		return connector.Message{}, fmt.Errorf("its user headers were malformed and were not kept")
	}
	if len(d.Payload) == 0 {
		return connector.Message{}, fmt.Errorf("empty payload")
	}
	key := bytes.Clone(d.Headers.Key)
	if len(key) == 0 {
		key = []byte(d.Source + "/" + strconv.FormatUint(uint64(d.Partition), 10))
		key = key[max(0, len(key)-connector.MaxKeyLen):]
	}
	return connector.Message{Key: key, ID: replayID(d), Headers: d.Raw.Headers, Payload: d.Payload,
		Partition: d.Partition, HasPartition: true}, nil
}

// replayHooks let tests interrupt a replay.
type replayHooks struct {
	// beforeSend is called after a batch's intent was recorded, before it
	// is sent; afterSend after it was sent, before its done marker.
	beforeSend, afterSend func(n int) error
}

func dlqReplay(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, hooks replayHooks) error {
	fs := newFlags("dlq replay", stderr)
	var cf connFlags
	cf.register(fs, getenv)
	var f filter
	f.register(fs)
	topic := fs.String("topic", "", "the dead-letter topic (STREAM/TOPIC), e.g. bank/accounts.dlq (required)")
	dry := fs.Bool("dry-run", false, "show what would be replayed and what was already; send nothing")
	batch := fs.Int("batch", 100, "dead letters per send (1..10000)")
	dir := fs.String("dir", "", "the state directory of the App reading the source topics: report what it did with each replayed event (see below)")
	wait := fs.Duration("wait", 30*time.Second, "with -dir: how long to wait for a running App to process the replayed events before reporting")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *topic == "" {
		return usagef("dlq replay: -topic is required")
	}
	if *batch < 1 || *batch > 10_000 {
		return usagef("dlq replay: -batch %d: want 1..10000", *batch)
	}
	if *wait < 0 {
		return usagef("dlq replay: -wait %v: want a duration of 0 or more", *wait)
	}
	if err := f.check(); err != nil {
		return err
	}
	if _, _, err := splitTopic(*topic); err != nil {
		return err
	}
	cl, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	letters, foreign, led, err := readDeadLetters(ctx, cl, *topic, &f)
	if err != nil {
		return err
	}
	warnNotDLQ(stderr, *topic, len(letters), foreign)
	if led.bad > 0 {
		fmt.Fprintf(stderr, "strand: warning: %s holds %d replay-ledger markers that cannot be read: ignored\n", *topic, led.bad)
	}
	ds, dt, _ := splitTopic(*topic)
	var lw *ledgerWriter
	if !*dry {
		dlqSink, err := iggy.NewSink(ctx, cl, ds, dt)
		if err != nil {
			return fmt.Errorf("open the dead-letter topic %s to record the replay: %w", *topic, err)
		}
		defer dlqSink.Close(context.WithoutCancel(ctx))
		lw = &ledgerWriter{sink: dlqSink}
		if n, err := led.settle(ctx, cl, lw); err != nil {
			return err
		} else if n > 0 {
			fmt.Fprintf(stdout, "settled %d interrupted replay batches: read their destinations from the offsets they recorded\n", n)
		}
	} else if len(led.intents) > 0 {
		fmt.Fprintf(stdout, "%d interrupted replay batches are not settled (a replay settles them first; a dry run writes nothing): their dead letters count as not replayed here\n", len(led.intents))
	}
	// Group by destination, in the dead-letter topic's order.
	type dest struct {
		name    string
		msgs    []connector.Message
		letters []deadletter.Letter
	}
	var dests []*dest
	byName := map[string]*dest{}
	skipped, already := 0, 0
	for _, s := range letters {
		m, err := replayMessage(*topic, s.letter)
		if err != nil {
			skipped++
			fmt.Fprintf(stdout, "skip %s partition %d offset %d (%s): cannot replay: %v\n", s.letter.Source, s.letter.Partition, s.letter.Offset, s.letter.Reason, err)
			continue
		}
		if led.sent[m.ID] {
			already++
			continue
		}
		d, ok := byName[s.letter.Source]
		if !ok {
			d = &dest{name: s.letter.Source}
			byName[d.name] = d
			dests = append(dests, d)
		}
		d.msgs = append(d.msgs, m)
		d.letters = append(d.letters, s.letter)
	}
	verb := "replayed"
	if *dry {
		verb = "would replay"
	}
	sent := 0
	var replays []sentReplay
	for _, d := range dests {
		s, t, err := splitTopic(d.name)
		if err != nil {
			return fmt.Errorf("dead letter names source %q: %w", d.name, err)
		}
		sink, err := iggy.NewSink(ctx, cl, s, t)
		if err != nil {
			return fmt.Errorf("replay to %s: %w", d.name, err)
		}
		from, err := cl.EndOffsets(ctx, s, t)
		if err != nil {
			return fmt.Errorf("replay to %s: read the partitions' ends: %w", d.name, err)
		}
		err = replayTo(ctx, cl, sink, lw, d.msgs, *batch, hooks, func(n int) {
			sent += n
			fmt.Fprintf(stdout, "%s: %s %d (%d of %d done)\n", d.name, verb, sent, sent+already, len(letters)-skipped)
		})
		if cerr := sink.Close(context.WithoutCancel(ctx)); err == nil && cerr != nil {
			err = fmt.Errorf("replay to %s: %w", d.name, cerr)
		}
		if err != nil {
			return err
		}
		if !*dry && *dir != "" {
			found, err := locateReplays(ctx, cl, d.name, from, d.msgs, d.letters)
			if err != nil {
				return err
			}
			replays = append(replays, found...)
		}
	}
	fmt.Fprintf(stdout, "%s %d dead letters; %d were already replayed; %d skipped (not replayable)\n", verb, sent, already, skipped)
	if !*dry && *dir != "" && len(replays) > 0 {
		return reportReplays(ctx, cl, *topic, *dir, *wait, replays, stdout)
	}
	return nil
}

// replayTo sends msgs in batches, each between an intent and a done
// marker of the replay ledger (ledger.go); lw is nil in a dry run, which
// sends nothing.
func replayTo(ctx context.Context, cl *iggy.Client, sink *iggy.Sink, lw *ledgerWriter, msgs []connector.Message, batch int, hooks replayHooks, progress func(sent int)) error {
	s, t, err := splitTopic(sink.Name())
	if err != nil {
		return err
	}
	for start := 0; start < len(msgs); start += batch {
		chunk := msgs[start:min(start+batch, len(msgs))]
		if lw != nil {
			ends, err := cl.EndOffsets(ctx, s, t)
			if err != nil {
				return fmt.Errorf("replay to %s: read the partitions' ends: %w", sink.Name(), err)
			}
			id := newBatchID()
			ids := idStrings(chunk)
			if err := lw.write(ctx, ledgerMarker{Kind: "intent", Batch: id, Dest: sink.Name(), Ends: ends, IDs: ids}); err != nil {
				return err
			}
			if hooks.beforeSend != nil {
				if err := hooks.beforeSend(len(chunk)); err != nil {
					return err
				}
			}
			if err := sink.Send(ctx, chunk); err != nil {
				return fmt.Errorf("replay to %s: send %d messages: %w (the next replay finds out which landed)", sink.Name(), len(chunk), err)
			}
			if hooks.afterSend != nil {
				if err := hooks.afterSend(len(chunk)); err != nil {
					return err
				}
			}
			if err := lw.write(ctx, ledgerMarker{Kind: "done", Batch: id, IDs: ids}); err != nil {
				return err
			}
		}
		progress(len(chunk))
	}
	return nil
}
