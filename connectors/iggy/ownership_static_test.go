package iggy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/internal/scaleout/membership"
	"github.com/strand-io/strand/internal/testrun"
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
	testrun.WaitFor(t, bound, func() error {
		if a.m.Err() == nil {
			return errors.New("the first incarnation was not fenced")
		}
		return nil
	})
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
// bounded tail) and agrees with one that replays the whole log. 6,000
// records of history with a snapshot every 1,000 in the default run; 30,000
// and 5,000 with STRAND_SOAK=1.
//
// Where the snapshots land depends on how far the oldest member had read
// when it wrote them (it may lag behind the appends), so the test does not
// assume one lands past the history: it waits for what the oldest member
// guarantees once it has read the whole log, a snapshot whose state
// covers all but fewer than every records of it, and asserts that the
// joining member starts from that snapshot or a later one.
func TestGroupJoinStartsFromASnapshot(t *testing.T) {
	history := sized(6_000, 30_000)
	every := history / 6
	h := newGroupHarness(t, 4, WithSessionTimeout(longSession), WithMembershipSnapshots(every))
	a := h.join("a")
	h.waitSettled(bound)
	recs := make([]membership.Record, history)
	for i := range recs {
		recs[i] = membership.Record{Kind: membership.KindBeat, M: a.m.ID()}
	}
	appendRecords(t, h.admin, h.stream, "strand-members-accounts", recs)
	ends, err := h.admin.EndOffsets(ctxT(t, 5*time.Second), h.stream, "strand-members-accounts")
	if err != nil {
		t.Fatal(err)
	}
	end := ends[0] // the history and a's records so far
	// a reads the history and writes snapshots until the latest covers all
	// but fewer than every records of the log it read; the bookmark points
	// at it.
	mark, at := waitSnapshotCovering(t, h, end-uint64(every))
	start := time.Now()
	b := h.join("b")
	withSnap := time.Since(start)
	start = time.Now()
	c := h.join("c", WithMembershipSnapshots(0))
	withoutSnap := time.Since(start)
	t.Logf("join after %d records: %v from the snapshot at offset %d (its state as of offset %d), %v replaying the log",
		end, withSnap.Round(time.Microsecond), mark, at, withoutSnap.Round(time.Microsecond))
	if b.m.loadedFrom < mark || c.m.loadedFrom != 0 {
		t.Fatalf("b started from the snapshot at %d (the latest was at %d before it joined), c from %d (want the log's start)", b.m.loadedFrom, mark, c.m.loadedFrom)
	}
	h.waitSettled(bound) // every member sees the same members and owners
}

// waitSnapshotCovering waits until the bookmark of the membership snapshot
// points at a snapshot whose state is as of offset from or later, and
// returns the snapshot's offset and the offset its state is as of. The
// deadline is a hang guard.
func waitSnapshotCovering(t *testing.T, h *groupHarness, from uint64) (mark, at uint64) {
	t.Helper()
	tr, err := newTopicRef(h.stream, "strand-members-accounts")
	if err != nil {
		t.Fatal(err)
	}
	testrun.WaitFor(t, 2*time.Minute, func() error {
		bm, ok, err := h.admin.Bookmark(ctxT(t, 5*time.Second), tr.String(), 0, membershipSnapshotBookmark)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			var pm *iggcon.PolledMessage
			err := h.admin.admin.call(ctxT(t, 5*time.Second), func(s *session) error {
				var err error
				pm, err = s.poll(tr, 0, bm, 1)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(pm.Messages) != 1 || pm.Messages[0].Header.Offset != bm {
				t.Fatalf("the bookmark points at offset %d, which does not hold one message", bm)
			}
			r, ok := membership.DecodeRecord(pm.Messages[0].Payload)
			_, asOf, snap := membership.FromSnapshot(r)
			if !ok || !snap {
				t.Fatalf("the bookmark points at offset %d, which holds no snapshot: %q", bm, pm.Messages[0].Payload)
			}
			if asOf >= from {
				mark, at = bm, asOf
				return nil
			}
		}
		return fmt.Errorf("no snapshot as of offset %d or later (bookmark %d, %v)", from, bm, ok)
	})
	return mark, at
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
		waitSnapshotCovering(t, h, uint64(n-DefaultMembershipSnapshotEvery))
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
