package main

import (
	"strings"
	"testing"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

const src = "bank/accounts"

func fence(e connector.Epoch, m connector.MemberID) clEntry {
	return clEntry{ChangelogEntry: topology.ChangelogEntry{Kind: topology.ChangelogFence, Epoch: e, Member: m}}
}

func commit(e connector.Epoch, m connector.MemberID, seq, from, next uint64) clEntry {
	return clEntry{ChangelogEntry: topology.ChangelogEntry{Kind: topology.ChangelogCommit, Epoch: e, Member: m, Seq: seq,
		Checkpoints: []topology.CheckpointRange{{Source: src, From: from, Next: next}}}}
}

func snapshot(e connector.Epoch, m connector.MemberID) clEntry {
	return clEntry{ChangelogEntry: topology.ChangelogEntry{Kind: topology.ChangelogSnapshot, Epoch: e, Member: m}}
}

// The changelog judge of the check: valid histories pass with the verdicts
// the library's own reader (topology.ChangelogHistory) gives, a deposed
// owner's late commits are fenced, and every broken rule (a gap, an
// overlap across owners, a commit of an epoch without its fence or by
// another member than the fence's, a commit number out of sequence) is a
// problem named with its place.
func TestJudgeChangelog(t *testing.T) {
	for _, tc := range []struct {
		name     string
		entries  []clEntry
		verdicts []clVerdict
		next     uint64
		owners   int
		problem  string // "" for none
	}{
		{"two owners", []clEntry{
			fence(1, 1), commit(1, 1, 1, 0, 10), commit(1, 1, 2, 10, 20), snapshot(1, 1),
			fence(5, 2), commit(5, 2, 3, 20, 25)},
			[]clVerdict{clValid, clValid, clValid, clOther, clValid, clValid}, 25, 2, ""},
		{"a zombie's late commit is fenced", []clEntry{
			fence(1, 1), commit(1, 1, 1, 0, 10), fence(5, 2), commit(1, 1, 2, 10, 30), commit(5, 2, 2, 10, 15)},
			[]clVerdict{clValid, clValid, clValid, clFenced, clValid}, 15, 2, ""},
		{"a commit sent twice", []clEntry{
			fence(1, 1), commit(1, 1, 1, 0, 10), commit(1, 1, 1, 0, 10), commit(1, 1, 2, 10, 12)},
			[]clVerdict{clValid, clValid, clDuplicate, clValid}, 12, 1, ""},
		{"a stale fence", []clEntry{
			fence(1, 1), fence(5, 2), fence(1, 1), commit(5, 2, 1, 0, 3)},
			[]clVerdict{clValid, clValid, clFenced, clValid}, 3, 2, ""},
		{"a gap", []clEntry{
			fence(1, 1), commit(1, 1, 1, 0, 10), commit(1, 1, 2, 11, 20)},
			nil, 20, 1, "offsets [11, 20) of bank/accounts: a gap after member 1's commit 1"},
		{"an overlap across owners", []clEntry{
			fence(1, 1), commit(1, 1, 1, 0, 10), fence(5, 2), commit(5, 2, 2, 8, 20)},
			nil, 20, 2, "an overlap with member 1's commit 1 (epoch 1), which ended at 10"},
		{"a commit of an epoch without its fence", []clEntry{
			fence(1, 1), commit(1, 1, 1, 0, 10), commit(7, 3, 2, 10, 20)},
			nil, 20, 1, "a commit of an epoch no fence opened"},
		{"a commit by another member than the fence's", []clEntry{
			fence(1, 1), commit(1, 2, 1, 0, 10)},
			nil, 10, 1, "by member 2, whose fence member 1 wrote"},
		{"a commit number out of sequence", []clEntry{
			fence(1, 1), commit(1, 1, 1, 0, 10), commit(1, 1, 3, 10, 20)},
			nil, 20, 1, "commit number 3 after 1"},
		{"the first commit does not start at 0", []clEntry{
			fence(1, 1), commit(1, 1, 1, 5, 10)},
			nil, 10, 1, "a gap after the start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.entries {
				tc.entries[i].Offset = uint64(i)
			}
			cp := judgeChangelog(3, src, tc.entries)
			if cp.Next != tc.next || len(cp.Owners) != tc.owners {
				t.Errorf("next %d, %d owners; want %d, %d", cp.Next, len(cp.Owners), tc.next, tc.owners)
			}
			switch {
			case tc.problem == "" && len(cp.Problems) > 0:
				t.Errorf("problems in a valid history: %v", cp.Problems)
			case tc.problem != "" && (len(cp.Problems) != 1 || !strings.Contains(cp.Problems[0], tc.problem) || !strings.Contains(cp.Problems[0], "partition 3, changelog offset")):
				t.Errorf("problems %q, want one saying %q", cp.Problems, tc.problem)
			}
			if tc.verdicts == nil {
				return
			}
			var lib topology.ChangelogHistory
			for i, e := range cp.Entries {
				if e.Verdict != tc.verdicts[i] {
					t.Errorf("entry %d (%s epoch %d seq %d): %s, want %s", i, e.Kind, e.Epoch, e.Seq, e.Verdict, tc.verdicts[i])
				}
				want := map[clVerdict]topology.ChangelogVerdict{clValid: topology.ChangelogValid, clFenced: topology.ChangelogFenced,
					clDuplicate: topology.ChangelogDuplicate, clOther: topology.ChangelogOther}[e.Verdict]
				got := lib.Judge(e.ChangelogEntry)
				if e.Kind == topology.ChangelogFence && e.Verdict != clValid {
					want = topology.ChangelogOther // the library does not name stale fences
				}
				if got != want {
					t.Errorf("entry %d (%s epoch %d seq %d): the library's reader says %s, this judge %s", i, e.Kind, e.Epoch, e.Seq, got, e.Verdict)
				}
			}
		})
	}
}
