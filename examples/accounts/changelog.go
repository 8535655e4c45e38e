package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// The changelog of a group: one partition per source partition, in which
// every owner of the partition logs a fence when it takes the partition
// over and every commit it makes, each with its epoch, member and the
// source offsets it covers. This file reads it back and judges it as
// every reader must (docs/design.md, "Scale-out"), independently of the
// library's own reader, so that the check and the tests see for themselves
// that no two owners' commits ever both count.

// clVerdict is what the rules say about one changelog entry.
type clVerdict uint8

const (
	clValid     clVerdict = iota // a fence that raised the epoch, or a commit of the history
	clFenced                     // a deposed owner's commit (or fence) after a higher fence
	clDuplicate                  // a commit (or fence) sent again
	clOther                      // a snapshot record
)

func (v clVerdict) String() string {
	return [...]string{"valid", "fenced", "duplicate", "other"}[v]
}

// clEntry is one changelog record, decoded and judged.
type clEntry struct {
	Offset uint64
	topology.ChangelogEntry
	Verdict clVerdict
	// Current is the partition's epoch (its highest fence) when the
	// entry was read, before the entry.
	Current connector.Epoch
}

// clPartition is one partition's changelog, judged.
type clPartition struct {
	Partition uint32
	Entries   []clEntry
	// Counts of entries by kind and verdict.
	Fences, Commits, Fenced, Duplicates, Snapshots int
	// Next is where the valid history ends for the events source: the
	// Next of its last valid commit.
	Next uint64
	// Owners lists the members that fenced the partition, in order, with
	// their epochs.
	Owners []clOwner
	// Problems are the broken rules: a valid commit whose epoch is below
	// the previous one's or has no fence, of another member than the
	// epoch's fence, out of sequence, or whose offsets do not start where
	// the history's end (a gap, or an overlap with an earlier owner's).
	Problems []string
}

// clOwner is one ownership of a partition, from its fence.
type clOwner struct {
	Epoch  connector.Epoch
	Member connector.MemberID
	Offset uint64 // of its fence in the changelog
}

// judgeChangelog reads the entries of one partition in log order by the
// rules of the changelog: a fence raises the current epoch; a commit whose
// epoch is below it is fenced (a deposed owner's late work, which no
// reader applies); a commit of the last valid commit's epoch whose number
// is not above it is a duplicate; every other commit is the history's
// next, and must continue it exactly: number + 1, offsets of the source
// from where the last one ended, epoch not below the last one's and that
// of the fence that opened it, written by that fence's member.
func judgeChangelog(p uint32, source string, entries []clEntry) *clPartition {
	cp := &clPartition{Partition: p, Entries: entries}
	var cur connector.Epoch
	fencer := map[connector.Epoch]connector.MemberID{}
	var last *clEntry
	problem := func(e *clEntry, format string, args ...any) {
		if len(cp.Problems) < 20 {
			cp.Problems = append(cp.Problems, fmt.Sprintf("partition %d, changelog offset %d (%s epoch %d member %d seq %d): ",
				p, e.Offset, e.Kind, e.Epoch, e.Member, e.Seq)+fmt.Sprintf(format, args...))
		}
	}
	for i := range entries {
		e := &entries[i]
		e.Current = cur
		switch e.Kind {
		case topology.ChangelogFence:
			cp.Fences++
			switch {
			case e.Epoch > cur:
				cur = e.Epoch
				fencer[e.Epoch] = e.Member
				cp.Owners = append(cp.Owners, clOwner{Epoch: e.Epoch, Member: e.Member, Offset: e.Offset})
				e.Verdict = clValid
			case e.Epoch == cur && fencer[e.Epoch] == e.Member:
				e.Verdict = clDuplicate
			default:
				e.Verdict = clFenced
			}
		case topology.ChangelogCommit:
			cp.Commits++
			switch {
			case e.Epoch < cur:
				e.Verdict = clFenced
				cp.Fenced++
				continue
			case last != nil && e.Epoch == last.Epoch && e.Seq <= last.Seq:
				e.Verdict = clDuplicate
				cp.Duplicates++
				continue
			}
			e.Verdict = clValid
			if e.Epoch > cur {
				problem(e, "a commit of an epoch no fence opened (the partition's epoch is %d)", cur)
			} else if m := fencer[e.Epoch]; m != e.Member {
				problem(e, "a commit of epoch %d by member %d, whose fence member %d wrote", e.Epoch, e.Member, m)
			}
			var from, next uint64
			found := false
			for _, r := range e.Checkpoints {
				if r.Source == source {
					from, next, found = r.From, r.Next, true
				}
			}
			if found && next < from {
				problem(e, "offsets [%d, %d) run backwards", from, next)
			}
			if last != nil {
				if e.Epoch < last.Epoch {
					problem(e, "epoch %d after a valid commit of epoch %d", e.Epoch, last.Epoch)
				}
				if e.Seq != last.Seq+1 {
					problem(e, "commit number %d after %d", e.Seq, last.Seq)
				}
			}
			if found {
				if from != cp.Next {
					what := "a gap after"
					if from < cp.Next {
						what = "an overlap with"
					}
					by := "the start"
					if last != nil {
						by = fmt.Sprintf("member %d's commit %d (epoch %d)", last.Member, last.Seq, last.Epoch)
					}
					problem(e, "offsets [%d, %d) of %s: %s %s, which ended at %d", from, next, source, what, by, cp.Next)
				}
				cp.Next = next
			}
			last = e
		default:
			e.Verdict = clOther
			cp.Snapshots++
		}
	}
	return cp
}

// readChangelog reads the whole changelog of the accounts topology and
// judges every partition.
func (a *app) readChangelog(ctx context.Context) ([]*clPartition, error) {
	name := topology.ChangelogTopic(a.cfg.stream, bank.TopologyName(a.cfg.codec))
	streamName, topic, _ := strings.Cut(name, "/")
	ends, err := a.cl.EndOffsets(ctx, streamName, topic)
	if err != nil {
		return nil, fmt.Errorf("changelog %s: %w", name, err)
	}
	src, err := a.cl.OpenForeignSource(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("changelog %s: %w", name, err)
	}
	out := make([]*clPartition, len(ends))
	for p, end := range ends {
		var entries []clEntry
		var bad []string
		err := bank.ReadLog(ctx, src, uint32(p), end, func(rec connector.Record) error {
			e, err := topology.DecodeChangelog(rec.Payload)
			if err != nil {
				bad = append(bad, fmt.Sprintf("partition %d, changelog offset %d: %v", p, rec.Offset, err))
				return nil
			}
			entries = append(entries, clEntry{Offset: rec.Offset, ChangelogEntry: e})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("changelog %s: %w", name, err)
		}
		cp := judgeChangelog(uint32(p), a.cfg.source(), entries)
		cp.Problems = append(bad, cp.Problems...)
		out[p] = cp
	}
	return out, nil
}

// clSummary is what a check found in the changelog.
type clSummary struct {
	Partitions                          int
	Fences, Commits, Fenced, Duplicates int
	Snapshots                           int
	OwnershipChanges                    int // fences that raised an epoch, after each partition's first
	Members                             int // distinct members that fenced a partition
	Problems                            []string
}

// summarize sums the partitions' changelogs and checks that each one's
// valid history reaches its source partition's end.
func summarize(cps []*clPartition, ends []uint64) *clSummary {
	s := &clSummary{Partitions: len(cps)}
	members := map[connector.MemberID]bool{}
	for p, cp := range cps {
		s.Fences += cp.Fences
		s.Commits += cp.Commits
		s.Fenced += cp.Fenced
		s.Duplicates += cp.Duplicates
		s.Snapshots += cp.Snapshots
		s.OwnershipChanges += max(0, len(cp.Owners)-1)
		for _, o := range cp.Owners {
			members[o.Member] = true
		}
		s.Problems = append(s.Problems, cp.Problems...)
		if p < len(ends) && cp.Next != ends[p] {
			s.Problems = append(s.Problems, fmt.Sprintf("partition %d: the valid history ends at offset %d, the source partition at %d", p, cp.Next, ends[p]))
		}
	}
	if len(cps) != len(ends) {
		s.Problems = append(s.Problems, fmt.Sprintf("the changelog has %d partitions, the source %d", len(cps), len(ends)))
	}
	s.Members = len(members)
	return s
}

// reached reports whether the valid history of every partition reaches
// its source partition's end.
func (s *clSummary) reached(cps []*clPartition, ends []uint64) bool {
	if len(cps) != len(ends) {
		return false
	}
	for p, cp := range cps {
		if cp.Next < ends[p] {
			return false
		}
	}
	return true
}

// err returns the problems as one error, or nil.
func (s *clSummary) err() error {
	if s == nil || len(s.Problems) == 0 {
		return nil
	}
	shown := s.Problems
	more := ""
	if len(shown) > 5 {
		shown, more = shown[:5], fmt.Sprintf("; and %d more", len(s.Problems)-5)
	}
	return fmt.Errorf("%w: %s%s", errChangelog, strings.Join(shown, "; "), more)
}

// errChangelog is wrapped by the errors of a changelog that breaks its
// rules.
var errChangelog = errors.New("the changelog breaks its rules")
