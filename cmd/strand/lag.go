package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/strand-io/strand/stream/state"
)

func lag(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("lag", stderr)
	var cf connFlags
	cf.register(fs, getenv)
	dir := fs.String("dir", "", "the App's state directory (the dir given to topology.Open; required)")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("lag: -dir is required")
	}
	in, err := inspectDir(ctx, *dir)
	if err != nil {
		return err
	}
	cl, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	w := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "SOURCE\tPARTITION\tCHECKPOINT\tEND\tLAG\t")
	var total uint64
	var changed []string // partitions whose log ends before the checkpoint
	for _, src := range in.Sources {
		s, t, err := splitTopic(src.Name)
		if err != nil {
			return fmt.Errorf("source %q: %w", src.Name, err)
		}
		ends, err := cl.EndOffsets(ctx, s, t)
		if err != nil {
			return topicError(src.Name, "end offsets of source", err)
		}
		if src.Partitions != 0 && uint32(len(ends)) != src.Partitions {
			changed = append(changed, fmt.Sprintf("source %q has %d partitions, the state was written with %d", src.Name, len(ends), src.Partitions))
		}
		for p, end := range ends {
			next := src.Checkpoints[uint32(p)]
			if next > end {
				changed = append(changed, fmt.Sprintf("source %q partition %d: the checkpoint %d is beyond the log's end %d", src.Name, p, next, end))
			}
			l := uint64(0)
			if end > next {
				l = end - next
			}
			total += l
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t\n", src.Name, p, next, end, l)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "total lag %d records\n", total)
	if len(changed) > 0 {
		for _, c := range changed {
			fmt.Fprintln(stdout, c)
		}
		return fmt.Errorf("lag: the log is not the one the state at %s was built from (a topic deleted and created again, "+
			"partitions added, or records lost by the broker): an App refuses to start on it; to rebuild the state from the log, "+
			"stop every instance, move the state directory away and start again", *dir)
	}
	waiting(stdout, in)
	return nil
}

// waiting prints what the store holds past its checkpoints that is not
// done: held records (open gaps), parked keys, pending dead letters and
// outbox messages. Lag counts none of them; an App is caught up only when
// both are zero.
func waiting(w io.Writer, in *state.Summary) {
	held, parked, dls, outbox := in.Waiting()
	heldKeys, parkedKeys := 0, 0
	for _, h := range in.Held {
		heldKeys += h.Keys
	}
	for _, p := range in.Parked {
		parkedKeys += p.Keys
	}
	if held+parked+dls+outbox+parkedKeys == 0 {
		fmt.Fprintln(w, "waiting: nothing (no held records, open gaps, parked keys, pending dead letters or outbox messages)")
		return
	}
	fmt.Fprintf(w, "waiting (past the checkpoints, not done; not counted in the lag):\n")
	if held > 0 {
		fmt.Fprintf(w, "  %d records held by the re-sequencer behind open gaps of %d keys\n", held, heldKeys)
	}
	if parkedKeys > 0 {
		fmt.Fprintf(w, "  %d parked keys (%d records) waiting for a retry or an Unblock\n", parkedKeys, parked)
	}
	if dls > 0 {
		fmt.Fprintf(w, "  %d dead letters waiting to be published\n", dls)
	}
	if outbox > 0 {
		fmt.Fprintf(w, "  %d To/KeyBy messages waiting to be published\n", outbox)
	}
	fmt.Fprintln(w, "  (see 'strand inspect DIR' for where)")
}

// inspectDir sums up a state directory (stream/state): read directly, or
// through the App that has it open when it serves live inspection.
func inspectDir(ctx context.Context, dir string) (*state.Summary, error) {
	st, err := state.Open(ctx, dir)
	if err != nil {
		return nil, storeError(dir, err)
	}
	defer st.Close()
	return st.Summary(ctx)
}

// origin says where a report came from, when not simply the directory.
func origin(w io.Writer, in *state.Summary) {
	switch {
	case in.Live != nil:
		fmt.Fprintf(w, "  live: the store is open in a running App (pid %d, open since %s): this report is read from a consistent copy the App made of it (live inspection at %s)\n",
			in.Live.PID, in.Live.Since.Format(time.RFC3339), in.Live.Addr)
	case in.Stale != nil:
		fmt.Fprintf(w, "  the App that had it open last (pid %d, open since %s) did not close it: it crashed or was killed; read from the directory\n",
			in.Stale.PID, in.Stale.Since.Format(time.RFC3339))
	}
}

func inspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
	if err := parse(fs, args, true); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("inspect: want one state directory, got %d arguments", fs.NArg())
	}
	in, err := inspectDir(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "store %s\n  layout %d, topology fingerprint %s\n", in.Dir, in.Layout, in.Fingerprint)
	origin(stdout, in)
	w := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "\nsources\tpartitions\tcheckpoints (partition:next)")
	for _, s := range in.Sources {
		parts := make([]uint32, 0, len(s.Checkpoints))
		for p := range s.Checkpoints {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		cps := ""
		for _, p := range parts {
			cps += fmt.Sprintf("%d:%d ", p, s.Checkpoints[p])
		}
		if cps == "" {
			cps = "none"
		}
		fmt.Fprintf(w, "  %s\t%d\t%s\n", s.Name, s.Partitions, cps)
	}
	for _, s := range in.Sources {
		parts := make([]uint32, 0, len(s.Rebuilding))
		for p := range s.Rebuilding {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		for _, p := range parts {
			fmt.Fprintf(w, "  %s partition %d\trebuilding after a reset: at %d of %d (nothing published again below %d)\t\n",
				s.Name, p, s.Checkpoints[p], s.Rebuilding[p], s.Rebuilding[p])
		}
	}
	for _, b := range in.Builds {
		if b.HandedOver {
			fmt.Fprintf(w, "  table %s partition %d\tbuilt in the background: handed over to the main pipeline at %d\t\n", b.Table, b.Partition, b.Next)
		} else {
			fmt.Fprintf(w, "  table %s partition %d\tbuilt in the background from %s: at %d\t\n", b.Table, b.Partition, b.Source, b.Next)
		}
	}
	fmt.Fprintln(w, "\ntables\trows\t")
	for _, t := range in.Tables {
		fmt.Fprintf(w, "  %s\t%d\t\n", t.Name, t.Rows)
	}
	fmt.Fprintln(w, "\nparked\tkeys\trecords")
	for _, p := range in.Parked {
		fmt.Fprintf(w, "  %s partition %d\t%d\t%d\n", p.Source, p.Partition, p.Keys, p.Records)
	}
	if len(in.Parked) == 0 {
		fmt.Fprintln(w, "  none\t\t")
	}
	fmt.Fprintln(w, "\nheld (open gaps)\tkeys\trecords\toldest")
	for _, h := range in.Held {
		fmt.Fprintf(w, "  %s partition %d\t%d\t%d\t%s\n", h.Source, h.Partition, h.Keys, h.Records, h.Oldest.UTC().Format(time.RFC3339))
	}
	if len(in.Held) == 0 {
		fmt.Fprintln(w, "  none\t\t\t")
	}
	fmt.Fprintln(w, "\noutbox (To, KeyBy)\tmessages\t")
	for _, o := range in.Outbox {
		fmt.Fprintf(w, "  %s partition %d\t%d\t\n", o.Source, o.Partition, o.Messages)
	}
	if len(in.Outbox) == 0 {
		fmt.Fprintln(w, "  none\t\t")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\npending dead letters: %d\n", len(in.PendingDeadLetters))
	for _, d := range in.PendingDeadLetters {
		fmt.Fprintf(stdout, "  %s partition %d offset %d: %s, key %s\n", d.Source, d.Partition, d.Offset, d.Reason, keyText(d.Headers.Key))
	}
	return nil
}
