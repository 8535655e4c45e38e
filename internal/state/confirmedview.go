package state

import (
	"context"

	"github.com/strand-io/strand/internal/strerr"
	"math"
	"sync"
	"sync/atomic"
)

// The confirmed view of a partition (docs/design.md §2, "a read that
// never waits in a group").
//
// In a group a read may show only commits the partition's changelog has
// confirmed (ReadGate). Waiting for the changelog costs a read one
// publish-and-read-back round whenever a commit ran just before it. The
// non-waiting reads (GetRecent, ScanPartitionRecent) answer instead from
// the newest durable view whose rows of the partition are all confirmed:
// every such read hands the newest view taken (recentView) to the
// partition as a candidate
// (at most maxCandidates, oldest kept, as those are confirmed first); a
// candidate whose head row (the partition's last commit in it) the
// ConfirmedCheck says is confirmed becomes the partition's confirmed view,
// and the older ones are dropped. A read never waits (unless the
// partition has no confirmed view yet: right after a restore, or the
// first read) and never shows anything older than an earlier answer: the
// confirmed view only moves forward, and a waiting read that confirmed a
// newer view moves it there too.
//
// A restore replaces a partition's rows wholesale: ResetConfirmedView
// drops the partition's views when it starts and, when it ends, makes
// only views taken after every restore write returned eligible.

// maxCandidates bounds the candidate views a partition keeps (each holds a
// Pebble snapshot, which keeps old versions of rows from compaction).
const maxCandidates = 8

// ConfirmedCheck reports, without waiting, whether every commit of
// partition p up to the one whose head row (FamilyLogHead) is head is
// confirmed, so that a view holding them may be shown; head nil asks only
// whether p may be answered here. It returns an error, as a ReadGate does,
// when p can no longer be answered here (it moved before its commits were
// confirmed, or the lease does not hold).
type ConfirmedCheck func(p uint32, head []byte) (bool, error)

// confirmedViews is a DB's confirmed views by partition.
type confirmedViews struct {
	check atomic.Pointer[ConfirmedCheck]
	mu    sync.Mutex
	parts map[uint32]*confirmedPart
}

// installed returns the ConfirmedCheck, or nil.
func (cv *confirmedViews) installed() ConfirmedCheck {
	if c := cv.check.Load(); c != nil {
		return *c
	}
	return nil
}

// confirmedPart is one partition's confirmed view and candidates; guarded
// by confirmedViews.mu.
type confirmedPart struct {
	// minGen: views with a lower gen predate the partition's last restore
	// (math.MaxUint64 while one runs).
	minGen    uint64
	conf      *view   // the newest view whose rows of p are confirmed
	candidate []*view // newer than conf, by rising gen
}

func (cp *confirmedPart) releaseAll() {
	if cp.conf != nil {
		cp.conf.release()
		cp.conf = nil
	}
	for _, v := range cp.candidate {
		v.release()
	}
	cp.candidate = nil
}

// SetConfirmedCheck installs c (nil removes it and drops every confirmed
// view): with it, GetRecent and ScanPartitionRecent answer from the
// partition's newest confirmed view instead of waiting for the ReadGate.
func (db *DB) SetConfirmedCheck(c ConfirmedCheck) {
	cv := &db.cviews
	if c != nil {
		cv.check.Store(&c)
		return
	}
	cv.check.Store(nil)
	cv.mu.Lock()
	for _, cp := range cv.parts {
		cp.releaseAll()
	}
	cv.parts = nil
	cv.mu.Unlock()
}

// ResetConfirmedView drops partition p's confirmed view and candidates: a
// restore of p calls it with hold when it begins (no view is confirmed for
// p until it ends) and without when it ends (from then on only views that
// hold every write returned so far are eligible). Forgetting p calls it
// without hold.
func (db *DB) ResetConfirmedView(p uint32, hold bool) {
	cv := &db.cviews
	cv.mu.Lock()
	defer cv.mu.Unlock()
	cp := cv.part(p)
	cp.releaseAll()
	if hold {
		cp.minGen = math.MaxUint64
	} else {
		cp.minGen = db.views.gen.Load()
	}
}

// part returns p's entry, creating it. Called with cv.mu held.
func (cv *confirmedViews) part(p uint32) *confirmedPart {
	if cv.parts == nil {
		cv.parts = map[uint32]*confirmedPart{}
	}
	cp := cv.parts[p]
	if cp == nil {
		cp = &confirmedPart{}
		cv.parts[p] = cp
	}
	return cp
}

// headIn returns the head row of partition p in v (nil when there is none).
func headIn(v *view, p uint32) ([]byte, error) {
	var head []byte
	_, err := getIn(v, logHeadKey(p), func(val []byte) error {
		head = append([]byte(nil), val...)
		return nil
	})
	if err != nil {
		return nil, strerr.Errorf("strand: read the log head of partition %d: %w", p, err)
	}
	return head, nil
}

// confirmedView returns, with a reference the caller must release, the
// newest view whose rows of partition p are confirmed, without waiting; nil
// (and no error) when no ConfirmedCheck is installed or p has no
// confirmed view yet (the caller then reads as a waiting read does). The
// caller must have entered the DB.
func (db *DB) confirmedView(p uint32) (*view, error) {
	cv := &db.cviews
	check := cv.installed()
	if check == nil {
		return nil, nil
	}
	// The newest view taken, without waiting for an fsync (recentView
	// starts an advance when commits returned since it was taken): as
	// GetRecent outside a group, an answer may miss what returned since
	// the last read took a view. Holding every returned write instead
	// (readView) cost the query server's p99 tens of ms under load.
	cur, err := db.recentView()
	if err != nil {
		return nil, err
	}
	defer cur.release()
	cv.mu.Lock()
	defer cv.mu.Unlock()
	cp := cv.part(p)
	if cur.gen >= cp.minGen && (cp.conf == nil || cur.gen > cp.conf.gen) {
		switch n := len(cp.candidate); {
		case n == 0 || cp.candidate[n-1].gen < cur.gen && n < maxCandidates:
			cur.refs.Add(1)
			cp.candidate = append(cp.candidate, cur)
		case cp.candidate[n-1].gen < cur.gen:
			// Full: the newest candidate gives way to the current view.
			cp.candidate[n-1].release()
			cur.refs.Add(1)
			cp.candidate[n-1] = cur
		}
	}
	// The newest candidate that is confirmed replaces the view.
	for i := len(cp.candidate) - 1; i >= 0; i-- {
		head, err := headIn(cp.candidate[i], p)
		if err != nil {
			return nil, err
		}
		ok, err := check(p, head)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if cp.conf != nil {
			cp.conf.release()
		}
		cp.conf = cp.candidate[i]
		for _, v := range cp.candidate[:i] {
			v.release()
		}
		cp.candidate = append(cp.candidate[:0], cp.candidate[i+1:]...)
		break
	}
	if cp.conf == nil {
		return nil, nil
	}
	// The lease, and that p may still be answered here.
	if _, err := check(p, nil); err != nil {
		return nil, err
	}
	cp.conf.refs.Add(1)
	return cp.conf, nil
}

// promoteConfirmed records that a waiting read found view v's rows of p
// confirmed (its ReadGate passed after v was taken): later non-waiting
// reads of p never answer from an older view.
func (db *DB) promoteConfirmed(p uint32, v *view) {
	cv := &db.cviews
	if cv.installed() == nil {
		return
	}
	cv.mu.Lock()
	defer cv.mu.Unlock()
	cp := cv.part(p)
	if v.gen < cp.minGen || (cp.conf != nil && cp.conf.gen >= v.gen) {
		return
	}
	if cp.conf != nil {
		cp.conf.release()
	}
	v.refs.Add(1)
	cp.conf = v
	keep := cp.candidate[:0]
	for _, c := range cp.candidate {
		if c.gen <= v.gen {
			c.release()
		} else {
			keep = append(keep, c)
		}
	}
	cp.candidate = keep
}

// closeConfirmedViews drops every confirmed view; Close calls it once no
// reader is left.
func (db *DB) closeConfirmedViews() {
	cv := &db.cviews
	cv.mu.Lock()
	defer cv.mu.Unlock()
	for _, cp := range cv.parts {
		cp.releaseAll()
	}
	cv.parts = nil
}

// recentConfirmed returns the view a non-waiting read of partition p
// answers from, with a reference to release: the confirmed view when a
// ConfirmedCheck is installed and p has one, else a view read as a
// waiting read does (a view holding every returned write), after the
// ReadGate passed (and then promoted). The caller must have entered the DB.
func (db *DB) recentConfirmed(ctx context.Context, p uint32) (*view, error) {
	v, err := db.confirmedView(p)
	if err != nil || v != nil {
		return v, err
	}
	if db.gated() || db.cviews.installed() != nil {
		// Every returned write: a view from before a restore of p
		// would show older rows than the confirmed views did.
		v, err = db.readView()
	} else {
		v, err = db.recentView()
	}
	if err != nil {
		return nil, err
	}
	if err := db.confirmRead(ctx, p); err != nil {
		v.release()
		return nil, err
	}
	db.promoteConfirmed(p, v)
	return v, nil
}
