package iggy

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/internal/scaleout/membership"
)

// longSession is a session timeout far beyond what a static member's
// restart may take: a takeover that waited for it would show.
const longSession = 30 * time.Second

func TestGroupStaticMemberRestartTakesItsPartitionsBackAtOnce(t *testing.T) {
	h := newGroupHarness(t, 6, WithSessionTimeout(longSession))
	a := h.join("a", WithInstanceID("A"))
	// b's claims are not traced: it is killed, and its successor claims
	// its partitions while its lease would still run, which is what a
	// stable instance id asserts is safe (the process is gone).
	b := h.join("b", WithInstanceID("B"), withTrace(nil))
	h.waitSettled(bound)
	old := b.m.Owned()
	aOwned := a.m.Owned()
	b.kill()
	start := time.Now()
	b2 := h.join("b-restarted", WithInstanceID("B"))
	h.waitSettled(longSession / 2)
	t.Logf("a restarted static member got its %d partitions back %v after its join (session timeout %v)", len(old), time.Since(start).Round(time.Millisecond), longSession)
	got := b2.m.Owned()
	if len(got) != len(old) {
		t.Fatalf("the restarted member owns %v, its previous incarnation owned %v", got, old)
	}
	for i, po := range got {
		if po.Partition != old[i].Partition || po.Epoch <= old[i].Epoch {
			t.Fatalf("the restarted member owns %v, its previous incarnation owned %v: want the same partitions with newer epochs", got, old)
		}
	}
	if now := a.m.Owned(); !slices.Equal(now, aOwned) {
		t.Fatalf("the other member's partitions changed: %v, before %v", now, aOwned)
	}
}

func TestGroupStaticMemberFencesALiveIncarnationWithItsID(t *testing.T) {
	h := newGroupHarness(t, 4, WithSessionTimeout(longSession))
	a := h.join("a", WithInstanceID("A"), withTrace(nil))
	h.waitSettled(bound)
	old := a.m.Owned()
	a2 := h.join("a-again", WithInstanceID("A"))
	deadline := time.Now().Add(bound)
	for a.m.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the first incarnation was not fenced")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := a.m.Err(); !errors.Is(err, ErrInstanceFenced) {
		t.Fatalf("first incarnation ended with %v, want ErrInstanceFenced", err)
	}
	if len(a.m.Owned()) != 0 {
		t.Fatalf("the fenced incarnation still claims %v", a.m.Owned())
	}
	h.waitSettled(bound)
	if got := a2.m.Owned(); len(got) != len(old) {
		t.Fatalf("the new incarnation owns %v, the old one owned %v", got, old)
	}
}

func TestGroupCleanLeaveHandsOverWithinAPoll(t *testing.T) {
	h := newGroupHarness(t, 4, WithSessionTimeout(longSession))
	h.join("a")
	b := h.join("b")
	h.waitSettled(bound)
	b.close()
	took := h.waitSettled(longSession / 2)
	t.Logf("a clean leave handed 2 partitions over in %v (poll %v, session timeout %v)", took, testPoll, longSession)
}

// appendRecords appends records to the membership log in batches, as a
// long history would have.
func appendRecords(t *testing.T, cl *Client, stream, topic string, recs []membership.Record) {
	t.Helper()
	tr, err := newTopicRef(stream, topic)
	if err != nil {
		t.Fatal(err)
	}
	for len(recs) > 0 {
		n := min(len(recs), 1000)
		msgs := make([]iggcon.IggyMessage, n)
		for i := range n {
			if msgs[i], err = iggcon.NewIggyMessage(recs[i].Encode()); err != nil {
				t.Fatal(err)
			}
		}
		recs = recs[n:]
		err := cl.admin.call(context.Background(), func(s *session) error {
			_, err := s.send(tr, 0, encodeSend(nil, s.proto, sendHead(tr.ids()), 0, msgs))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupJoinStartsFromASnapshot: after a long history of heartbeats, a
// member joining with snapshots starts from the latest one (it replays a
// bounded tail) and agrees with one that replays the whole log.
func TestGroupJoinStartsFromASnapshot(t *testing.T) {
	const history = 30_000
	h := newGroupHarness(t, 4, WithSessionTimeout(longSession), WithMembershipSnapshots(5000))
	a := h.join("a")
	h.waitSettled(bound)
	recs := make([]membership.Record, history)
	for i := range recs {
		recs[i] = membership.Record{Kind: membership.KindBeat, M: a.m.ID()}
	}
	appendRecords(t, h.admin, h.stream, "strand-members-accounts", recs)
	// a reads the history and writes a snapshot; the bookmark points at it.
	deadline := time.Now().Add(30 * time.Second)
	var mark uint64
	for {
		off, ok, err := h.admin.Bookmark(ctxT(t, 5*time.Second), h.stream+"/strand-members-accounts", 0, membershipSnapshotBookmark)
		if err != nil {
			t.Fatal(err)
		}
		if ok && off > history {
			mark = off
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot after the history (bookmark %d, %v)", off, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	b := h.join("b")
	withSnap := time.Since(start)
	start = time.Now()
	c := h.join("c", WithMembershipSnapshots(0))
	withoutSnap := time.Since(start)
	t.Logf("join after %d records: %v from the snapshot at offset %d, %v replaying the log", history, withSnap.Round(time.Microsecond), mark, withoutSnap.Round(time.Microsecond))
	if b.m.loadedFrom < history || c.m.loadedFrom != 0 {
		t.Fatalf("b started from %d, c from %d", b.m.loadedFrom, c.m.loadedFrom)
	}
	h.waitSettled(bound) // every member sees the same members and owners
}

// waitSnapshotPast waits until the bookmark of the membership snapshot
// points past offset off.
func waitSnapshotPast(t *testing.T, h *groupHarness, off uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mark, ok, err := h.admin.Bookmark(ctxT(t, 5*time.Second), h.stream+"/strand-members-accounts", 0, membershipSnapshotBookmark)
		if err != nil {
			t.Fatal(err)
		}
		if ok && mark > off {
			return mark
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot past offset %d (bookmark %d, %v)", off, mark, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGroupJoinCostFigures measures what a join costs after 10,000,
// 100,000 and 1,000,000 records of history, from the latest snapshot and
// replaying the log (benchmarks/HISTORY.md §23). Only with STRAND_SOAK=1.
func TestGroupJoinCostFigures(t *testing.T) {
	if os.Getenv("STRAND_SOAK") != "1" {
		t.Skip("a measurement: STRAND_SOAK=1")
	}
	h := newGroupHarness(t, 8, WithSessionTimeout(longSession))
	a := h.join("a")
	h.waitSettled(bound)
	have := 0
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		recs := make([]membership.Record, n-have)
		for i := range recs {
			recs[i] = membership.Record{Kind: membership.KindBeat, M: a.m.ID()}
		}
		appendRecords(t, h.admin, h.stream, "strand-members-accounts", recs)
		have = n
		waitSnapshotPast(t, h, uint64(n))
		start := time.Now()
		b := h.join("b")
		withSnap := time.Since(start)
		b.close()
		start = time.Now()
		c := h.join("c", WithMembershipSnapshots(0))
		without := time.Since(start)
		c.close()
		t.Logf("join after %9d records of history: %8v from the latest snapshot, %8v replaying the log",
			n, withSnap.Round(100*time.Microsecond), without.Round(100*time.Microsecond))
	}
}
