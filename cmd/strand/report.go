package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/state"
)

// The replay's report (-dir): what the App reading a source did with each
// replayed event, read from its store through stream/state (directly when
// the App is stopped, else through the App's live inspection), never from
// the App's counters. Each replay is found by where it landed (its
// destination partition and offset, read back by its message id) and
// classified as:
//
//   - held: the re-sequencer holds it behind an open gap;
//   - parked: its key is parked after a failure, waiting for a retry or an
//     Unblock;
//   - dead-lettered again: a dead letter of that partition and offset is in
//     the dead-letter topic or pending in the store, with its reason;
//   - applied: none of these, and the store holds the replay's origin (an
//     App keeps the origin of every replay it takes in, in the commit that
//     took it in);
//   - not processed yet: the partition's checkpoint is not past it;
//   - dropped: past the checkpoint and none of the above (the App had
//     applied the same replay before).

// sentReplay is one replayed event and where it landed.
type sentReplay struct {
	dest      string
	id        [16]byte
	origin    []byte
	letter    deadletter.Letter
	partition uint32
	offset    uint64
	found     bool
}

// locateReplays reads the destination partitions from the ends before the
// replay (from) and finds where each of msgs landed.
func locateReplays(ctx context.Context, cl *iggy.Client, dest string, from []uint64, msgs []connector.Message, letters []deadletter.Letter) ([]sentReplay, error) {
	s, t, err := splitTopic(dest)
	if err != nil {
		return nil, err
	}
	out := make([]sentReplay, len(msgs))
	byID := map[[16]byte]int{}
	for i, m := range msgs {
		out[i] = sentReplay{dest: dest, id: m.ID, letter: letters[i]}
		for _, f := range m.Headers {
			if f.Name == connector.HeaderOrigin {
				out[i].origin = f.Value
			}
		}
		byID[m.ID] = i
	}
	for p, off := range from {
		for {
			got, err := cl.Read(ctx, s, t, uint32(p), off, 10_000)
			if err != nil {
				return nil, fmt.Errorf("report: find the replays in %s partition %d: %w", dest, p, err)
			}
			for _, m := range got {
				if i, ok := byID[m.ID]; ok && !out[i].found {
					out[i].partition, out[i].offset, out[i].found = uint32(p), m.Offset, true
				}
			}
			if len(got) < 10_000 {
				break
			}
			off = got[len(got)-1].Offset + 1
		}
	}
	return out, nil
}

// reportReplays waits, up to wait, for the App of the store in dir to
// process the replays (only while it runs: a stopped store does not
// move), then prints what it did with each.
func reportReplays(ctx context.Context, cl *iggy.Client, dlqTopic, dir string, wait time.Duration, replays []sentReplay, stdout io.Writer) error {
	deadline := time.Now().Add(wait)
	for {
		st, err := state.Open(ctx, dir)
		if err != nil {
			return fmt.Errorf("report: %w", storeError(dir, err))
		}
		pending, err := unprocessed(st, replays)
		if err == nil && pending > 0 && st.Live() != nil && time.Now().Before(deadline) {
			_ = st.Close()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if err == nil {
			err = classify(ctx, cl, dlqTopic, st, replays, stdout)
		}
		return errors.Join(err, st.Close())
	}
}

// unprocessed counts the replays the store's checkpoints are not past.
func unprocessed(st *state.Store, replays []sentReplay) (int, error) {
	n := 0
	for _, r := range replays {
		if !r.found {
			continue
		}
		next, _, err := st.Checkpoint(r.dest, r.partition)
		if err != nil {
			return 0, err
		}
		if next <= r.offset {
			n++
		}
	}
	return n, nil
}

// classify prints what the store says of each replay.
func classify(ctx context.Context, cl *iggy.Client, dlqTopic string, st *state.Store, replays []sentReplay, stdout io.Writer) error {
	type at struct {
		src  string
		part uint32
		off  uint64
	}
	held := map[at]state.HeldKey{}
	hk, err := st.Held(ctx)
	if err != nil {
		return err
	}
	for _, h := range hk {
		for _, r := range h.Records {
			held[at{h.Source, h.Partition, r.Offset}] = h
		}
	}
	parked := map[at]state.ParkedKey{}
	pk, err := st.Parked(ctx)
	if err != nil {
		return err
	}
	for _, p := range pk {
		for _, r := range p.Records {
			parked[at{p.Source, p.Partition, r.Offset}] = p
		}
	}
	refused := map[at]deadletter.Letter{}
	pending, err := st.DeadLetters(ctx)
	if err != nil {
		return err
	}
	published, _, _, err := readDeadLetters(ctx, cl, dlqTopic, &filter{partition: -1, to: ^uint64(0)})
	if err != nil {
		return err
	}
	for _, d := range pending {
		refused[at{d.Source, d.Partition, d.Offset}] = d
	}
	for _, s := range published {
		refused[at{s.letter.Source, s.letter.Partition, s.letter.Offset}] = s.letter
	}
	var applied, nHeld, nParked, nRefused, notYet, dropped, lost int
	var lines []string
	for _, r := range replays {
		what := fmt.Sprintf("the replay of %s partition %d offset %d (key %s) at %s partition %d offset %d", r.letter.Source, r.letter.Partition, r.letter.Offset,
			keyText(r.letter.Headers.Key), r.dest, r.partition, r.offset)
		if !r.found {
			lost++
			lines = append(lines, fmt.Sprintf("  not found in %s (the broker acknowledged it): %s", r.dest, keyText(r.letter.Headers.Key)))
			continue
		}
		k := at{r.dest, r.partition, r.offset}
		ok := false
		if len(r.origin) > 0 {
			if ok, err = st.Processed(r.dest, r.partition, r.origin); err != nil {
				return err
			}
		}
		next, _, err := st.Checkpoint(r.dest, r.partition)
		if err != nil {
			return err
		}
		switch h, isHeld := held[k]; {
		case isHeld:
			nHeld++
			lines = append(lines, fmt.Sprintf("  held: %s, behind an open gap of its key (it waits for sequence number %d)", what, h.Next))
		case parked[k].Key != nil:
			nParked++
			lines = append(lines, fmt.Sprintf("  parked: %s, after %d failed tries: %s", what, parked[k].Attempts, parked[k].LastError))
		case refused[k].Reason != 0:
			nRefused++
			d := refused[k]
			errText := ""
			if d.Err != nil {
				errText = ": " + d.Err.Error()
			}
			lines = append(lines, fmt.Sprintf("  dead-lettered again: %s, %s%s", what, d.Reason, errText))
		case ok:
			applied++
		case next <= r.offset:
			notYet++
		default:
			dropped++
			lines = append(lines, fmt.Sprintf("  dropped: %s (the App had applied this replay before)", what))
		}
	}
	from := "the stopped store"
	if l := st.Live(); l != nil {
		from = fmt.Sprintf("the running App (pid %d)", l.PID)
	}
	fmt.Fprintf(stdout, "report from %s at %s: of %d replayed events, %d applied, %d held, %d parked, %d dead-lettered again, %d not processed yet, %d dropped",
		from, st.Dir(), len(replays), applied, nHeld, nParked, nRefused, notYet, dropped)
	if lost > 0 {
		fmt.Fprintf(stdout, ", %d not found", lost)
	}
	fmt.Fprintln(stdout)
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	if notYet > 0 {
		fmt.Fprintf(stdout, "  (%d not processed yet: the App is stopped, or did not reach them within -wait; see 'strand lag')\n", notYet)
	}
	return nil
}
